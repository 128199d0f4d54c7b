"""``penumbra eval --engine spark`` prints the same matches as ``--engine local`` (a lossy
query) and the same counts with ``--stats`` (a join): each run starts its own
redis-server and job, as a user would, and leaves no process behind. Most of a Spark run
is its JVM starting, so the three run behind the session's other tests
(tests/background.py), each in a temporary folder of its own; each test waits for its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.background import Command, Outcome

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
RUNS = ("shoplifting", "blocks", "stats")


def processes(home: str, names=("redis-server", "java")) -> set[int]:
    """Process ids of the redis-servers and JVMs whose working folder or arguments lie in
    ``home`` (other processes on the machine are not ours)."""
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


def command(engine: str, *arguments: str) -> list[str]:
    return [sys.executable, "-m", "penumbra", "eval", "--engine", engine, *arguments]


def example(name: str) -> list[str]:
    folder = EXAMPLES / name
    return ["--query-file", str(folder / "query.pq"), "--streams", str(folder / "streams.json"),
            "--events", str(folder / "events.jsonl")]


def run(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=str(ROOT))


def late_events(folder: Path) -> list[str]:
    """A pattern over events some of which are beyond their max delay, in blocks of 40 (the
    second line repeats the first: one event, taken once, and the blocks are cut after it)."""
    from penumbra.events import event_to_json
    from tests.unit.test_keyed import pattern_events

    streams, events = pattern_events(34, n=240, keys=4, late_share=0.1)
    (folder / "streams.json").write_text(json.dumps(streams.to_json()))
    lines = [json.dumps(event_to_json(e)) for e in events]
    (folder / "events.jsonl").write_text("\n".join(lines[:1] + lines) + "\n")
    query = ("PATTERN SEQ(A a, B b, C c) WHERE a.node = b.node AND b.node = c.node "
             "AND skip_till_next_match(a, b, c) WITHIN 30")
    return ["--query", query, "--streams", str(folder / "streams.json"), "--events", str(folder / "events.jsonl"),
            "--block-size", "40"]


def arguments(folder: Path) -> dict[str, list[str]]:
    """What each run asks of both engines (the input files it needs written in ``folder``)."""
    return {"shoplifting": example("shoplifting"), "stats": [*example("seismic"), "--stats"],
            "blocks": late_events(folder)}


def background_runs(folder: Path) -> dict[str, Command]:
    given = arguments(folder)
    runs = {}
    for name in RUNS:
        (folder / name).mkdir()
        # the run's private home (``penumbra-eval-*``) lies in its TMPDIR: what it leaves is found there
        runs[name] = Command(command("spark", *given[name]), env={"TMPDIR": str(folder / name)})
    return runs


def spark_run(background, name: str) -> tuple[Outcome, list[str]]:
    """A Spark run's outcome and the arguments it was given (for the local engine)."""
    outcome = background.outcome(name)
    assert outcome.returncode == 0, outcome.stderr
    return outcome, background.commands[name].argv[len(command("spark")):]


def as_set(stdout: str) -> dict:
    out = {}
    for line in stdout.splitlines():
        match = json.loads(line)
        out[json.dumps(match["events"], sort_keys=True), tuple(match.get("range") or ())] = match["prob"]
    return out


# each run starts a JVM: the join's is the --stats one below, the pattern and lossy paths
# through the command are the same code (tests/integration/test_spark_equivalence.py runs
# every form in the session's job)
@pytest.mark.background("shoplifting")
def test_spark_engine_prints_the_local_engines_matches(background):
    spark, given = spark_run(background, "shoplifting")
    local = run(command("local", *given))
    found, expected = as_set(spark.stdout), as_set(local.stdout)
    assert expected and set(found) == set(expected)
    assert all(abs(found[k] - expected[k]) <= 1e-12 for k in expected)
    assert len(spark.stdout.splitlines()) == len(found), "a match printed twice"


@pytest.mark.background("blocks")
def test_spark_engine_cuts_the_local_engines_blocks(background):
    """Events beyond their max delay, which a pattern judges late at a block's end: both
    engines cut the input in the same blocks (``--block-size``, of the events read, a
    repeated line once), so they print the same matches and leave out the same events."""
    spark, given = spark_run(background, "blocks")
    local = run(command("local", *given))
    found, expected = as_set(spark.stdout), as_set(local.stdout)
    assert expected and set(found) == set(expected)
    assert all(abs(found[k] - expected[k]) <= 1e-12 for k in expected)
    # both say how many events they left out: the late ones
    said = [line for line in local.stderr.splitlines() if "not processed" in line]
    assert said and said == [line for line in spark.stderr.splitlines() if "not processed" in line]


@pytest.mark.background("stats")
def test_spark_engine_stats(background):
    spark, given = spark_run(background, "stats")
    stats = json.loads(spark.stdout)
    local = json.loads(run(command("local", *given)).stdout)
    assert stats["events"] == local["events"] == 100 and stats["matches"] == local["matches"] > 0
    assert stats["seconds"] > 0 and stats["engine"] == "spark" and "pairs" in stats


@pytest.mark.background(*RUNS)
def test_the_runs_leave_no_process_behind(background):
    for name in RUNS:
        background.outcome(name)
        home = background.commands[name].env["TMPDIR"]
        assert processes(home) == set(), f"the {name} run left a redis-server or a JVM behind"
        # nor a file: its private home and its JVM's scratch folder are gone (the jobs' shared
        # scratch root, spark_jobs/scratch.py, stays)
        left = sorted(str(p.relative_to(home)) for p in Path(home).rglob("*"))
        assert left in ([], [f"penumbra-{os.getuid()}"]), f"the {name} run left {left}"
