"""``penumbra up``: the whole system as a user runs it, checked through Redis and REST.

The slow scenario runs in steps on one home: a first start (health, the job's
heartbeat, the printed token), a match flowing from REST through the real Spark job,
matches on the live feed (replayed and live) and a threshold PATCH applying to what
comes next, SIGTERM (every process gone, exit 0), a second start on the same home (same token,
query, checkpoint and data; the job carries on). The run sets ``PENUMBRA_REDIS_PREFIX``:
every key any of its processes wrote is under that prefix. kill -9 of the job under load, and
its restart by `up`, is in test_demo.py. Each step needs the ones before it and is
skipped when one failed.

The fast tests drive :class:`penumbra.cli.supervisor.Supervisor` with small stand-in children: a
child that dies is restarted, one that keeps dying is given up on, a Redis named by
``PENUMBRA_REDIS_URL`` is used as it is, Ctrl-C stops the children and exits 0, the
children do not outlive a killed supervisor, a busy port and a second supervisor on the
same home are refused; and ``penumbra eval --engine local`` imports neither pyspark nor
FastAPI.
"""

from __future__ import annotations

import fcntl
import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis

from contract import Keys
from contract.entries import read_restart
from contract.tokens import Role, TokenStore
from penumbra.cli.processes import RedisServer, free_port
from penumbra.cli.supervisor import Supervisor, UpSettings
from penumbra.engine import compile_query
from penumbra.events import StreamParams, Streams, parse_event
from tests.system.conftest import ROOT, Up, UpRun, alive, bearer, http, processes_of, stand_in, up_environment

#: Spark's first start on a loaded two-core machine takes tens of seconds; allow minutes
START_TIMEOUT = 300.0
STOP_TIMEOUT = 240.0
MATCH_TIMEOUT = 240.0
JOIN = "SELECT * FROM upA A, upB B WHERE WINDOW(A, B) = 100 WITH THRESHOLD 0.6"
QUERY_ID = "up-join"
EXAMPLE = ROOT / "examples" / "seismic"
#: the slow scenario's key prefix (PENUMBRA_REDIS_PREFIX): the whole system moves under it
PREFIX = "site-a"
KEYS = Keys(PREFIX)


def pair(n: int) -> list[dict]:
    """Two overlapping events, one per side of the join, at time 1000 n: a sure match."""
    return [{"stream": "upa", "id": f"a{n}", "ts": {"lo": 1000.0 * n, "hi": 1000.0 * n + 10}},
            {"stream": "upb", "id": f"b{n}", "ts": {"lo": 1000.0 * n + 5, "hi": 1000.0 * n + 15}}]


def local_matches(events: list[dict]) -> list[dict]:
    """The same events through the core's operator, in one block, for comparison."""
    operator = compile_query(JOIN, Streams())
    found = operator.feed([parse_event(e) for e in events]).matches
    return [m.to_json() for m in found] + [m.to_json() for m in operator.flush().matches]


@dataclass
class Scenario(UpRun):
    start_up: object = None
    runs: list[Up] = field(default_factory=list)
    token: str = ""
    job_id: str = ""
    batches: int = -1

    @property
    def up(self) -> Up:
        return self.runs[-1]

    def start(self) -> Up:
        self.runs.append(self.start_up(self.home, self.env))
        return self.up



@pytest.fixture(scope="module")
def scenario(tmp_path_factory, start_up) -> Scenario:
    home = tmp_path_factory.mktemp("up-home")
    port, redis_port, env = up_environment(home, redis_prefix=PREFIX)
    return Scenario(home, port, redis_port, env, start_up=start_up)


def wait_ready(up: Up) -> str:
    """Until up prints its URL; the URL."""
    return up.wait_for(r"^\s+url\s+(http://\S+)/docs", START_TIMEOUT).group(1)


