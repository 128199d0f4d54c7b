"""Chaos under load: a SIGKILL of a random part of ``penumbra up`` (the job's driver, a
Python worker, the API, redis-server), drawn by a seeded generator (this seed draws
redis-server, whose loss touches every other part; the driver's is tested under load by
tests/system/test_demo.py and at several points by the exactly-once test), while a
client posts a keyed join's events through REST and three websocket clients follow its
matches and alarm. bench/chaos.py is the harness (ten rounds are its bench run); here
its verdict must be clean: the matches equal ``penumbra eval``'s over every event
posted, none twice, none lost; the alarm's count is exact; every websocket client got
every match once across its reconnects; /api/health names each restart with the killed
pid and its cause; and the job rides out Redis's restart rather than starting again.

The run is a process of its own, behind the session's other tests (tests/background.py):
what it found comes back as one JSON object.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.background import Command

#: the run: one round, this seed, the harness's verdict and what the test checks of it
RUN = """
import json, sys
from pathlib import Path
from bench import chaos

lines = []
outcome = chaos.run(rounds=1, seed=9, clients=3, pause=(3.0, 6.0), say=lines.append, home=Path(sys.argv[1]))
print(json.dumps({
    "problems": outcome.problems(), "events": outcome.events, "expected": len(outcome.expected),
    "rounds": [{"victim": r.victim, "pid": r.pid, "recovered_in": r.recovered_in} for r in outcome.rounds],
    "restarts": [r["part"] for r in outcome.restarts], "report": lines}))
"""


def background_runs(folder: Path) -> dict[str, Command]:
    return {"chaos": Command([sys.executable, "-c", RUN, str(folder / "home")])}


@pytest.mark.slow
@pytest.mark.background("chaos")
def test_a_sigkill_under_load_loses_nothing_and_doubles_nothing(background):
    ran = background.outcome("chaos")
    assert ran.returncode == 0, ran.stderr[-3000:]
    outcome = json.loads(ran.stdout.splitlines()[-1])
    report = "\n".join(outcome["report"])
    assert outcome["problems"] == [], report
    # the run did what it says: every round killed something, and load and matches were real
    assert len(outcome["rounds"]) == 1 and all(r["pid"] for r in outcome["rounds"]), report
    assert outcome["events"] > 2_000 and outcome["expected"] > 100, report
    assert [r["victim"] for r in outcome["rounds"]] == ["redis"], report
    # the job and the API ride out Redis's restart: it is the one restart, and the pipeline is
    # back within seconds (a job that stopped with Redis took 20-30 s to start again)
    assert outcome["restarts"] == ["redis"], outcome["restarts"]
    recovered = outcome["rounds"][0]["recovered_in"]
    assert recovered is not None and recovered < 10, report
