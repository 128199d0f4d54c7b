"""The job's scratch folders: a process's own is kept while it runs, and each start removes
those of processes that are gone, told from a later process with the same pid by its start."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from spark_jobs import scratch


def _start_of(pid: int) -> str:
    # /proc/<pid>/stat, field 22: the process's start, in clock ticks since boot
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return fields[19]


def test_the_folders_of_processes_that_are_gone_are_removed_and_the_living_kept(tmp_path):
    tmp_path.chmod(0o700)
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(ended.stdout)
    living = tmp_path / f"{os.getpid()}-{_start_of(os.getpid())}"
    reused = tmp_path / f"{os.getpid()}-{int(_start_of(os.getpid())) - 1}"   # this pid, an earlier process
    gone = tmp_path / f"{dead}-{_start_of(os.getpid())}"
    other = tmp_path / "notes"
    for folder in (living, reused, gone, other):
        (folder / "sub").mkdir(parents=True)
        (folder / "sub" / "librocksdbjni1.so").write_bytes(b"x" * 1000)
    assert sorted(scratch.sweep(tmp_path)) == sorted([reused, gone])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([living.name, "notes"])


def test_a_folder_others_may_write_in_is_left_alone(tmp_path):
    (tmp_path / "1-1").mkdir()
    tmp_path.chmod(0o777)
    try:
        assert scratch.sweep(tmp_path) == []
        assert (tmp_path / "1-1").exists()
    finally:
        tmp_path.chmod(0o700)


def test_a_process_claims_one_folder_named_by_it_and_removes_it_when_it_exits(tmp_path):
    script = ("import os, sys; from spark_jobs import scratch; a = scratch.claim(); "
              "assert scratch.claim() == a; (a / 'file').write_text('x'); print(a)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                          cwd=Path(__file__).resolve().parents[2], env={**os.environ, "TMPDIR": str(tmp_path)})
    folder = Path(done.stdout.strip())
    assert folder.parent == tmp_path / f"penumbra-{os.getuid()}"
    assert folder.name.split("-")[0].isdigit()
    assert not folder.exists() and folder.parent.exists()


def test_a_file_where_the_folder_belongs_gives_a_private_folder_of_its_own(tmp_path):
    (tmp_path / f"penumbra-{os.getuid()}").write_text("not a folder")
    script = "from spark_jobs import scratch; a = scratch.claim(); print(a, a.is_dir())"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                          cwd=Path(__file__).resolve().parents[2], env={**os.environ, "TMPDIR": str(tmp_path)})
    folder, is_dir = done.stdout.split()
    assert Path(folder).parent == tmp_path and Path(folder).name.startswith("penumbra-job-") and is_dir == "True"
    assert not Path(folder).exists()