def wait_matches(scenario: Scenario, count: int, query: str = QUERY_ID) -> list[dict]:
    """Until the query has ``count`` matches over REST; they, oldest first."""
    deadline = time.monotonic() + MATCH_TIMEOUT
    with http(scenario.base) as client:
        while True:
            answer = client.get(f"/api/queries/{query}/matches", params={"limit": 1000},
                                headers=bearer(scenario.token))
            assert answer.status_code == 200, answer.text
            items = answer.json()["items"]
            if len(items) >= count:
                return [{"events": m["events"], "prob": m["prob"]} for m in reversed(items)]
            assert scenario.up.process.poll() is None, scenario.up.output
            if time.monotonic() > deadline:
                pytest.fail(f"{len(items)} of {count} matches after {MATCH_TIMEOUT:g} s\n{scenario.up.logs()}")
            time.sleep(0.5)


def post_events(scenario: Scenario, events: list[dict]) -> None:
    with http(scenario.base) as client:
        answer = client.post("/api/events", json=events, headers=bearer(scenario.token))
    assert answer.status_code == 202 and answer.json()["accepted"] == len(events), answer.text


def heartbeat(scenario: Scenario) -> dict[str, str]:
    with scenario.redis() as client:
        return {k.decode(): v.decode() for k, v in client.hgetall(KEYS.heartbeat).items()}


@pytest.mark.slow
def test_first_up_starts_redis_the_job_and_the_api(scenario):
    up = scenario.start()
    assert wait_ready(up) == scenario.base
    scenario.token = up.wait_for(r"^\s+admin token\s+(pn_\S+)", 5).group(1)
    with http(scenario.base) as client:
        health = client.get("/api/health")
        me = client.get("/api/me", headers=bearer(scenario.token))
    assert health.status_code == 200 and health.json()["status"] == "ok", health.text
    assert health.json()["job"]["alive"] and health.json()["job"]["active"]
    assert me.status_code == 200 and me.json()["role"] == "admin"
    with scenario.redis() as client:
        config = client.config_get("*")
        redis_pid = client.info("server")["process_id"]
    assert (config["appendonly"], config["appendfsync"], config["bind"], config["dir"]) == (
        "yes", "always", "127.0.0.1", str(scenario.home / "var" / "redis"))
    beat = heartbeat(scenario)
    assert beat["active"] == "1"
    scenario.job_id = beat["job"]
    assert json.loads((scenario.home / "var" / "checkpoint" / "penumbra.json").read_text())["job"] == beat["job"]
    # each child leads its own process group, apart from up's
    for pid in (redis_pid, int(beat["pid"])):
        assert pid in processes_of(scenario.home) and os.getpgid(pid) == pid != os.getpgid(up.process.pid)
    logs = {p.name: p.read_text(errors="replace") for p in (scenario.home / "var" / "log").iterdir()}
    assert set(logs) >= {"redis.log", "job.log", "api.log"}
    # the job names the Redis it uses, without the password up made for it
    password = (scenario.home / "var" / "redis" / "password").read_text().strip()
    assert "started: redis redis://***@127.0.0.1" in logs["job.log"]
    assert [name for name, text in logs.items() if password in text] == []
    scenario.done.add("up")


@pytest.mark.slow
def test_a_match_flows_from_rest_through_the_job(scenario):
    scenario.needs("up")
    with http(scenario.base) as client:
        register_streams(client, scenario.token, "upA", "upB")
        answer = client.post("/api/queries", json={"text": JOIN, "id": QUERY_ID}, headers=bearer(scenario.token))
    assert answer.status_code == 201, answer.text
    post_events(scenario, pair(1))
    assert wait_matches(scenario, 1) == local_matches(pair(1))
    with scenario.redis() as client:
        scenario.batches = int(client.hget(KEYS.batches, scenario.job_id))
    scenario.done.add("match")


def register_streams(client, token: str, *names: str) -> None:
    """The streams, registered with no delay and timestamps of at most 1,000 (a join needs
    its streams' longest timestamp)."""
    for name in names:
        answer = client.put(f"/api/streams/{name}", json={"pi": 1000}, headers=bearer(token))
        assert answer.status_code == 200, answer.text


TUNED = "SELECT * FROM upC A, upD B WHERE WINDOW(A, B) = 100 WITH THRESHOLD 0.6"
TUNED_ID = "up-tuned"


def near_pair(n: int) -> list[dict]:
    """B over [124, 126] then A over [0, 250] (relative to 1000 n; in order of max time, as the
    undeclared streams allow no delay): P(|X_A - X_B| <= 100) = 0.8."""
    return [{"stream": "upd", "id": f"d{n}", "ts": {"lo": 1000.0 * n + 124, "hi": 1000.0 * n + 126}},
            {"stream": "upc", "id": f"c{n}", "ts": {"lo": 1000.0 * n, "hi": 1000.0 * n + 250}}]


