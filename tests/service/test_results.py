"""Results: matches in cursor pages, observations, the probability curve, the what-if, metrics.

Matches and observations are written here the way the job's sink writes them
(spark_jobs/sink.py), so the tests need no Spark.
"""

from __future__ import annotations

import json

import pytest

from penumbra.probability import p_within
from penumbra.timestamps import Histogram

from .conftest import JOIN_PI, fresh_streams, unique, write_batch


def write_matches(store, keys, query_id, probs, batch=1, key=None):
    """Matches of one batch as the sink writes them (with their alarm instance, of ``key``); their ids."""
    found = [{"events": {"A": f"a{n}", "B": f"b{n}"}, "prob": prob, "key": key} for n, prob in enumerate(probs)]
    return write_batch(store, keys, batch, {query_id: found})[query_id]


def write_observation(store, keys, query_id, batch, **observed):
    return store.xadd(keys.observations(query_id), {"o": json.dumps(observed), "b": batch}).decode()


def test_matches_pages_newest_first(client, as_role, store, keys, join_query):
    query_id, _, _ = join_query
    ids = write_matches(store, keys, query_id, [0.6 + n / 1000 for n in range(25)])
    seen, cursor = [], None
    while True:
        params = {"limit": 10, **({"before": cursor} if cursor else {})}
        page = client.get(f"/api/queries/{query_id}/matches", params=params, headers=as_role("viewer")).json()
        seen += page["items"]
        cursor = page["next"]
        if cursor is None:
            break
    assert [m["id"] for m in seen] == ids[::-1]
    assert [m["prob"] for m in seen] == [0.6 + n / 1000 for n in range(25)][::-1]
    assert seen[0]["events"] == {"A": "a24", "B": "b24"} and seen[0]["batch"] == 1
    newer = client.get(f"/api/queries/{query_id}/matches", params={"since": ids[20]}, headers=as_role("viewer"))
    assert [m["id"] for m in newer.json()["items"]] == ids[21:][::-1]


@pytest.mark.parametrize("params", [{"limit": 0}, {"limit": 1001}, {"before": "x"}, {"since": "1-2-3"},
                                    {"limit": "ten"}])
def test_matches_bad_parameters(client, as_role, join_query, params):
    query_id, _, _ = join_query
    answer = client.get(f"/api/queries/{query_id}/matches", params=params, headers=as_role("viewer"))
    assert answer.status_code == 422 and answer.json()["error"]["field"] == next(iter(params))


def test_unknown_query_is_404(client, as_role):
    for path in ("matches", "observations", "buffers", "partitions", "near-misses", "what-if"):
        assert client.get(f"/api/queries/nope-{path}/{path}", headers=as_role("viewer")).status_code == 404


def test_observations_and_projections(client, as_role, store, keys, join_query):
    query_id, _, _ = join_query
    assert client.get(f"/api/queries/{query_id}/buffers", headers=as_role("viewer")).json()["value"] is None
    write_observation(store, keys, query_id, 1, buffers={"A": 1}, watermark=5.0)
    # the job writes -Infinity for a bound not known yet (json.dumps allows it)
    latest = write_observation(store, keys, query_id, 2, buffers={"A": 3, "B": 2}, watermark=9.0,
                               buffer_bounds=[float("-inf"), 4.0], near_misses=[{"events": {}, "prob": 0.3}],
                               partitions=[{"stream": "A", "id": "a1", "lpr": [0, 1], "sr": [1, 2], "rpr": [2, 3]}],
                               threshold=0.6, floor=0.05)
    items = client.get(f"/api/queries/{query_id}/observations", params={"limit": 5},
                       headers=as_role("viewer")).json()["items"]
    assert [o["batch"] for o in items] == [2, 1] and items[0]["id"] == latest
    assert items[0]["observations"]["buffer_bounds"] == [None, 4.0]
    buffers = client.get(f"/api/queries/{query_id}/buffers", headers=as_role("viewer")).json()
    assert buffers["id"] == latest and buffers["value"]["buffers"] == {"A": 3, "B": 2}
    near = client.get(f"/api/queries/{query_id}/near-misses", headers=as_role("viewer")).json()["value"]
    assert near["near_misses"] == [{"events": {}, "prob": 0.3}] and near["floor"] == 0.05
    parts = client.get(f"/api/queries/{query_id}/partitions", headers=as_role("viewer")).json()["value"]
    assert parts["partitions"][0]["lpr"] == [0, 1]


