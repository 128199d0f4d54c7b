"""The job's JVM starts with the settings' options: by default the JIT's C1 alone, no C2."""

from __future__ import annotations

from pathlib import Path

from spark_jobs.settings import QUICK_JIT, JobSettings


def _jvm_of(leader: int) -> Path:
    """The /proc folder of the java process in ``leader``'s process group (the job's JVM)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            argv = (stat.parent / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if int(fields[2]) == leader and argv[0].endswith(b"java"):
            return stat.parent
    raise AssertionError(f"no JVM in the process group of {leader}")


def test_the_jobs_jvm_compiles_with_c1_alone(pipeline):
    assert JobSettings().java_options == QUICK_JIT
    jvm = _jvm_of(pipeline.job.process.pid)
    assert QUICK_JIT.encode() in (jvm / "cmdline").read_bytes().split(b"\0")
    threads = [(task / "comm").read_text().strip() for task in (jvm / "task").iterdir()]
    assert any(name.startswith("C1 CompilerThre") for name in threads), threads
    assert not any(name.startswith("C2 CompilerThre") for name in threads), threads
