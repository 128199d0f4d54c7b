"""``penumbra up --demo`` end to end, and the whole path under faults.

The session's one ``penumbra up --demo`` (tests/demo.py: real redis-server, Spark job,
API and the three scenarios' simulators, started as a user starts them; the browser
tests of tests/e2e/ use it first) serves every step, in order; a step that needs an
earlier one is skipped when that one failed:

1. every scenario raises alarms within a few minutes of the start (the smoke test);
2. kill -9 of the Spark job while a simulated file is replayed into it (on top of the
   demo's own traffic): after the restart ``up`` does by itself, the query's matches are
   exactly the local engine's on the same events, none lost, none doubled;
3. a flood of malformed events, through the API and straight into the ingest stream:
   the system keeps serving, every reject is recorded with its reason, and every valid
   event between them is processed;
4. the API killed: a websocket client reconnects and resumes from its last id, and what
   it received equals the stream, no gap and nothing twice;
5. Redis killed: ``up`` restarts it; tokens, queries, a moved threshold and an alarm's
   state survive (AOF), and the API and the job carry on by themselves;
6. SIGTERM stops the demo and everything it started.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from penumbra.cli import scenarios
from penumbra.engine import compile_query
from penumbra.events import parse_events, parse_streams
from tests.demo import ALARM_TIMEOUT, Demo, KEYS, START_TIMEOUT, heartbeat, matches_of, wait
from tests.system.conftest import ROOT, bearer, http, processes_of

STOP_TIMEOUT = 240.0
#: the fault steps' own query, over copies of the intrusion streams (the demo's live
#: traffic on the real ones would make a replayed file late)
FAULT_QUERY = "faults"
FAULT_STREAMS = {"fseismic": "seismic", "facoustic": "acoustic"}
FAULT_TEXT = ("SELECT * FROM FSEISMIC A, FACOUSTIC B WHERE WINDOW(A, B) = 2000 AND A.region = B.region "
              "WITH THRESHOLD 0.6")


# ---- 1. smoke


@pytest.mark.slow
def test_every_scenario_raises_alarms_soon_after_up_demo(demo):
    up = demo.up
    for name in ("intrusion", "cluster", "shoplifting"):
        up.wait_for(rf"^sim-{name}: starting the {name} simulator", 30)
    started = time.monotonic()
    for name, sc in scenarios.SCENARIOS.items():
        found = wait(f"an alarm of {name}", lambda: matches_of(demo, name), ALARM_TIMEOUT, demo, every=2.0)
        assert all(m["prob"] >= sc.queries[0].threshold for m in found)
    print(f"alarms of all three scenarios {time.monotonic() - started:.0f} s after the simulators started")
    with http(demo.base) as client:
        me = client.get("/api/me", headers=bearer(demo.token)).json()
        health = client.get("/api/health").json()
    assert me["role"] == "analyst" and health["status"] == "ok"
    demo.done.add("alarms")


# ---- 2. kill -9 of the job under load


def fault_events(seed: int, rate: float, duration: float) -> list[dict]:
    sim = scenarios.generate("intrusion", rate, duration, seed)
    renamed = {v: k for k, v in FAULT_STREAMS.items()}
    return [{**e, "stream": renamed[e["stream"]], "id": f"{seed}.{e['id']}"} for e in sim.events]


def closer(after: list[dict], n: int) -> dict:
    """A lone event far after ``after``: the watermark passes everything before it."""
    last = max(e["ts"]["detected"] for e in after)
    return {"stream": "fseismic", "id": f"closer{n}", "ts": {"detected": last + 1_000_000, "template": "s1"},
            "attrs": {"region": "nowhere"}}


def local(events: list[dict]) -> list[tuple]:
    streams = parse_streams({name: scenarios.INTRUSION_STREAMS[base] for name, base in FAULT_STREAMS.items()})
    operator = compile_query(FAULT_TEXT, streams)
    parsed, rejected = parse_events(events, streams)
    assert rejected == []
    found = [m.to_json() for m in operator.feed(parsed).matches] + [m.to_json() for m in operator.flush().matches]
    return sorted((tuple(sorted(m["events"].items())), m["prob"]) for m in found)


def spark(demo: Demo) -> list[tuple]:
    return sorted((tuple(sorted(m["events"].items())), m["prob"]) for m in matches_of(demo, FAULT_QUERY))


def assert_same_matches(got: list[tuple], want: list[tuple]) -> None:
    assert [g[0] for g in got] == [w[0] for w in want]
    assert [g[1] for g in got] == pytest.approx([w[1] for w in want], rel=1e-12, abs=1e-12)


def replay(demo: Demo, events: list[dict], path, rate: float) -> subprocess.Popen:
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    env = {**os.environ, "PENUMBRA_TOKEN": demo.token, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "penumbra", "replay", str(path), "--rate", str(rate),
                             "--api", demo.base], env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@pytest.mark.slow
def test_a_job_killed_under_load_is_restarted_and_loses_or_doubles_nothing(demo, tmp_path):
    demo.needs("alarms")
    with http(demo.base) as client:
        for name, base in FAULT_STREAMS.items():
            answer = client.put(f"/api/streams/{name}", json=scenarios.INTRUSION_STREAMS[base],
                                headers=bearer(demo.admin))
            assert answer.status_code == 200, answer.text
        answer = client.post("/api/queries", json={"id": FAULT_QUERY, "text": FAULT_TEXT}, headers=bearer(demo.token))
        assert answer.status_code == 201, answer.text
    events = fault_events(seed=21, rate=400, duration=10)
    events.append(closer(events, 1))
    want = local(events)
    assert len(want) > 50
    old, job_id = int(heartbeat(demo)["pid"]), heartbeat(demo)["job"]
    mark = len(demo.up.lines)
    sender = replay(demo, events, tmp_path / "load.jsonl", rate=400)
    try:
        wait("the first fault matches", lambda: matches_of(demo, FAULT_QUERY), 120, demo, every=0.3)
        os.kill(old, signal.SIGKILL)
        demo.up.wait_for(rf"^job: .*\(pid {old}\) was killed by SIGKILL", 30, start=mark)
        out, err = sender.communicate(timeout=300)
    finally:
        if sender.poll() is None:
            sender.kill()
            sender.wait()
    assert sender.returncode == 0, err.decode()
    assert json.loads(out)["accepted"] == len(events)
    wait("a new job", lambda: heartbeat(demo).get("pid") not in (None, str(old)) and
         heartbeat(demo).get("active") == "1", START_TIMEOUT, demo)
    assert heartbeat(demo)["job"] == job_id, "the same job, from its checkpoint"
    wait("every fault match", lambda: len(spark(demo)) >= len(want), START_TIMEOUT, demo)
    time.sleep(3)  # anything doubled would be there by now
    assert_same_matches(spark(demo), want)
    demo.done.add("killed")


# ---- 3. malformed events


@pytest.mark.slow
def test_a_flood_of_malformed_events_is_rejected_with_reasons_and_the_valid_ones_processed(demo):
    demo.needs("killed")
    valid = fault_events(seed=22, rate=200, duration=5)
    shift = max(e["ts"]["detected"] for e in fault_events(seed=21, rate=400, duration=10)) + 2_000_000
    valid = [{**e, "ts": {**e["ts"], "detected": e["ts"]["detected"] + shift}} for e in valid]
    valid.append(closer(valid, 2))
    bad_items = [
        {"stream": "fseismic", "id": "bad-type", "ts": "yesterday"},
        {"stream": "fseismic", "id": "bad-template", "ts": {"detected": shift, "template": "nope"}},
        {"stream": 7, "id": "bad-stream", "ts": {"lo": 1, "hi": 2}},
        {"id": "no-stream", "ts": {"lo": 1, "hi": 2}},
        {"stream": "fseismic", "id": "x" * 300_000, "ts": {"lo": 1, "hi": 2}},
        ["not", "an", "event"],
    ]
    raw_entries = [b"{not json", b"\xff\xfe\xfd", b'{"stream": "fseismic", "id": "nan", "ts": {"lo": NaN, "hi": 1}}',
                   json.dumps({"stream": "fseismic", "id": "huge", "ts": {"lo": 1, "hi": 2},
                               "attrs": {"blob": "y" * 2_000_000}}).encode()]
    with demo.redis() as store:
        rejected_before = int(store.hget(KEYS.counts, "rejected") or 0)
        dead_mark = (store.xrevrange(KEYS.dead, count=1) or [(b"0-0", {})])[0][0].decode()
    # through the API: lists mixing good and bad, and whole bodies that are not JSON at all
    chunks = [valid[i:i + 60] for i in range(0, len(valid), 60)]
    with http(demo.base) as client:
        for n, chunk in enumerate(chunks):
            body = chunk[:30] + [bad_items[n % len(bad_items)]] + chunk[30:]
            answer = client.post("/api/events", json=body, headers=bearer(demo.token))
            assert answer.status_code == 202 and answer.json()["accepted"] == len(chunk), answer.text
        for content in (b"[{\"stream\": \"a\", \"id\": 1, \"ts\": NaN}]", b"\xff\xfe not utf-8", b"{" * 100_000,
                        b"[" + b",".join([b'{"stream":"fs","id":"z","ts":{"lo":1,"hi":2}}'] * 10_001) + b"]",
                        b"x" * (9 * 1024 * 1024)):
            answer = client.post("/api/events", content=content, headers={**bearer(demo.token),
                                                                          "Content-Type": "application/json"})
            assert 400 <= answer.status_code < 500, (answer.status_code, answer.text[:200])
            assert "error" in answer.json()
    api_rejects = len(chunks)
    # straight into the ingest stream: the job validates them
    with demo.redis() as store:
        for entry in raw_entries:
            store.xadd(KEYS.ingest, {"e": entry})
    wait("every valid event's matches", lambda: len(spark(demo)) >= len(local_all(valid)), START_TIMEOUT, demo)
    with demo.redis() as store:
        wait("the job's rejects", lambda: int(store.hget(KEYS.counts, "rejected") or 0)
             >= rejected_before + api_rejects + len(raw_entries), 120, demo)
        dead = store.xrange(KEYS.dead, f"({dead_mark}", "+")
    reasons = [f[b"reason"].decode() for _, f in dead if f.get(b"kind") == b"rejected"]
    assert len(reasons) >= api_rejects + len(raw_entries) and all(reasons)
    assert sum(1 for _, f in dead if f.get(b"source") == b"api") >= api_rejects
    time.sleep(2)
    assert_same_matches(spark(demo), local_all(valid))
    with http(demo.base) as client:
        assert client.get("/api/health").json()["status"] == "ok"
    demo.done.add("flood")


def local_all(after: list[dict]) -> list[tuple]:
    """The fault query's matches over everything it was sent: the killed step's events, then ``after``."""
    before = fault_events(seed=21, rate=400, duration=10)
    return local(before + [closer(before, 1)] + after)


# ---- 4. the API restarted


@pytest.mark.slow
def test_a_websocket_client_resumes_without_a_gap_after_the_api_restarts(demo):
    from websockets.exceptions import ConnectionClosed, InvalidHandshake
    from websockets.sync.client import connect

    demo.needs("alarms")
    url = f"ws://127.0.0.1:{demo.port}/ws"
    received: list[str] = []
    old = demo.api_pid()
    mark = len(demo.up.lines)
    killed_at = None
    deadline = time.monotonic() + 240
    reconnects = 0
    while time.monotonic() < deadline:
        try:
            with connect(url, open_timeout=10) as socket:
                socket.send(json.dumps({"token": demo.token}))
                subscribe = {"type": "subscribe", "queries": ["intrusion"], "kinds": ["matches"]}
                if received:
                    subscribe["since"] = received[-1]
                socket.send(json.dumps(subscribe))
                while time.monotonic() < deadline:
                    message = json.loads(socket.recv(timeout=5))
                    if message.get("type") == "matches" and message.get("query") == "intrusion":
                        received.append(message["id"])
                    if killed_at is None and len(received) >= 3:
                        killed_at = time.monotonic()
                        os.kill(old, signal.SIGKILL)
                    if killed_at and reconnects and len(received) >= 3 + 5:
                        deadline = 0
                        break
        except (ConnectionClosed, InvalidHandshake, OSError, TimeoutError):
            if killed_at:
                reconnects += 1
            time.sleep(0.5)
    assert killed_at and reconnects, f"no restart seen; received {len(received)}"
    demo.up.wait_for(rf"^api: .*\(pid {old}\) was killed by SIGKILL", 30, start=mark)
    rest = [m["id"] for m in matches_of(demo, "intrusion")]
    first, final = rest.index(received[0]), rest.index(received[-1])
    assert received == rest[first:final + 1], "the feed skipped or repeated a match across the restart"
    demo.done.add("api")


# ---- 5. Redis restarted


@pytest.mark.slow
def test_redis_killed_and_restarted_keeps_tokens_queries_thresholds_and_alarm_states(demo):
    demo.needs("alarms")
    with http(demo.base) as client:
        headers = bearer(demo.token)
        assert client.patch("/api/queries/cluster", json={"threshold": 0.55}, headers=headers).status_code == 200
        # an alarm instance of the shoplifting query (one per tag), acknowledged
        instance = client.get("/api/alarms", params={"query": "shoplifting"}, headers=headers).json()["items"][0]["id"]
        assert client.post(f"/api/alarms/{instance}/acknowledge", headers=headers).status_code in (200, 409)
        viewer = client.post("/api/tokens", json={"role": "viewer", "label": "survivor"},
                             headers=bearer(demo.admin)).json()["token"]
    with demo.redis() as store:
        pid = store.info("server")["process_id"]
        state = store.hget(KEYS.alarm_states("shoplifting"), instance)
    before = len(matches_of(demo, "intrusion"))
    time.sleep(2.5)  # the AOF is written and fsynced every second
    mark = len(demo.up.lines)
    os.kill(pid, signal.SIGKILL)
    demo.up.wait_for(rf"^redis: .*\(pid {pid}\) was killed by SIGKILL", 30, start=mark)
    demo.up.wait_for(r"^redis: ready", 60, start=mark)

    def healthy():
        with http(demo.base) as client:
            return client.get("/api/health").json()["status"] == "ok"

    wait("the API and the job healthy again", healthy, START_TIMEOUT, demo)
    with http(demo.base) as client:
        assert client.get("/api/me", headers=bearer(viewer)).json()["role"] == "viewer"
        assert client.get("/api/queries/cluster", headers=bearer(viewer)).json()["threshold"] == 0.55
        names = {q["id"] for q in client.get("/api/queries", headers=bearer(viewer)).json()["items"]}
    assert {"intrusion", "cluster", "shoplifting", FAULT_QUERY} <= names
    with demo.redis() as store:
        assert store.hget(KEYS.alarm_states("shoplifting"), instance) == state
    wait("new intrusion matches after the restart", lambda: len(matches_of(demo, "intrusion")) > before + 3,
         START_TIMEOUT, demo)
    demo.done.add("redis")


@pytest.mark.slow
def test_sigterm_stops_the_demo_and_everything_it_started(demo):
    demo.needs("alarms")
    children = processes_of(demo.home) - {demo.up.process.pid}
    assert demo.up.terminate(STOP_TIMEOUT) == 0, demo.up.output
    for name in ("intrusion", "cluster", "shoplifting"):
        assert f"sim-{name}: the {name} simulator" in demo.up.output
    assert processes_of(demo.home) == set() and children
