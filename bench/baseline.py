"""The code before a change, measured in the same run as the code after it.

:func:`tree` extracts a commit of this repository (by default :data:`BEFORE`, the tree
before the pattern-confidence and event-parsing throughput work) into a temporary
folder; :func:`measure` runs a benchmark's ``--measure`` mode in a fresh process against
either tree and returns what it prints (one JSON object); :func:`run_eval` times a whole
``penumbra eval`` process, in wall and CPU seconds.
"""

from __future__ import annotations

import atexit
import functools
import io
import json
import os
import resource
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BEFORE = "15738e7"


@functools.cache
def tree(commit: str = BEFORE) -> Path:
    """The files of ``commit``, extracted once per run (raises if git cannot give them)."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit], capture_output=True, check=True).stdout
    folder = Path(tempfile.mkdtemp(prefix=f"penumbra-{commit}-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    with tarfile.open(fileobj=io.BytesIO(archive)) as files:
        files.extractall(folder, filter="data")
    return folder


def _environment(source: Path) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(source))


def measure(script: str | Path, arguments: list[str], source: Path = ROOT) -> dict:
    """``python script --measure arguments...`` with ``penumbra`` imported from ``source``."""
    done = subprocess.run([sys.executable, str(script), "--measure", *arguments], env=_environment(source),
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def run_eval(arguments: list[str], source: Path = ROOT) -> tuple[float, float, dict]:
    """Wall seconds of ``penumbra eval --stats arguments...``, from the interpreter's start to
    its exit; its CPU seconds (what other work on a shared machine changes least); and the
    counters it printed."""
    started, cpu = time.perf_counter(), _children_cpu()
    # run in the tree: ``python -m`` puts the working folder first on the path, ahead of PYTHONPATH
    done = subprocess.run([sys.executable, "-m", "penumbra", "eval", "--stats", *arguments], cwd=source,
                          env=_environment(source), capture_output=True, text=True, check=True)
    return time.perf_counter() - started, _children_cpu() - cpu, json.loads(done.stdout)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime
