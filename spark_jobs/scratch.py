"""The job's scratch folder: where its JVM unpacks native libraries (RocksDB's and LZ4's,
some 15 MB a start) and Spark keeps its local files (shuffle blocks, its temporary folders,
the Unix sockets to the Python workers).

Left to themselves these go straight into the system's temporary folder, and a JVM killed
with SIGKILL (a crash, the out-of-memory killer, ``penumbra up`` giving up on a stop) never
removes them: each restart after a crash left about 20 MB behind. So each process that
starts a job's JVM claims a folder of its own, ``<tmp>/penumbra-<uid>/<pid>-<start>``, and
removes it when it exits; and each claim first removes the folders of processes that are
gone (the start time in the name tells a reused pid from the process that made the folder).
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import stat
import tempfile
from pathlib import Path

__all__ = ["claim", "root", "sweep"]

log = logging.getLogger("penumbra.job")

_claimed: Path | None = None


def root() -> Path:
    """The folder the job processes of this user keep their scratch folders in."""
    return Path(tempfile.gettempdir()) / f"penumbra-{os.getuid()}"


def _started(pid: int) -> str | None:
    """When the process ``pid`` started (clock ticks since boot), None if there is none."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command's name, in parentheses, may hold spaces: the fields follow the last ')'
    return text[text.rindex(")") + 2:].split()[19]


def _ours(folder: Path) -> bool:
    """``folder`` is a real folder (not a link) that this user alone may write in."""
    try:
        info = folder.lstat()
    except FileNotFoundError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o022


def sweep(under: Path | None = None) -> list[Path]:
    """Remove the scratch folders of job processes that are gone; the folders removed."""
    under = under or root()
    if not _ours(under):
        return []
    removed = []
    for folder in under.iterdir():
        pid, _, started = folder.name.partition("-")
        if not pid.isdigit() or _started(int(pid)) == started:
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


def claim() -> Path:
    """This process's scratch folder (made once, removed when the process exits), after
    removing those of processes that are gone."""
    global _claimed
    if _claimed is not None:
        return _claimed
    under = root()
    try:
        under.mkdir(mode=0o700, exist_ok=True)
    except FileExistsError:     # a file or a link where the folder belongs: not ours
        pass
    if not _ours(under) or _started(os.getpid()) is None:
        # someone else's folder, one others may write in, or no /proc to tell the living from
        # the gone: a private folder of our own instead, never swept
        folder = Path(tempfile.mkdtemp(prefix="penumbra-job-"))
        log.warning("scratch in %s, not swept at the next start (%s is not this user's alone, or there is "
                    "no /proc)", folder, under)
    else:
        gone = sweep(under)
        if gone:
            log.info("removed the scratch of %d job processes that are gone", len(gone))
        folder = under / f"{os.getpid()}-{_started(os.getpid())}"
        folder.mkdir(mode=0o700, exist_ok=True)
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    _claimed = folder
    return folder
