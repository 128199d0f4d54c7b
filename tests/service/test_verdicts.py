"""Verdicts of matches and alarms, audited, and the calibration the API computes from them."""

from __future__ import annotations

import pytest

from contract.alarms import instance_id

from .conftest import write_batch


def verdict(client, as_role, query_id, **body):
    return client.post(f"/api/queries/{query_id}/verdicts", json=body, headers=as_role("analyst"))


def test_verdicts_of_matches_give_the_reliability_diagram_and_the_threshold_for_a_precision(client, as_role, store,
                                                                                          keys, join_query):
    query_id, _, _ = join_query
    probs = [0.95, 0.91, 0.85, 0.72, 0.66, 0.61, 0.58, 0.52]
    found = [{"events": {"A": f"a{n}", "B": f"b{n}"}, "prob": p, "key": {"region": n % 2}} for n, p in enumerate(probs)]
    ids = write_batch(store, keys, 1, {query_id: found})[query_id]
    judged = ["real", "real", "real", "false", "real", "false", "false", "unknown"]
    for cursor, said in zip(ids, judged):
        answer = verdict(client, as_role, query_id, match=cursor, verdict=said, comment="walked there")
        assert answer.status_code == 201, answer.text
        assert answer.json()["prob"] == probs[ids.index(cursor)] and answer.json()["by"] == "test-analyst"
    last = store.xrevrange(keys.audit, count=1)[0][1]
    assert (last[b"action"], last[b"subject"]) == (b"verdict.unknown", f"m:{ids[-1]}".encode())
    # judging again replaces
    assert verdict(client, as_role, query_id, match=ids[3], verdict="real").status_code == 201
    judged[3] = "real"
    answer = client.get(f"/api/queries/{query_id}/calibration", params={"bins": 5, "precision": 0.8},
                        headers=as_role("viewer"))
    assert answer.status_code == 200, answer.text
    result = answer.json()
    assert result["verdicts"] == {"real": 5, "false": 2, "unknown": 1}
    pairs = [(p, j == "real") for p, j in zip(probs, judged) if j != "unknown"]
    ece = 0.0
    for b in result["reliability"]["bins"]:
        inside = [(p, r) for p, r in pairs if b["lo"] <= p < b["hi"] or (b["hi"] == 1.0 and p == 1.0)]
        assert b["count"] == len(inside)
        if inside:
            mean, share = sum(p for p, _ in inside) / len(inside), sum(r for _, r in inside) / len(inside)
            ece += len(inside) / len(pairs) * abs(share - mean)
    assert result["reliability"]["ece"] == pytest.approx(ece)
    at = {point["threshold"]: point for point in result["precision"]}
    assert (at[0.6]["judged"], at[0.6]["real"]) == (6, 5)
    # the smallest judged probability from which at least 80 % were real: 0.61 (5 real of 6)
    assert result["threshold_for"] == 0.61


def test_an_alarm_is_judged_when_resolved_by_its_episodes_highest_probability(client, as_role, store, keys,
                                                                            join_query):
    query_id, _, _ = join_query
    write_batch(store, keys, 1, {query_id: [{"events": {"A": "a", "B": "b"}, "prob": p, "key": {"region": 3}}
                                            for p in (0.7, 0.93, 0.8)]})
    alarm = instance_id(query_id, {"region": 3})
    resolved = client.post(f"/api/alarms/{alarm}/resolve", json={"verdict": "false", "comment": "a lorry"},
                           headers=as_role("analyst"))
    assert resolved.status_code == 200 and resolved.json()["verdict"] == "false"
    (given,) = client.get(f"/api/queries/{query_id}/verdicts", headers=as_role("viewer")).json()["items"]
    assert (given["subject"], given["prob"], given["verdict"], given["episode"]) == (f"a:{alarm}:1", 0.93, "false", 1)
    assert client.get(f"/api/queries/{query_id}/calibration", headers=as_role("viewer")).json()["verdicts"] == \
        {"real": 0, "false": 1, "unknown": 0}


def test_bad_verdicts_are_refused_with_the_field(client, as_role, store, keys, join_query):
    query_id, _, _ = join_query
    (cursor,) = write_batch(store, keys, 1, {query_id: [{"events": {"A": "a", "B": "b"}, "prob": 0.9}]})[query_id]
    for body, status, field in (({"verdict": "real"}, 422, "match"),
                                ({"match": cursor, "alarm": query_id, "verdict": "real"}, 422, "match"),
                                ({"match": cursor, "verdict": "maybe"}, 422, "verdict"),
                                ({"match": "1-1", "verdict": "real"}, 404, "match"),
                                ({"alarm": "other:abc", "verdict": "real"}, 404, "alarm")):
        answer = verdict(client, as_role, query_id, **body)
        assert answer.status_code == status and answer.json()["error"]["field"] == field, (body, answer.text)
    assert client.post(f"/api/queries/{query_id}/verdicts", json={"match": cursor, "verdict": "real"},
                       headers=as_role("viewer")).status_code == 403


def test_many_verdicts_in_one_request_are_all_checked_first(client, as_role, store, keys, join_query):
    query_id, _, _ = join_query
    ids = write_batch(store, keys, 1, {query_id: [{"events": {"A": f"a{n}", "B": "b"}, "prob": 0.7} for n in range(3)]})
    ids = ids[query_id]
    refused = client.post(f"/api/queries/{query_id}/verdicts/batch", headers=as_role("analyst"),
                          json=[{"match": ids[0], "verdict": "real"}, {"verdict": "false"}])
    assert refused.status_code == 422 and refused.json()["error"]["field"] == "1.match"
    assert client.get(f"/api/queries/{query_id}/verdicts", headers=as_role("viewer")).json()["items"] == []
    answer = client.post(f"/api/queries/{query_id}/verdicts/batch", headers=as_role("analyst"),
                         json=[{"match": i, "verdict": v} for i, v in zip(ids, ("real", "false", "real"))])
    assert answer.status_code == 201 and [v["verdict"] for v in answer.json()["items"]] == ["real", "false", "real"]
    assert client.get(f"/api/queries/{query_id}/calibration", headers=as_role("viewer")).json()["verdicts"] == \
        {"real": 2, "false": 1, "unknown": 0}