def test_curve_of_a_template_event(client, as_role):
    a, b = unique("CA"), unique("CB")
    template = {"edges": [0, 20, 30, 40], "probs": [0.1, 0.3, 0.6]}
    for stream in (a, b):
        client.put(f"/api/streams/{stream}", json={"templates": {"s1": template}, "max_delay": 50},
                   headers=as_role("admin"))
    text = f"SELECT * FROM {a} A, {b} B WHERE WINDOW(A, B) = 25 WITH THRESHOLD 0.5"
    query_id = client.post("/api/queries", json={"text": text}, headers=as_role("analyst")).json()["id"]
    event = {"stream": a, "id": "a1", "ts": {"detected": 100, "template": "s1"}}
    answer = client.post(f"/api/queries/{query_id}/curve", json={"event": event, "points": 50},
                         headers=as_role("viewer"))
    assert answer.status_code == 200, answer.text
    curve = answer.json()
    assert len(curve["x"]) == 50 and curve["threshold"] == 0.5 and set(curve["curves"]) == {"s1"}
    # each point against the PTJoin probability computed directly
    phi = Histogram(template["edges"], template["probs"])
    event_h = Histogram.from_template(phi, 100)
    for x, p in list(zip(curve["x"], curve["curves"]["s1"]))[::7]:
        assert p == pytest.approx(p_within(event_h, Histogram.from_template(phi, x), 25), abs=1e-12)
    bad = {"stream": a, "id": "a1", "ts": {"detected": 100, "template": "zz"}}
    answer = client.post(f"/api/queries/{query_id}/curve", json={"event": bad}, headers=as_role("viewer"))
    assert answer.status_code == 422 and answer.json()["error"]["field"] == "event.ts.template"
    other = {"stream": "elsewhere", "id": "z", "ts": {"lo": 1, "hi": 2}}
    answer = client.post(f"/api/queries/{query_id}/curve", json={"event": other}, headers=as_role("viewer"))
    assert answer.status_code == 422 and answer.json()["error"]["field"] == "event.stream"
    # partners placed on the curve: their max time, probability and probing range
    partners = [{"stream": b, "id": f"b{x}", "ts": {"detected": x, "template": "s1"}} for x in (60, 90, 118, 200)]
    answer = client.post(f"/api/queries/{query_id}/curve", json={"event": event, "partners": partners},
                         headers=as_role("viewer"))
    assert answer.status_code == 200, answer.text
    placed = answer.json()["partners"]
    assert [(p["id"], p["x"]) for p in placed] == [("b60", 60), ("b90", 90), ("b118", 118), ("b200", 200)]
    for point in placed:
        assert point["prob"] == pytest.approx(p_within(event_h, Histogram.from_template(phi, point["x"]), 25),
                                              abs=1e-12)
    assert placed[-1]["partition"] is None and placed[-1]["prob"] == 0.0, "far beyond every probing range"
    assert placed[1]["partition"] is not None
    bad_partner = [partners[0], {"stream": b, "id": "b?", "ts": {"detected": "soon", "template": "s1"}}]
    answer = client.post(f"/api/queries/{query_id}/curve", json={"event": event, "partners": bad_partner},
                         headers=as_role("viewer"))
    assert answer.status_code == 422 and answer.json()["error"]["field"].startswith("partners.1.ts"), answer.text
    answer = client.post(f"/api/queries/{query_id}/curve", json={"event": event, "partners": [event]},
                         headers=as_role("viewer"))
    assert answer.status_code == 422 and answer.json()["error"]["field"] == "partners", answer.text


def test_curve_of_an_interval_event_has_the_ranges_of_equations_4_to_6(client, as_role, join_query):
    query_id, a, _ = join_query
    event = {"stream": a, "id": "a1", "ts": {"lo": 10, "hi": 30}}
    curve = client.post(f"/api/queries/{query_id}/curve", json={"event": event}, headers=as_role("viewer")).json()
    # window d = 100, the partner's pi = JOIN_PI: LPR [lo - d, hi - d + pi], RPR [lo + d, hi + d + pi]
    assert len(curve["x"]) == 200
    assert curve["lpr"] == [10 - 100, 30 - 100 + JOIN_PI] and curve["rpr"] == [10 + 100, 30 + 100 + JOIN_PI]