def sure_pair(n: int) -> list[dict]:
    return [{**e, "stream": {"upa": "upc", "upb": "upd"}[e["stream"]], "id": f"s{e['id']}"} for e in pair(n)]


def until(socket, kind: str, timeout: float = 30) -> dict:
    """The next message of type ``kind`` on the live feed (what came before it is skipped)."""
    deadline = time.monotonic() + timeout
    while True:
        message = json.loads(socket.recv(timeout=max(0.1, deadline - time.monotonic())))
        if message.get("type") == kind:
            return message


def feed_messages(socket, query: str, count: int, timeout: float) -> list[dict]:
    """The next ``count`` match messages of ``query`` on the live feed."""
    found, deadline = [], time.monotonic() + timeout
    while len(found) < count:
        message = json.loads(socket.recv(timeout=max(0.1, deadline - time.monotonic())))
        if message.get("type") == "matches" and message.get("query") == query:
            found.append(message)
    return found


@pytest.mark.slow
def test_matches_reach_the_live_feed_and_a_threshold_patch_applies_to_what_comes_next(scenario):
    from websockets.sync.client import connect

    from penumbra.events import parse_event
    from penumbra.probability import p_within

    scenario.needs("match")
    b, a = (parse_event(e) for e in near_pair(0))
    assert p_within(a.histogram, b.histogram, 100) == pytest.approx(0.8), "the near pair sits between 0.6 and 0.9"
    headers = bearer(scenario.token)
    with http(scenario.base) as client, connect(f"ws://127.0.0.1:{scenario.port}/ws", open_timeout=30) as socket:
        socket.send(json.dumps({"token": scenario.token}))
        assert until(socket, "welcome")["role"] == "admin"
        # the first match, replayed from the stream, as REST has it
        socket.send(json.dumps({"type": "subscribe", "queries": [QUERY_ID], "kinds": ["matches"], "since": "0-0"}))
        until(socket, "subscribed")
        replayed = feed_messages(socket, QUERY_ID, 1, 30)
        rest = client.get(f"/api/queries/{QUERY_ID}/matches", headers=headers).json()["items"]
        assert [(m["id"], m["data"]["events"], m["data"]["prob"]) for m in replayed] == \
            [(m["id"], m["events"], m["prob"]) for m in rest]
        # live: a query registered now, its near pair matches at 0.6
        register_streams(client, scenario.token, "upC", "upD")
        answer = client.post("/api/queries", json={"text": TUNED, "id": TUNED_ID}, headers=headers)
        assert answer.status_code == 201, answer.text
        socket.send(json.dumps({"type": "subscribe", "queries": [TUNED_ID], "kinds": ["matches"]}))
        until(socket, "subscribed")
        post_events(scenario, near_pair(1))
        assert [m["events"] for m in wait_matches(scenario, 1, TUNED_ID)] == [{"A": "c1", "B": "d1"}]
        first = feed_messages(socket, TUNED_ID, 1, 30)
        assert first[0]["data"]["events"] == {"A": "c1", "B": "d1"} and first[0]["data"]["prob"] == pytest.approx(0.8)
        # at 0.9 the next near pair is a near miss, a sure pair still matches
        answer = client.patch(f"/api/queries/{TUNED_ID}", json={"threshold": 0.9}, headers=headers)
        assert answer.status_code == 200, answer.text
        post_events(scenario, near_pair(2) + sure_pair(3))
        wait_matches(scenario, 2, TUNED_ID)
        second = feed_messages(socket, TUNED_ID, 1, 30)
        assert second[0]["data"]["events"] == {"A": "sa3", "B": "sb3"} and second[0]["data"]["prob"] == 1.0
        rest = client.get(f"/api/queries/{TUNED_ID}/matches", headers=headers).json()["items"]
        assert [m["events"] for m in reversed(rest)] == [{"A": "c1", "B": "d1"}, {"A": "sa3", "B": "sb3"}]
        answer = client.delete(f"/api/queries/{TUNED_ID}", headers=headers)
        assert answer.status_code == 204, answer.text


