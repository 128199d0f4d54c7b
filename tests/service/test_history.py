"""History, summary, export and backtest over the archive and the live tail, through the API.

Batches are written as the sink writes them (the archive's files, then the result stream
by the sink's own script with a small cap), the expected answers kept by the test."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import random

import pyarrow.parquet as pq
import pytest
import redis
from fastapi.testclient import TestClient

from backend import create_app
from contract.archive import ArchiveWriter
from contract.results import queue_matches

from .conftest import ADMIN_TOKEN, own_app_settings

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
HOUR = 3_600_000


@pytest.fixture(scope="module")
def world(redis_server, tmp_path_factory):
    """An app of its own with an archive of its own, a join query and 40 batches of
    matches over two hours (the result stream capped at 20: most only archived; the last
    batch not archived, as if written before the archive began)."""
    archive = tmp_path_factory.mktemp("archive")
    keys, settings = own_app_settings(redis_server, "hist", archive=archive)
    store = redis.Redis.from_url(redis_server.url)
    with TestClient(create_app(settings)) as client:
        for stream in ("HiA", "HiB"):
            assert client.put(f"/api/streams/{stream}", json={"pi": 20}, headers=ADMIN).status_code == 200
        query = client.post("/api/queries", headers=ADMIN, json={
            "text": "SELECT * FROM HiA A, HiB B WHERE WINDOW(A, B) = 10 AND A.region = B.region WITH THRESHOLD 0.5",
            "auto_resolve_minutes": 10}).json()["id"]
        rng = random.Random(5)
        writer = ArchiveWriter(archive, "job1")
        start = int(dt.datetime(2026, 11, 20, 23, 0, tzinfo=dt.timezone.utc).timestamp() * 1000)
        written = []
        for batch in range(40):
            at = start + batch * 3 * 60_000
            rows = []
            for n in range(rng.randrange(1, 5)):
                prob = round(rng.uniform(0.5, 1.0), 4)
                key = {"region": rng.randrange(3)}
                rows.append((json.dumps({"events": {"A": f"a{batch}.{n}", "B": f"b{batch}.{n}"}, "prob": prob}).encode(),
                             0, key, prob))
                written.append({"id": f"{at}-{n}", "at": at, "prob": prob, "key": key,
                                "events": {"A": f"a{batch}.{n}", "B": f"b{batch}.{n}"}})
            if batch < 39:
                writer.write(batch, at, {query: rows}, {query: {"0.30": 2, "0.45": 1}})
            pipe = store.pipeline(transaction=True)
            queue_matches(pipe, keys, query, batch, rows, maxlen=20, at=at)
            pipe.execute()
        yield client, store, keys, query, written, start
    store.close()


def pages(client, query: str, limit: int, **params) -> list[dict]:
    items, after = [], None
    for _ in range(1000):
        answer = client.get(f"/api/queries/{query}/history", params={"limit": limit, **params,
                                                                     **({"next": after} if after else {})},
                            headers=ADMIN)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        items += body["items"]
        after = body["next"]
        if after is None:
            return items
    raise AssertionError("the pages do not end")


def test_pages_hold_every_match_once_in_time_order_from_archive_and_live_tail(world):
    client, store, keys, query, written, _ = world
    assert store.xlen(keys.matches(query)) < len(written)   # most are past the live cap
    items = pages(client, query, 7)
    assert [i["id"] for i in items] == [w["id"] for w in written]
    assert [(i["events"], i["prob"], i["key"]) for i in items] == [(w["events"], w["prob"], w["key"]) for w in written]
    assert all(i["at"] * 1000 == w["at"] and i["alarm"].startswith(f"{query}:") for i, w in zip(items, written))


def test_filters_by_period_key_and_probability(world):
    client, _, _, query, written, start = world
    since, until = start + HOUR, start + HOUR + 40 * 60_000
    iso = dt.datetime.fromtimestamp(since / 1000, dt.timezone.utc).isoformat().replace("+00:00", "Z")
    items = pages(client, query, 3, since=iso, until=str(until), key='{"region": 1}', min_prob=0.7)
    expected = [w for w in written if since <= w["at"] < until and w["key"] == {"region": 1} and w["prob"] >= 0.7]
    assert expected and [i["id"] for i in items] == [w["id"] for w in expected]
    for params, field in (({"since": "yesterday"}, "since"), ({"key": "[1]"}, "key"),
                          ({"since": str(until), "until": str(since)}, "since"), ({"last": "7 weeks"}, "last")):
        answer = client.get(f"/api/queries/{query}/history", params=params, headers=ADMIN)
        assert answer.status_code == 422, answer.text
        assert field in json.dumps(answer.json()["error"])
    assert client.get("/api/queries/nope/history", headers=ADMIN).status_code == 404


def test_summary_counts_per_hour_and_key(world):
    client, _, _, query, written, start = world
    answer = client.get(f"/api/queries/{query}/history/summary",
                        params={"since": str(start), "until": str(start + 3 * HOUR)}, headers=ADMIN)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    hours: dict[int, int] = {}
    keys: dict[int, int] = {}
    for w in written:
        hours[w["at"] - w["at"] % HOUR] = hours.get(w["at"] - w["at"] % HOUR, 0) + 1
        keys[w["key"]["region"]] = keys.get(w["key"]["region"], 0) + 1
    assert body["bucket"] == "hour" and body["total"] == len(written)
    assert {b["start"]: b["matches"] for b in body["buckets"]} == hours
    assert {k["key"]["region"]: k["matches"] for k in body["keys"]} == keys


def test_export_streams_csv_and_parquet_with_the_same_rows(world):
    client, _, _, query, written, _ = world
    answer = client.get(f"/api/queries/{query}/history/export", params={"format": "csv", "min_prob": 0.6},
                        headers=ADMIN)
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(answer.text)))
    expected = [w for w in written if w["prob"] >= 0.6]
    assert [r["id"] for r in rows] == [w["id"] for w in expected]
    assert [json.loads(r["events"]) for r in rows] == [w["events"] for w in expected]
    assert rows[0]["time"].endswith("Z")
    answer = client.get(f"/api/queries/{query}/history/export", params={"format": "parquet", "min_prob": 0.6},
                        headers=ADMIN)
    assert answer.status_code == 200
    table = pq.read_table(io.BytesIO(answer.content))
    assert table.column("id").to_pylist() == [w["id"] for w in expected]


def test_backtest_counts_matches_near_misses_alarms_and_precision(world):
    client, store, keys, query, written, start = world
    # verdicts on a few matches: the real ones the more probable
    judged = written[::3]
    for w in judged:
        answer = client.post(f"/api/queries/{query}/verdicts", headers=ADMIN,
                             json={"match": w["id"], "verdict": "real" if w["prob"] >= 0.75 else "false"})
        assert answer.status_code == 201, answer.text
    answer = client.get(f"/api/queries/{query}/backtest", params={"since": str(start), "until": str(start + 3 * HOUR),
                                                                  "steps": 20}, headers=ADMIN)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["floor"] == 0.05 and body["near_misses"] == 3 * 39
    reals = sum(1 for w in judged if w["prob"] >= 0.75)
    for point in body["points"]:
        t = point["threshold"]
        near = (2 if t <= 0.30 else 0) + (1 if t <= 0.45 else 0)
        assert point["matches"] == sum(w["prob"] >= t for w in written) + near * 39, t
        assert point["exact"] == (near == 0)
        # episodes: a key's first match at or above t, again after 10 minutes without one
        opened, last = 0, {}
        for w in written:
            if w["prob"] >= t:
                region = w["key"]["region"]
                if region not in last or w["at"] - last[region] >= 10 * 60_000:
                    opened += 1
                last[region] = w["at"]
        assert point["alarms"] == opened, t
        above = [w for w in judged if w["prob"] >= t]
        assert point["judged"] == len(above)
        if above:
            assert point["precision"] == pytest.approx(sum(w["prob"] >= 0.75 for w in above) / len(above))
            assert point["recall"] == pytest.approx(sum(w["prob"] >= 0.75 for w in above) / reals)


def test_the_archive_keeps_the_history_when_redis_loses_it_and_a_removed_query_keeps_its_own(world):
    client, store, keys, query, written, start = world
    archived = written[:-len([w for w in written if w["at"] == written[-1]["at"]])]
    store.delete(keys.matches(query))
    items = pages(client, query, 50, since=str(start))
    assert [i["id"] for i in items] == [w["id"] for w in archived]
    assert client.delete(f"/api/queries/{query}", headers=ADMIN).status_code in (200, 204)
    assert [i["id"] for i in pages(client, query, 50)] == [w["id"] for w in archived]
    answer = client.get(f"/api/queries/{query}/history", params={"since": str(start - 2 * HOUR)}, headers=ADMIN)
    gaps = answer.json()["unavailable"]
    assert gaps == [{"since": start - 2 * HOUR, "until": start,
                     "reason": "before the archive began, and past what the live tail holds"}]
    # a period after the archive began has no gap, matches or not
    answer = client.get(f"/api/queries/{query}/history", params={"since": str(start + 3 * HOUR)}, headers=ADMIN)
    assert answer.json()["items"] == [] and answer.json()["unavailable"] == []


def test_a_cursor_pages_through_every_match_once_while_new_ones_arrive(redis_server, tmp_path):
    keys, settings = own_app_settings(redis_server, "hist-live", archive=tmp_path)
    store = redis.Redis.from_url(redis_server.url)
    writer = ArchiveWriter(tmp_path, "job2")
    written: list[str] = []

    def batch(number: int, at: int) -> None:
        rows = [(json.dumps({"events": {"A": f"a{number}.{n}"}, "prob": 0.9}).encode(), 0, None, 0.9) for n in range(5)]
        writer.write(number, at, {"q-live": rows}, {})
        pipe = store.pipeline(transaction=True)
        queue_matches(pipe, keys, "q-live", number, rows, maxlen=3, at=at)
        pipe.execute()
        written.extend(f"{at}-{n}" for n in range(5))

    start = 1_795_000_000_000
    with TestClient(create_app(settings)) as client:
        for number in range(4):
            batch(number, start + number * 1000)
        seen, after = [], None
        for turn in range(100):
            params = {"limit": 3, **({"next": after} if after else {})}
            body = client.get("/api/queries/q-live/history", params=params, headers=ADMIN).json()
            seen += [i["id"] for i in body["items"]]
            after = body["next"]
            if turn < 6:
                batch(4 + turn, start + (4 + turn) * 1000)      # new matches land between pages
            if after is None:
                break
    store.close()
    assert seen == written


def test_rates_count_each_querys_matches_of_the_window_on_the_server(redis_server, tmp_path):
    keys, settings = own_app_settings(redis_server, "rates", archive=tmp_path)
    store = redis.Redis.from_url(redis_server.url)
    with TestClient(create_app(settings)) as client:
        for stream in ("RtA", "RtB"):
            client.put(f"/api/streams/{stream}", json={"pi": 20}, headers=ADMIN)
        ids = [client.post("/api/queries", headers=ADMIN, json={
            "text": "SELECT * FROM RtA A, RtB B WHERE WINDOW(A, B) = 10 WITH THRESHOLD 0.5"}).json()["id"]
            for _ in range(2)]
        now = int(dt.datetime.now(dt.timezone.utc).timestamp() * 1000)
        writer = ArchiveWriter(tmp_path, "job3")
        # 12 matches 20 minutes ago (outside 15 minutes), 30 within: archived, and 4 in the live tail only
        for number, (ago, n, archived) in enumerate(((20, 12, True), (10, 30, True), (1, 4, False))):
            rows = [(json.dumps({"events": {"A": f"a{number}.{k}"}, "prob": 0.9}).encode(), 0, None, 0.9)
                    for k in range(n)]
            if archived:
                writer.write(number, now - ago * 60_000, {ids[0]: rows}, {})
            pipe = store.pipeline(transaction=True)
            queue_matches(pipe, keys, ids[0], number, rows, maxlen=100, at=now - ago * 60_000)
            pipe.execute()
        body = client.get("/api/rates", params={"last": "15m"}, headers=ADMIN).json()
    store.close()
    counted = {item["query"]: item["matches"] for item in body["items"]}
    assert counted == {ids[0]: 34, ids[1]: 0}
    # no event was sent on the streams: each source says so (null), for the dashboard to flag
    assert all(item["sources"] == {"rta": None, "rtb": None} for item in body["items"])
    assert next(i for i in body["items"] if i["query"] == ids[0])["per_minute"] == pytest.approx(34 / 15, rel=1e-3)


def test_a_period_reaching_before_the_epoch_starts_at_it(world):
    client, _, _, query, written, _ = world
    for route in (f"/api/queries/{query}/history", f"/api/queries/{query}/history/summary", "/api/rates"):
        for params in ({"last": "30000d"},) + (({"until": "0"}, {"since": "0", "until": "1"}) if "rates" not in route
                                               else ()):
            answer = client.get(route, params=params, headers=ADMIN)
            assert answer.status_code == 200, (route, params, answer.text)
