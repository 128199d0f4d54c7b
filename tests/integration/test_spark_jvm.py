"""The job's JVM starts with the settings' options: by default the JIT's C1 alone, no C2."""

from __future__ import annotations

import os
from pathlib import Path

from spark_jobs.settings import QUICK_JIT, JobSettings
from tests.integration.conftest import command_lines


def test_the_jobs_jvm_compiles_with_c1_alone(pipeline):
    assert JobSettings().java_options == QUICK_JIT
    # the JVM of the job's process group (the job starts a session of its own)
    found = next(((pid, argv) for pid, argv in command_lines().items()
                  if argv[0].endswith(b"java") and _group(pid) == pipeline.job.process.pid), None)
    assert found is not None, "no JVM in the job's process group"
    jvm, argv = found
    assert QUICK_JIT.encode() in argv
    threads = [name for name in map(_thread_name, Path(f"/proc/{jvm}/task").iterdir()) if name is not None]
    assert any(name.startswith("C1 CompilerThre") for name in threads), threads
    assert not any(name.startswith("C2 CompilerThre") for name in threads), threads


def _thread_name(task: Path) -> str | None:
    """A thread's name, or None when it ended while the threads were being read."""
    try:
        return (task / "comm").read_text().strip()
    except (FileNotFoundError, ProcessLookupError):
        return None


def _group(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None