RETRIED = "SELECT * FROM upE A, upF B WHERE WINDOW(A, B) = 50 AND A.k = B.k WITH THRESHOLD 0.5"
RETRIED_ID = "up-retried"


def keyed_events(count: int) -> list[dict]:
    """A and B events of ten key values, each B 5 after its A (a sure match on the key), in
    order of max time, far after every other test's events."""
    out = []
    for i in range(count):
        t = 10_000_000.0 + 100.0 * i
        out += [{"stream": "upe", "id": f"e{i}", "ts": {"lo": t, "hi": t + 10}, "attrs": {"k": i % 10}},
                {"stream": "upf", "id": f"f{i}", "ts": {"lo": t + 5, "hi": t + 15}, "attrs": {"k": i % 10}}]
    return out


@pytest.mark.slow
def test_batches_posted_twice_give_each_match_once(scenario):
    """A keyed join's events in batches of 50, a third of the batches posted again right
    after (same ids, same content, no idempotency key): the matches are the core's over
    the events posted once, none twice."""
    scenario.needs("match")
    events = keyed_events(300)
    streams = Streams([StreamParams(name, pi=20) for name in ("upE", "upF")])
    operator = compile_query(RETRIED, streams)
    expected = [m.to_json() for m in operator.feed([parse_event(e, streams) for e in events]).matches]
    expected += [m.to_json() for m in operator.flush().matches]
    assert len(expected) == 300
    with http(scenario.base) as client:
        register_streams(client, scenario.token, "upE", "upF")
        answer = client.post("/api/queries", json={"text": RETRIED, "id": RETRIED_ID}, headers=bearer(scenario.token))
        assert answer.status_code == 201, answer.text
        for n, start in enumerate(range(0, len(events), 50)):
            batch = events[start:start + 50]
            for attempt in range(2 if n % 3 == 0 else 1):
                answer = client.post("/api/events", json=batch, headers=bearer(scenario.token)).json()
                assert (answer["accepted"], answer["duplicates"]) == ((50, 0) if attempt == 0 else (0, 50))
    found = wait_matches(scenario, len(expected), RETRIED_ID)
    time.sleep(2.0)      # anything written twice would be there by now
    found = wait_matches(scenario, len(expected), RETRIED_ID)
    key = lambda m: (m["events"]["A"], m["events"]["B"])  # noqa: E731
    assert sorted(map(key, found)) == sorted(map(key, expected)) and len(found) == len(expected)
    by_pair = {key(m): m["prob"] for m in expected}
    assert all(m["prob"] == pytest.approx(by_pair[key(m)], abs=1e-12) for m in found)


@pytest.mark.slow
def test_sigterm_stops_every_process_and_keeps_the_data(scenario):
    scenario.needs("up")
    up = scenario.up
    children = processes_of(scenario.home) - {up.process.pid}
    job_pid = int(heartbeat(scenario)["pid"])
    with scenario.redis() as client:
        redis_pid = client.info("server")["process_id"]
    assert {job_pid, redis_pid} <= children and len(children) >= 4  # redis, job, its JVM, API
    assert up.terminate(STOP_TIMEOUT) == 0, up.output
    assert [pid for pid in children if alive(pid)] == []
    assert processes_of(scenario.home) == set()
    assert (scenario.home / "var" / "redis" / "appendonlydir").is_dir()
    assert (scenario.home / "var" / "checkpoint" / "spark" / "commits").is_dir()
    scenario.done.add("stopped")


@pytest.mark.slow
def test_a_second_up_resumes_with_the_same_token_query_and_checkpoint(scenario):
    scenario.needs("up", "match", "stopped")
    up = scenario.start()
    wait_ready(up)
    assert "pn_" not in up.wait_for(r"^\s+admin token\s+(.*)", 5).group(1)  # no new token
    with http(scenario.base) as client:
        query = client.get(f"/api/queries/{QUERY_ID}", headers=bearer(scenario.token))
        tokens = client.get("/api/tokens", headers=bearer(scenario.token))
    assert query.status_code == 200 and query.json()["text"] == JOIN, query.text
    assert tokens.status_code == 200 and [t["role"] for t in tokens.json()["items"]] == ["admin"], tokens.text
    beat = heartbeat(scenario)
    assert beat["job"] == scenario.job_id and beat["active"] == "1"
    post_events(scenario, pair(2))
    assert wait_matches(scenario, 2) == local_matches(pair(1) + pair(2))
    with scenario.redis() as client:
        assert int(client.hget(KEYS.batches, scenario.job_id)) > scenario.batches
        written = {key.decode() for key in client.scan_iter(count=1000)}
    # the service (tokens, registry, audit), the job (ingest, results, heartbeat, marker) and
    # up itself wrote under the prefix, and nothing outside it
    assert {KEYS.tokens, KEYS.queries, KEYS.audit, KEYS.ingest, KEYS.matches(QUERY_ID), KEYS.heartbeat,
            KEYS.batches, KEYS.metrics} <= written, sorted(written)
    assert [key for key in written if not key.startswith(f"{PREFIX}:")] == [], sorted(written)
    scenario.done.add("resumed")
    children = processes_of(scenario.home) - {up.process.pid}
    assert up.terminate(STOP_TIMEOUT) == 0, up.output
    assert [pid for pid in children if alive(pid)] == [] and processes_of(scenario.home) == set()


# ---- fast tests


def test_eval_local_imports_neither_pyspark_nor_fastapi():
    args = ["--query", (EXAMPLE / "query.pq").read_text(), "--streams", str(EXAMPLE / "streams.json"),
            "--events", str(EXAMPLE / "events.jsonl")]
    run = subprocess.run([sys.executable, "-X", "importtime", "-m", "penumbra", "eval", *args], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip(), "the example has matches"
    imported = {line.rsplit("|", 1)[1].strip().split(".")[0] for line in run.stderr.splitlines()
                if line.startswith("import time:") and "|" in line}
    assert "penumbra" in imported and "numpy" in imported
    assert imported.isdisjoint({"pyspark", "fastapi", "starlette", "uvicorn", "backend", "spark_jobs"})


def test_up_help_lists_its_settings():
    run = subprocess.run([sys.executable, "-m", "penumbra", "up", "--help"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    for name in ("PENUMBRA_HOME", "PENUMBRA_PORT", "PENUMBRA_REDIS_PORT", "PENUMBRA_REDIS_URL",
                 "PENUMBRA_SPARK_MASTER", "PENUMBRA_ADMIN_TOKEN", "PENUMBRA_UP_START_TIMEOUT",
                 "PENUMBRA_UP_STOP_TIMEOUT", "PENUMBRA_UP_RESTARTS"):
        assert name in run.stdout


@pytest.fixture
def redis_server(tmp_path_factory):
    server = RedisServer(folder=tmp_path_factory.mktemp("redis")).start()
    try:
        yield server
    finally:
        server.stop()


def supervisor(tmp_path: Path, redis_url: str, **settings) -> tuple[Supervisor, io.StringIO]:
    out = io.StringIO()
    up = Supervisor(UpSettings(home=tmp_path, port=free_port(), redis_url=redis_url, **settings), out=out)
    return up, out


def test_a_child_that_dies_is_restarted_and_the_named_redis_is_used(tmp_path, redis_server, monkeypatch):
    monkeypatch.delenv("PENUMBRA_ADMIN_TOKEN", raising=False)
    flaky = ("import pathlib, sys, time\n"
             "if not pathlib.Path('died').exists():\n"
             "    pathlib.Path('died').touch(); sys.exit(3)\n"
             "pathlib.Path('ready').touch(); time.sleep(120)\n")
    up, out = supervisor(tmp_path, redis_server.url)
    up.children = [stand_in("flaky", flaky, tmp_path, ready="ready")]
    pids = []

    def stop_when_ready() -> None:
        pids.append(up.children[0].pid)
        up.stopping = True

    up.on_ready.append(stop_when_ready)
    started = time.monotonic()
    assert up.run() == 0, out.getvalue()
    assert time.monotonic() - started < 30
    text = out.getvalue()
    assert re.search(r"^flaky: .* exited with status 3 after", text, re.M), text
    assert re.search(r"^flaky: restarting in 1 s \(failure 1 of 5 in a row\)", text, re.M), text
    assert pids and not alive(pids[0])
    # the Redis named by the URL holds the generated admin token; up started none of its own
    token = re.search(r"^\s+admin token\s+(pn_\S+)", text, re.M).group(1)
    client = redis.Redis.from_url(redis_server.url)
    assert TokenStore(client, Keys()).check(token).role == Role.admin
    # ... and the restart, with its cause, for the Health view
    [(entry_id, fields)] = client.xrange(Keys().restarts)
    restart = read_restart(entry_id, fields)
    assert (restart["part"], restart["cause"], restart["failures"], restart["restart_in"]) == \
        ("flaky", "exited with status 3", 1, 1.0)
    assert restart["pid"] not in (None, pids[0]) and 0 <= restart["uptime"] < 20
    assert abs(restart["at"] - time.time()) < 30
    client.close()
    assert not (tmp_path / "var" / "redis").exists()


def test_a_child_that_keeps_dying_is_given_up_on(tmp_path, redis_server):
    up, out = supervisor(tmp_path, redis_server.url, up_restarts=3)
    up.children = [stand_in("broken", "raise SystemExit(3)", tmp_path)]
    started = time.monotonic()
    assert up.run() == 1, out.getvalue()
    assert time.monotonic() - started < 30
    text = out.getvalue()
    assert len(re.findall(r"^broken: .* exited with status 3", text, re.M)) == 3, text
    assert re.search(r"^broken: failed 3 times in a row .*giving up", text, re.M), text
    assert "Penumbra is up" not in text


def test_once_up_a_child_that_keeps_dying_never_takes_the_rest_down(tmp_path, redis_server):
    up, out = supervisor(tmp_path, redis_server.url, up_restarts=2)
    steady = tmp_path / "steady"
    steady.mkdir()
    up.children = [stand_in("steady", "import pathlib, time; pathlib.Path('ready').touch(); time.sleep(120)", steady,
                            ready="ready"),
                   stand_in("dier", "import pathlib, time; pathlib.Path('ready').touch(); time.sleep(0.5); exit(3)",
                            tmp_path, ready="ready")]
    pids = []
    up.on_ready.append(lambda: pids.append(up.children[0].pid))
    stop = threading.Timer(6.5, lambda: setattr(up, "stopping", True))
    stop.start()
    try:
        assert up.run() == 0, out.getvalue()
    finally:
        stop.cancel()
    text = out.getvalue()
    assert len(re.findall(r"^dier: .* exited with status 3", text, re.M)) >= 3, text
    assert re.search(r"^dier: failed 3 times in a row; the rest stays up; restarting in 4 s", text, re.M), text
    assert "giving up" not in text
    # the steady child ran the whole time, never restarted
    assert len(re.findall(r"^steady: starting", text, re.M)) == 1 and pids, text
    # every restart is kept with its cause and its failures in a row, in order
    client = redis.Redis.from_url(redis_server.url)
    restarts = [read_restart(i, f) for i, f in client.xrange(Keys().restarts)]
    client.close()
    assert len(restarts) == len(re.findall(r"^dier: .* exited with status 3", text, re.M))
    assert [r["failures"] for r in restarts] == list(range(1, len(restarts) + 1))
    assert {(r["part"], r["cause"]) for r in restarts} == {("dier", "exited with status 3")}
    assert [r["restart_in"] for r in restarts[:3]] == [1, 2, 4]


#: ``penumbra up`` with one stand-in child: argv home, API port, Redis URL
SUPERVISE_A_SLEEPER = """
import sys
from pathlib import Path
from penumbra.cli.supervisor import Supervisor, UpSettings
from tests.system.conftest import stand_in
home = Path(sys.argv[1])
up = Supervisor(UpSettings(home=home, port=int(sys.argv[2]), redis_url=sys.argv[3]))
up.children = [stand_in("sleeper", "import pathlib, time; pathlib.Path('ready').touch(); time.sleep(300)",
                        home, ready="ready")]
sys.exit(up.run())
"""


def supervise_a_sleeper(start_up, home: Path, redis_url: str) -> tuple[Up, set[int]]:
    """Such a supervisor as a subprocess, once up; it and the pids of its children."""
    env = {**os.environ, "PENUMBRA_HOME": str(home), "PYTHONPATH": str(ROOT)}
    up = start_up(home, env, [sys.executable, "-c", SUPERVISE_A_SLEEPER, str(home), str(free_port()), redis_url])
    up.wait_for(r"^Penumbra is up", 60)
    children = processes_of(home) - {up.process.pid}
    assert children, up.output
    return up, children


def test_ctrl_c_stops_the_children_and_exits_0(tmp_path, redis_server, start_up):
    up, children = supervise_a_sleeper(start_up, tmp_path, redis_server.url)
    os.kill(up.process.pid, signal.SIGINT)
    assert up.process.wait(30) == 0, up.output
    assert [pid for pid in children if alive(pid)] == []
    assert re.search(r"^sleeper: the sleeper stand-in \(pid \d+\) stopped in", up.output, re.M), up.output


def test_the_children_do_not_outlive_a_killed_up(tmp_path, redis_server, start_up):
    up, children = supervise_a_sleeper(start_up, tmp_path, redis_server.url)
    os.kill(up.process.pid, signal.SIGKILL)
    up.process.wait(10)
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [pid for pid in children if alive(pid)] == []


def test_ups_own_redis_asks_for_a_password_and_its_files_are_the_owners_alone(tmp_path, monkeypatch):
    monkeypatch.delenv("PENUMBRA_REDIS_URL", raising=False)
    home = tmp_path / "home"
    up = Supervisor(UpSettings(home=home, port=free_port(), redis_port=free_port()), out=io.StringIO())
    probe = ("import os, pathlib, redis; client = redis.Redis.from_url(os.environ['PENUMBRA_REDIS_URL']); "
             "client.set('pn:probe', 1); pathlib.Path('ready').touch(); import time; time.sleep(60)")
    child = stand_in("probe", probe, tmp_path, ready="ready")
    child.env = up._env()  # what up gives every child it starts
    up.children = [up.redis, child]
    seen = {}

    def look() -> None:
        password = (home / "var" / "redis" / "password").read_text()
        anonymous = redis.Redis(host="127.0.0.1", port=up.settings.redis_port, socket_timeout=5)
        try:
            anonymous.get("pn:probe")
        except redis.AuthenticationError as error:
            seen["anonymous"] = str(error)
        finally:
            anonymous.close()
        with redis.Redis(host="127.0.0.1", port=up.settings.redis_port, password=password) as client:
            seen["probe"] = client.get("pn:probe")
            seen["memory"] = client.config_get("maxmemory*")
        seen["modes"] = {path.relative_to(home).as_posix(): path.stat().st_mode & 0o777
                         for path in [home / "var", *(home / "var").rglob("*")]}
        up.stopping = True

    up.on_ready.append(look)
    assert up.run() == 0
    assert "authenticated" in seen["anonymous"] or "NOAUTH" in seen["anonymous"], seen
    assert seen["probe"] == b"1"  # the child reached it through the URL up gave it
    # a memory limit, past which Redis refuses writes rather than drop data
    assert seen["memory"]["maxmemory-policy"] == "noeviction" and int(seen["memory"]["maxmemory"]) == 4096 << 20
    directories = {p: m for p, m in seen["modes"].items() if (home / p).is_dir()}
    files = {p: m for p, m in seen["modes"].items() if (home / p).is_file()}
    assert directories and all(mode & 0o077 == 0 for mode in directories.values()), directories
    assert {"var/redis/password", "var/redis/redis.conf", "var/up.lock"} <= set(files), files
    assert all(mode & 0o077 == 0 for mode in files.values()), files


def test_a_port_in_use_is_named_with_its_setting(tmp_path, redis_server):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        out = io.StringIO()
        up = Supervisor(UpSettings(home=tmp_path, port=taken.getsockname()[1], redis_url=redis_server.url), out=out)
        assert up.run() == 2
    assert "PENUMBRA_PORT" in out.getvalue() and "in use" in out.getvalue()


def test_one_up_per_home(tmp_path, redis_server):
    (tmp_path / "var").mkdir()
    with open(tmp_path / "var" / "up.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        up, out = supervisor(tmp_path, redis_server.url)
        assert up.run() == 2
    assert "another penumbra up runs on" in out.getvalue()
