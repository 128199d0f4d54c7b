"""The job's JVM starts with the settings' options (by default the JIT's C1 alone, no C2)
and Spark's classes mapped from the archive ``make setup`` builds, talks to its Python
workers over Unix sockets, writes its checkpoint through Penumbra's local file system (no
chmod process a file), and keeps its temporary files in a folder of its own."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from spark_jobs.job import LOCAL_FILE_SYSTEM, LOCAL_FILE_SYSTEM_JAR
from spark_jobs.settings import CLASS_ARCHIVE, QUICK_JIT, JobSettings
from tests.integration.conftest import command_lines


def test_the_jobs_jvm_compiles_with_c1_alone(pipeline):
    assert JobSettings().java_options == QUICK_JIT
    # the JVM of the job's process group (the job starts a session of its own)
    jvm, argv = pipeline.jvm()
    assert QUICK_JIT.encode() in argv
    threads = [name for name in map(_thread_name, Path(f"/proc/{jvm}/task").iterdir()) if name is not None]
    assert any(name.startswith("C1 CompilerThre") for name in threads), threads
    assert not any(name.startswith("C2 CompilerThre") for name in threads), threads


def test_the_jobs_python_workers_talk_to_its_jvm_over_unix_sockets(pipeline):
    pipeline.sync()  # a batch has run: its read tasks took Python workers
    # the daemon (in a process group of its own) is the JVM's child, the workers the daemon's
    jvm, _ = pipeline.jvm()
    processes = command_lines()
    daemons = [pid for pid in _children(jvm) if b"pyspark.daemon" in processes.get(pid, [])]
    assert daemons, "no Python daemon under the job's JVM"
    workers = daemons + [child for daemon in daemons for child in _children(daemon)]
    environ = Path(f"/proc/{min(workers)}/environ").read_bytes().split(b"\0")
    assert b"python_unix_domain_enabled=true" in [entry.lower() for entry in environ]  # Spark writes "True"
    unix = _socket_inodes("/proc/net/unix", column=6)
    tcp = _socket_inodes("/proc/net/tcp", column=9) | _socket_inodes("/proc/net/tcp6", column=9)
    held = {pid: _sockets_of(pid) for pid in workers}
    # the daemon and the workers it forked: each worker's channel to the JVM is a Unix socket
    assert any(sockets & unix for sockets in held.values()), held
    assert all(not (sockets & tcp) or sockets & unix for sockets in held.values()), held


def test_the_jobs_jvm_maps_sparks_classes_from_the_archive(pipeline):
    assert CLASS_ARCHIVE.exists(), "make setup builds it (scripts/build-class-archive.py)"
    jvm, argv = pipeline.jvm()
    assert f"-XX:SharedArchiveFile={CLASS_ARCHIVE}".encode() in argv
    # a JVM that cannot use the archive says so and starts without it: mapped, it is in use
    assert str(CLASS_ARCHIVE) in Path(f"/proc/{jvm}/maps").read_text()
    assert "Unable to use shared archive" not in pipeline.job.log.read_text(errors="replace")



def test_the_jobs_temporary_files_are_in_a_folder_of_its_own(pipeline):
    pipeline.sync()  # a batch has run: its state stores loaded RocksDB's native library
    jvm, _ = pipeline.jvm()
    folder = pipeline.scratch()
    # the job process's own: named by its pid, under this user's folder in the system's temporary folder
    assert folder.parent == Path(tempfile.gettempdir()) / f"penumbra-{os.getuid()}"
    assert folder.name.split("-")[0] == str(pipeline.job.process.pid)
    assert folder.parent.stat().st_mode & 0o777 == 0o700 and folder.stat().st_mode & 0o777 == 0o700
    # what the JVM unpacked (the native libraries it mapped), and Spark's local folders
    unpacked = {line.split()[-1] for line in Path(f"/proc/{jvm}/maps").read_text().splitlines()
                if "librocksdbjni" in line or "liblz4" in line}
    assert any("librocksdbjni" in path for path in unpacked), unpacked
    assert all(Path(path).parent == folder for path in unpacked), unpacked
    assert list(folder.glob("blockmgr-*")), sorted(p.name for p in folder.iterdir())


#: a flight recording of the processes a JVM starts, and nothing else
PROCESS_STARTS = """<?xml version="1.0" encoding="UTF-8"?>
<configuration version="2.0">
  <event name="jdk.ProcessStart"><setting name="enabled">true</setting><setting name="stackTrace">false</setting></event>
</configuration>
"""


def test_the_jobs_checkpoint_is_written_without_a_process_a_file(pipeline, tmp_path):
    assert LOCAL_FILE_SYSTEM_JAR.exists(), "make setup builds it (scripts/build-hadoop-fs.sh)"
    jvm, argv = pipeline.jvm()
    assert any(str(LOCAL_FILE_SYSTEM_JAR).encode() in arg for arg in argv), argv
    assert f"spark.hadoop.fs.file.impl={LOCAL_FILE_SYSTEM}".encode() in b" ".join(argv)
    pipeline.sync()
    checkpoint = pipeline.home / "var" / "checkpoint"
    before = set(checkpoint.rglob("*"))
    # every batch writes its offset and commit logs and a changelog per state store: files
    # whose permissions Hadoop's own local file system sets by starting a chmod process each
    (tmp_path / "processes.jfc").write_text(PROCESS_STARTS)
    recording = tmp_path / "processes.jfr"
    _jdk("jcmd", str(jvm), "JFR.start", "name=processes", f"settings={tmp_path / 'processes.jfc'}",
         f"filename={recording}")
    try:
        for _ in range(3):
            pipeline.sync()
    finally:
        _jdk("jcmd", str(jvm), "JFR.stop", "name=processes")
    written = [path for path in set(checkpoint.rglob("*")) - before if path.is_file()]
    assert any(path.parent.name == "offsets" for path in written)
    assert any(path.suffix == ".changelog" for path in written), written
    started = _jdk("jfr", "print", "--events", "jdk.ProcessStart", str(recording))
    assert "chmod" not in started, started
    # the permissions Hadoop gives (rw-r--r--), also for a file written while the test ran
    assert all(path.stat().st_mode & 0o777 == 0o644 for path in written if not path.name.startswith("."))


def _jdk(tool: str, *args: str) -> str:
    """A JDK tool's output (the JDK javac came with: ``make setup`` installs it)."""
    found = shutil.which(tool) or str(Path(shutil.which("javac")).resolve().parent / tool)
    return subprocess.run([found, *args], check=True, capture_output=True, text=True, timeout=120).stdout


def _children(parent: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_bytes().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == parent:
            found.append(int(stat.parent.name))
    return found


def _socket_inodes(table: str, column: int) -> set[int]:
    lines = Path(table).read_text().splitlines()[1:]
    return {int(fields[column]) for fields in map(str.split, lines) if len(fields) > column}


def _sockets_of(pid: int) -> set[int]:
    found = set()
    for fd in Path(f"/proc/{pid}/fd").glob("*"):
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            found.add(int(target[8:-1]))
    return found


def _thread_name(task: Path) -> str | None:
    """A thread's name, or None when it ended while the threads were being read."""
    try:
        return (task / "comm").read_text().strip()
    except (FileNotFoundError, ProcessLookupError):
        return None
