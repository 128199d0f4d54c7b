"""The audit trail over REST: what the registry and the service recorded, newest first,
by subject, in pages, for analysts and admins only."""

from __future__ import annotations

from .conftest import fresh_join, unique, write_batch


def test_a_querys_changes_newest_first_with_who_and_what(client, as_role, store, keys):
    query_id = unique("audited-")
    text = fresh_join(client)
    assert client.post("/api/queries", json={"text": text, "id": query_id}, headers=as_role("analyst")).status_code == 201
    assert client.patch(f"/api/queries/{query_id}", json={"threshold": 0.75},
                        headers=as_role("analyst")).status_code == 200
    write_batch(store, keys, 1, {query_id: [{"events": {"A": "a1", "B": "b1"}, "prob": 0.9}]})
    assert client.post(f"/api/alarms/{query_id}/acknowledge", headers=as_role("admin")).status_code == 200
    # something about another subject in between, left out by the filter
    other = unique("other-")
    client.post("/api/queries", json={"text": fresh_join(client), "id": other},
                headers=as_role("analyst"))
    answer = client.get("/api/audit", params={"subject": query_id}, headers=as_role("analyst"))
    assert answer.status_code == 200, answer.text
    items = answer.json()["items"]
    assert [i["action"] for i in items] == ["alarm.acknowledged", "update", "register"]
    assert items[1]["details"] == {"threshold": 0.75}
    assert {i["subject"] for i in items} == {query_id} and answer.json()["next"] is None
    assert [i["who"] for i in items] == [items[0]["who"], items[1]["who"], items[1]["who"]]
    assert items[0]["who"] != items[1]["who"], "the admin acknowledged, the analyst registered"
    assert items[0]["at"] >= items[1]["at"] >= items[2]["at"] and all(i["version"] for i in items)
    everything = client.get("/api/audit", params={"limit": 500}, headers=as_role("admin")).json()["items"]
    assert everything[0]["subject"] == other and any(i["subject"] == query_id for i in everything)


def test_pages_go_back_in_time_without_overlap(client, as_role):
    query_id = unique("paged-")
    client.post("/api/queries", json={"text": fresh_join(client), "id": query_id},
                headers=as_role("analyst"))
    for threshold in (0.61, 0.62, 0.63, 0.64):
        client.patch(f"/api/queries/{query_id}", json={"threshold": threshold}, headers=as_role("analyst"))
    seen, before = [], None
    while True:
        params = {"subject": query_id, "limit": 2, **({"before": before} if before else {})}
        page = client.get("/api/audit", params=params, headers=as_role("analyst")).json()
        seen += page["items"]
        before = page["next"]
        if not before:
            break
    assert [i["details"] for i in seen] == [{"threshold": t} for t in (0.64, 0.63, 0.62, 0.61)] + [seen[-1]["details"]]
    assert [i["action"] for i in seen][-1] == "register" and len({i["id"] for i in seen}) == 5


def test_viewers_may_not_read_it_and_bad_parameters_are_named(client, as_role):
    assert client.get("/api/audit", headers=as_role("viewer")).status_code == 403
    assert client.get("/api/audit", params={"before": "0-0"}, headers=as_role("analyst")).json() == \
        {"items": [], "next": None}
    for params, field in (({"limit": 0}, "limit"), ({"before": "yesterday"}, "before"), ({"subject": ""}, "subject"),
                          ({"before": "99999999999999999999-0"}, "before")):
        answer = client.get("/api/audit", params=params, headers=as_role("analyst"))
        assert answer.status_code == 422 and field in answer.text, answer.text
