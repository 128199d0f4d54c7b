package penumbra.hadoop;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermissions;

import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * Hadoop's local file system (checksummed), but a file's permissions are set through java.nio.
 * Without Hadoop's native library, which the pip package of PySpark does not carry, Hadoop sets
 * them by starting a chmod process for every file it creates: 3.5 ms each, six or seven a
 * micro-batch of the job (its offset and commit logs, each state store's changelog, their
 * checksums). The permissions set are the same.
 */
public class LocalFileSystem extends org.apache.hadoop.fs.LocalFileSystem {
    public LocalFileSystem() {
        super(new Raw());
    }

    /** The raw local file system, permissions set without a process. */
    public static class Raw extends org.apache.hadoop.fs.RawLocalFileSystem {
        @Override
        public void setPermission(Path path, FsPermission permission) throws IOException {
            if (permission.getStickyBit()) {
                super.setPermission(path, permission);
                return;
            }
            String symbolic = permission.getUserAction().SYMBOL + permission.getGroupAction().SYMBOL
                    + permission.getOtherAction().SYMBOL;
            Files.setPosixFilePermissions(pathToFile(path).toPath(), PosixFilePermissions.fromString(symbolic));
        }
    }
}
