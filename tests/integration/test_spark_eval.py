"""``penumbra eval --engine spark`` prints the same matches as ``--engine local`` (a lossy
query) and the same counts with ``--stats`` (a join): each run starts its own
redis-server and job, as a user would, and leaves no process behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def processes(names=("redis-server", "java"), home="penumbra-eval-") -> set[int]:
    """Process ids of the redis-servers and JVMs that an eval run started: their working
    folder or arguments lie in its private home (other processes on the machine are not ours)."""
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                arguments = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
                folder = os.readlink(f"/proc/{entry}/cwd")
            except OSError:
                continue
            name = os.path.basename(arguments[0].decode(errors="replace"))
            if name in names and (home in folder or any(home.encode() in a for a in arguments)):
                found.add(int(entry))
    return found


def evaluate(example: str, engine: str, *extra: str) -> subprocess.CompletedProcess:
    folder = EXAMPLES / example
    return subprocess.run(
        [sys.executable, "-m", "penumbra", "eval", "--engine", engine, "--query-file", str(folder / "query.pq"),
         "--streams", str(folder / "streams.json"), "--events", str(folder / "events.jsonl"), *extra],
        capture_output=True, text=True, timeout=600, cwd=str(ROOT))


def as_set(stdout: str) -> dict:
    out = {}
    for line in stdout.splitlines():
        match = json.loads(line)
        out[json.dumps(match["events"], sort_keys=True), tuple(match.get("range") or ())] = match["prob"]
    return out


# each run starts a JVM: the join's is the --stats one below, the pattern and lossy paths
# through the command are the same code (tests/integration/test_spark_equivalence.py runs
# every form in the session's job)
@pytest.mark.parametrize("example", ["shoplifting"])
def test_spark_engine_prints_the_local_engines_matches(example):
    before = processes()
    spark = evaluate(example, "spark")
    assert spark.returncode == 0, spark.stderr
    local = evaluate(example, "local")
    found, expected = as_set(spark.stdout), as_set(local.stdout)
    assert expected and set(found) == set(expected)
    assert all(abs(found[k] - expected[k]) <= 1e-12 for k in expected)
    assert len(spark.stdout.splitlines()) == len(found), "a match printed twice"
    assert processes() - before == set(), "the run left a redis-server or a JVM behind"


def test_spark_engine_cuts_the_local_engines_blocks(tmp_path):
    """Events beyond their max delay, which a pattern judges late at a block's end: both
    engines cut the input in the same blocks (``--block-size``, of the events read, a
    repeated line once), so they print the same matches and leave out the same events."""
    from penumbra.events import event_to_json
    from tests.unit.test_keyed import pattern_events

    streams, events = pattern_events(34, n=240, keys=4, late_share=0.1)
    (tmp_path / "streams.json").write_text(json.dumps(streams.to_json()))
    # the second line repeats the first (one event, taken once): the blocks are cut after it
    lines = [json.dumps(event_to_json(e)) for e in events]
    (tmp_path / "events.jsonl").write_text("\n".join(lines[:1] + lines) + "\n")
    query = ("PATTERN SEQ(A a, B b, C c) WHERE a.node = b.node AND b.node = c.node "
             "AND skip_till_next_match(a, b, c) WITHIN 30")

    def run(engine: str, *extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "penumbra", "eval", "--engine", engine, "--query", query, "--streams",
             str(tmp_path / "streams.json"), "--events", str(tmp_path / "events.jsonl"), "--block-size", "40", *extra],
            capture_output=True, text=True, timeout=600, cwd=str(ROOT))

    before = processes()
    spark = run("spark")
    assert spark.returncode == 0, spark.stderr
    local = run("local")
    found, expected = as_set(spark.stdout), as_set(local.stdout)
    assert expected and set(found) == set(expected)
    assert all(abs(found[k] - expected[k]) <= 1e-12 for k in expected)
    # both say how many events they left out: the late ones
    said = [line for line in local.stderr.splitlines() if "not processed" in line]
    assert said and said == [line for line in spark.stderr.splitlines() if "not processed" in line]
    assert processes() - before == set(), "the run left a redis-server or a JVM behind"


def test_spark_engine_stats():
    before = processes()
    run = evaluate("seismic", "spark", "--stats")
    assert run.returncode == 0, run.stderr
    stats = json.loads(run.stdout)
    local = json.loads(evaluate("seismic", "local", "--stats").stdout)
    assert stats["events"] == local["events"] == 100 and stats["matches"] == local["matches"] > 0
    assert processes() - before == set(), "the run left a redis-server or a JVM behind"
    assert stats["seconds"] > 0 and stats["engine"] == "spark" and "pairs" in stats