def test_curve_needs_a_join(client, as_role):
    a, b = fresh_streams(client, "A", "B")
    text = f"PATTERN SEQ({a} a, {b} b) WITHIN 10"
    query_id = client.post("/api/queries", json={"text": text}, headers=as_role("analyst")).json()["id"]
    event = {"stream": a, "id": "a", "ts": {"lo": 1, "hi": 2}}
    answer = client.post(f"/api/queries/{query_id}/curve", json={"event": event}, headers=as_role("viewer"))
    assert answer.status_code == 422


def test_what_if_counts_matches_and_near_misses(client, as_role, store, keys, join_query):
    query_id, _, _ = join_query
    write_matches(store, keys, query_id, [0.99], batch=1)                   # before the window
    write_observation(store, keys, query_id, 1, floor=0.05, counters={"near_misses": 100})
    write_matches(store, keys, query_id, [0.65, 0.7, 0.95], batch=2)
    write_observation(store, keys, query_id, 2, floor=0.05, counters={"near_misses": 2},
                      near_misses=[{"prob": 0.1}, {"prob": 0.5}])
    write_matches(store, keys, query_id, [0.8], batch=3)
    write_observation(store, keys, query_id, 3, floor=0.05, counters={"near_misses": 1},
                      near_misses=[{"prob": 0.3}])
    answer = client.get(f"/api/queries/{query_id}/what-if", params={"batches": 2, "steps": 20},
                        headers=as_role("viewer")).json()
    assert (answer["batches"], answer["matches"], answer["near_misses"], answer["exact"]) == (2, 4, 3, True)
    probs = [0.65, 0.7, 0.95, 0.8, 0.1, 0.5, 0.3]
    assert answer["points"][0]["threshold"] == 0.05 and answer["points"][-1]["threshold"] == 1.0
    for point in answer["points"]:
        assert point["matches"] == sum(p >= point["threshold"] for p in probs)
    # a window with sampled near misses scales them (and says so)
    wide = client.get(f"/api/queries/{query_id}/what-if", params={"batches": 3}, headers=as_role("viewer")).json()
    assert wide["exact"] is False and wide["near_misses"] == 103 and wide["matches"] == 5
    assert wide["points"][0]["matches"] == pytest.approx(5 + 103)


def test_what_if_is_exact_on_the_hundredths_with_the_jobs_near_miss_histograms(client, as_role, store, keys,
                                                                                join_query):
    query_id, _, _ = join_query
    write_matches(store, keys, query_id, [0.72, 0.9], batch=1)
    # 60 near misses, 2 of them sampled, all of them binned
    write_observation(store, keys, query_id, 1, floor=0.05, counters={"near_misses": 60},
                      near_misses=[{"prob": 0.31}, {"prob": 0.555}],
                      near_miss_histogram={"0.05": 10, "0.31": 20, "0.55": 25, "0.69": 5})
    write_matches(store, keys, query_id, [0.7], batch=2)
    write_observation(store, keys, query_id, 2, floor=0.05, counters={"near_misses": 1},
                      near_misses=[{"prob": 0.4}], near_miss_histogram={"0.40": 1})
    answer = client.get(f"/api/queries/{query_id}/what-if", params={"batches": 2, "steps": 20},
                        headers=as_role("viewer")).json()
    assert answer["exact"] is True and answer["near_misses"] == 61 and answer["matches"] == 3
    # each near miss stands for its bin's lower edge: exact at thresholds on the grid
    candidates = [0.05] * 10 + [0.31] * 20 + [0.55] * 25 + [0.69] * 5 + [0.40] + [0.72, 0.9, 0.7]
    thresholds = [point["threshold"] for point in answer["points"]]
    assert thresholds[0] == 0.05 and thresholds[-1] == 1.0
    assert all(round(t * 100) == pytest.approx(t * 100) for t in thresholds)
    for point in answer["points"]:
        assert point["matches"] == sum(p >= point["threshold"] - 1e-12 for p in candidates)


def test_metrics(client, as_role, store, keys):
    store.xadd(keys.metrics, {"metrics": json.dumps({"batch": 7, "rows": 10, "input_rate": float("nan")})})
    answer = client.get("/api/metrics", params={"limit": 1}, headers=as_role("viewer")).json()
    assert answer["items"] == [{"batch": 7, "rows": 10, "input_rate": None}]
    assert answer["counts"] == {k.decode(): int(v) for k, v in store.hgetall(keys.counts).items()}
