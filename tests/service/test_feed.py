"""``penumbra replay`` and ``penumbra simulate`` against the session's real API server
(HTTP on a loopback port) and Redis: what they send is what the ingest stream holds, a
bad line is rejected alone with its reason, and a pace is kept."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from penumbra.cli.processes import ApiServer
from contract.entries import read_ingest

from .conftest import ADMIN_TOKEN, fresh_streams

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def api_server(redis_server, tokens, tmp_path_factory):
    """An API server of this module's own (the session's serves the timing-sensitive live
    feed tests, which the traffic sent here would disturb), stopped by its pid."""
    log = tmp_path_factory.mktemp("feed-api") / "server.log"
    with ApiServer(redis_server.url, log=log, admin_token=ADMIN_TOKEN, ingest_rate_limit=10_000) as api:
        yield api


def penumbra(*argv: str, token: str | None = ADMIN_TOKEN, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PENUMBRA_TOKEN", None)
    if token:
        env["PENUMBRA_TOKEN"] = token
    return subprocess.run([sys.executable, "-m", "penumbra", *argv], env=env, cwd=ROOT, capture_output=True,
                          timeout=timeout)


def ingested_since(store, keys, mark: str) -> list[dict]:
    return [json.loads(line) for _, _, line in read_ingest(store.xrange(keys.ingest, f"({mark}", "+"))]


def last_id(store, key) -> str:
    found = store.xrevrange(key, count=1)
    return found[0][0].decode() if found else "0-0"


def test_replay_sends_every_line_in_order_and_a_bad_line_is_rejected_alone(api_server, client, store, keys,
                                                                           tmp_path):
    (stream,) = fresh_streams(client, "replay")
    good = [{"stream": stream, "id": f"e{n}", "ts": {"lo": n, "hi": n + 1}} for n in range(7)]
    lines = [json.dumps(e).encode() for e in good[:3]] + [b"{not json", b"\xff\xfe bytes"] + \
        [json.dumps(e).encode() for e in good[3:]] + [json.dumps({"stream": stream, "id": "nan", "ts": 5}).encode()]
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n\n")
    ingest, dead = last_id(store, keys.ingest), last_id(store, keys.dead)
    done = penumbra("replay", str(path), "--api", api_server.url, "--batch", "4")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert (summary["sent"], summary["accepted"], summary["rejected"]) == (10, 7, 3)
    assert ingested_since(store, keys, ingest) == good
    rejects = store.xrange(keys.dead, f"({dead}", "+")
    assert [json.loads(f[b"raw"]) for _, f in rejects] == ["{not json", "\ufffd\ufffd bytes",
                                                           {"stream": stream, "id": "nan", "ts": 5}]
    assert all(f[b"reason"] and f[b"source"] == b"api" for _, f in rejects)


def test_replay_keeps_the_rate_it_is_given(api_server, client, store, keys, tmp_path):
    (stream,) = fresh_streams(client, "paced")
    path = tmp_path / "paced.jsonl"
    path.write_text("".join(json.dumps({"stream": stream, "id": f"p{n}", "ts": {"lo": n, "hi": n}}) + "\n"
                            for n in range(30)))
    started = time.monotonic()
    done = penumbra("replay", str(path), "--api", api_server.url, "--rate", "40")
    assert done.returncode == 0, done.stderr
    assert 29 / 40 <= time.monotonic() - started < 20
    assert json.loads(done.stdout)["accepted"] == 30


def test_a_refused_token_is_one_clear_error(api_server, tmp_path):
    path = tmp_path / "one.jsonl"
    path.write_text(json.dumps({"stream": "x", "id": "1", "ts": {"lo": 0, "hi": 0}}) + "\n")
    done = penumbra("replay", str(path), "--api", api_server.url, token="pn_not-a-token")
    assert done.returncode == 1 and b"refused the token (401)" in done.stderr


def test_simulate_registers_its_scenario_and_sends_what_its_truth_names(api_server, store, keys, tmp_path, client,
                                                                        as_role):
    truth_file = tmp_path / "truth.json"
    mark = last_id(store, keys.ingest)
    done = penumbra("simulate", "cluster", "--rate", "60", "--duration", "60", "--speed", "0", "--seed", "9",
                    "--setup", "--truth", str(truth_file), "--api", api_server.url)
    assert done.returncode == 0, done.stderr
    sent = ingested_since(store, keys, mark)
    assert json.loads(done.stdout)["events"] == len(sent) > 1000
    truth = json.loads(truth_file.read_text())
    posted = {e["id"] for e in sent}
    true_ids = {i for match in truth["queries"]["cluster"]["truth"] for i in match.values()}
    assert true_ids and true_ids <= posted, "the truth names the events as they were sent"
    query = client.get("/api/queries/cluster", headers=as_role("viewer"))
    assert query.status_code == 200 and query.json()["threshold"] == 0.5
    assert client.get("/api/streams/CPU", headers=as_role("admin")).json()["params"]["pi"] == 150
    # a second run keeps the registered query, goes on later in time and with new ids
    again = penumbra("simulate", "cluster", "--rate", "20", "--duration", "30", "--speed", "0", "--setup",
                     "--api", api_server.url)
    assert again.returncode == 0 and b"already registered" in again.stderr
    later = ingested_since(store, keys, mark)[len(sent):]
    assert later and not posted & {e["id"] for e in later}


def test_simulate_straight_into_the_ingest_stream(redis_server, store, keys):
    mark = last_id(store, keys.ingest)
    done = penumbra("simulate", "shoplifting", "--rate", "50", "--duration", "20", "--speed", "0",
                    "--redis", redis_server.url, token=None)
    assert done.returncode == 0, done.stderr
    assert len(ingested_since(store, keys, mark)) == json.loads(done.stdout)["events"] > 500


def test_straight_into_the_ingest_stream_duplicates_and_conflicts_are_told_apart(redis_server, store, keys):
    from penumbra.cli.feed import RedisSink, Tally

    stream = f"sink-{time.monotonic_ns()}"
    store.hset(keys.streams, stream, json.dumps({}))
    event = lambda i, lo=1.0: json.dumps({"stream": stream, "id": i, "ts": {"lo": lo, "hi": lo + 1}}).encode()  # noqa: E731
    tally = Tally()
    dead = store.xlen(keys.dead)
    with RedisSink(redis_server.url, keys.prefix) as sink:
        sink.send([event("a"), event("b"), event("a")], tally)
        sink.send([event("b"), event("a", lo=5.0), event("c")], tally)
    # a, b, c taken once; a and b again as they were: duplicates; a with another time: a conflict
    assert (tally.accepted, tally.duplicates, tally.rejected) == (3, 2, 1)
    assert store.xlen(keys.dead) == dead + 1


def test_simulate_posts_the_truth_it_knows_as_verdicts_and_check_reads_them(api_server, store, keys, tmp_path):
    """While ``simulate --verdicts`` waits for the job's matches of what it sent, matches are
    written as the sink writes them: some of true occurrences, some not. It judges each by its
    truth; ``check --verdicts`` then gives the precision those verdicts say."""
    from .conftest import write_batch

    truth_file = tmp_path / "truth.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PENUMBRA_TOKEN": ADMIN_TOKEN}
    process = subprocess.Popen([sys.executable, "-m", "penumbra", "simulate", "cluster", "--rate", "60",
                                "--duration", "60", "--speed", "0", "--seed", "4", "--setup", "--truth",
                                str(truth_file), "--verdicts", "--api", api_server.url],
                               env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not truth_file.exists() or not truth_file.read_text():
            assert process.poll() is None and time.monotonic() < deadline, process.stderr.read()
            time.sleep(0.05)
        truth = json.loads(truth_file.read_text())["queries"]["cluster"]["truth"]
        assert len(truth) >= 4
        real = truth[:3]
        false = [{**truth[3], "c": truth[0]["c"]}]           # a task's start and CPU with another task's finish
        write_batch(store, keys, 1, {"cluster": [{"events": m, "prob": p, "key": None}
                                                 for m, p in zip(real + false, (0.9, 0.8, 0.7, 0.95))]})
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, err
    assert json.loads(out)["verdicts"] == 4
    given = json.loads(penumbra("check", "--verdicts", "--query", "cluster", "--api", api_server.url).stdout)
    assert (given["judged"], given["real"], given["false"]) == (4, 3, 1) and given["precision"] == 0.75
    high = json.loads(penumbra("check", "--verdicts", "--query", "cluster", "--threshold", "0.85",
                               "--api", api_server.url).stdout)
    assert (high["judged"], high["real"]) == (2, 1)
    assert penumbra("check", "--verdicts", "--api", api_server.url).returncode == 2   # no --query
