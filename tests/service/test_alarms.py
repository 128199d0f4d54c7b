"""Alarms: one instance per query and key, its matches since it opened, with states;
silences by matcher; priorities; every action audited."""

from __future__ import annotations

import json
import time

from contract.alarms import instance_id

from .conftest import unique, write_batch
from .test_results import write_matches


def alarm_of(client, as_role, alarm_id):
    return client.get(f"/api/alarms/{alarm_id}", headers=as_role("viewer"))


def alarms(client, as_role, **params):
    answer = client.get("/api/alarms", params=params, headers=as_role("viewer"))
    assert answer.status_code == 200, answer.text
    return answer.json()


def act(client, as_role, alarm_id, action, **body):
    return client.post(f"/api/alarms/{alarm_id}/{action}", json=body or None, headers=as_role("analyst"))


def last_audit(store, keys):
    fields = store.xrevrange(keys.audit, count=1)[0][1]
    return {k.decode(): v.decode() for k, v in fields.items()}


def test_alarm_lifecycle_of_a_query_without_key(client, as_role, store, keys, join_query):
    query_id, _, _ = join_query
    assert alarm_of(client, as_role, query_id).status_code == 404
    assert act(client, as_role, query_id, "acknowledge").status_code == 404
    ids = write_matches(store, keys, query_id, [0.7, 0.9, 0.8])
    alarm = alarm_of(client, as_role, query_id).json()
    assert (alarm["id"], alarm["key"], alarm["state"], alarm["matches"], alarm["first"], alarm["last"]) == \
        (query_id, None, "new", 3, ids[0], ids[2])
    assert (alarm["last_prob"], alarm["high_prob"], alarm["priority"], alarm["episode"]) == (0.8, 0.9, "warning", 1)
    assert [a["id"] for a in alarms(client, as_role, query=query_id)["items"]] == [query_id]

    acked = act(client, as_role, query_id, "acknowledge").json()
    assert acked["state"] == "acknowledged" and acked["updated_by"] == "test-analyst"
    assert (last_audit(store, keys)["action"], last_audit(store, keys)["subject"]) == ("alarm.acknowledged", query_id)
    more = write_matches(store, keys, query_id, [0.95], batch=2)
    alarm = alarm_of(client, as_role, query_id).json()
    assert (alarm["state"], alarm["matches"], alarm["last"], alarm["high_prob"]) == ("acknowledged", 4, more[0], 0.95)

    resolved = act(client, as_role, query_id, "resolve", comment="false alarm: a truck").json()
    assert (resolved["state"], resolved["comment"]) == ("resolved", "false alarm: a truck")
    assert act(client, as_role, query_id, "acknowledge").status_code == 409
    # the next match opens it again, counting from it
    again = write_matches(store, keys, query_id, [0.75], batch=3)
    alarm = alarm_of(client, as_role, query_id).json()
    assert (alarm["state"], alarm["matches"], alarm["first"], alarm["episode"], alarm["high_prob"]) == \
        ("new", 1, again[0], 2, 0.75)


def test_a_keyed_query_has_one_instance_per_key_acted_on_alone(client, as_role, store, keys, join_query):
    query_id, _, _ = join_query
    found = [{"events": {"A": f"a{n}", "B": f"b{n}"}, "prob": 0.6 + n / 100, "key": {"region": n % 3}}
             for n in range(9)]
    write_batch(store, keys, 1, {query_id: found})
    listed = alarms(client, as_role, query=query_id)["items"]
    by_key = {a["key"]["region"]: a for a in listed}
    assert set(by_key) == {0, 1, 2} and all(a["matches"] == 3 for a in listed)
    assert by_key[2]["id"] == instance_id(query_id, {"region": 2}) and by_key[2]["high_prob"] == 0.6 + 8 / 100
    assert alarm_of(client, as_role, query_id).status_code == 404     # no instance without key
    north = by_key[1]["id"]
    assert act(client, as_role, north, "acknowledge").json()["state"] == "acknowledged"
    states = {a["key"]["region"]: a["state"] for a in alarms(client, as_role, query=query_id)["items"]}
    assert states == {0: "new", 1: "acknowledged", 2: "new"}
    # new and acknowledged: the filters
    assert [a["id"] for a in alarms(client, as_role, query=query_id, state="acknowledged")["items"]] == [north]
    assert [a["id"] for a in alarms(client, as_role, query=query_id, key=json.dumps({"region": 1}))["items"]] == [north]
    assert alarms(client, as_role, query=query_id, key="null")["items"] == []
    # the new first, then the latest match first
    write_batch(store, keys, 2, {query_id: [{"events": {"A": "x", "B": "y"}, "prob": 0.9, "key": {"region": 0}}]})
    assert [a["key"]["region"] for a in alarms(client, as_role, query=query_id)["items"]] == [0, 2, 1]
    assert client.get("/api/alarms", params={"key": "[1]"}, headers=as_role("viewer")).status_code == 422
    assert client.get("/api/alarms", params={"state": "open"}, headers=as_role("viewer")).status_code == 422
    assert client.get("/api/alarms", params={"query": "nope"}, headers=as_role("viewer")).status_code == 404


def test_alarms_sort_by_priority_then_state_and_page(client, as_role, store, keys):
    made = {}
    for priority in ("info", "critical", "warning"):
        stream_a, stream_b = unique("PA"), unique("PB")
        for stream in (stream_a, stream_b):
            client.put(f"/api/streams/{stream}", json={"pi": 20}, headers=as_role("admin"))
        answer = client.post("/api/queries", headers=as_role("analyst"), json={
            "text": f"SELECT * FROM {stream_a} A, {stream_b} B WHERE WINDOW(A, B) = 10 AND A.k = B.k "
                    f"WITH THRESHOLD 0.5", "priority": priority})
        assert answer.status_code == 201 and answer.json()["priority"] == priority
        made[priority] = answer.json()["id"]
        write_batch(store, keys, 1, {made[priority]: [
            {"events": {"A": f"a{n}", "B": "b"}, "prob": 0.7, "key": {"k": n}} for n in range(3)]})
    act(client, as_role, instance_id(made["critical"], {"k": 0}), "acknowledge")
    mine = set(made.values())
    listed = [a for a in alarms(client, as_role, limit=1000)["items"] if a["query"] in mine]
    assert [(a["priority"], a["state"]) for a in listed] == [
        ("critical", "new"), ("critical", "new"), ("critical", "acknowledged"),
        ("warning", "new"), ("warning", "new"), ("warning", "new"), ("info", "new"), ("info", "new"), ("info", "new")]
    assert [a["id"] for a in alarms(client, as_role, priority="critical")["items"] if a["query"] in mine] == \
        [a["id"] for a in listed[:3]]
    # pages of 2 give every instance once, in the same order
    paged, cursor = [], None
    while True:
        page = alarms(client, as_role, limit=2, **({"next": cursor} if cursor else {}))
        paged += page["items"]
        cursor = page["next"]
        if cursor is None:
            break
    assert [a["id"] for a in paged if a["query"] in mine] == [a["id"] for a in listed]
    # the priority changes live
    assert client.patch(f"/api/queries/{made['info']}", json={"priority": "critical"},
                        headers=as_role("analyst")).json()["priority"] == "critical"
    assert {a["priority"] for a in alarms(client, as_role, query=made["info"])["items"]} == {"critical"}
    assert client.patch(f"/api/queries/{made['info']}", json={"priority": "urgent"},
                        headers=as_role("analyst")).status_code == 422


def test_silence_until_a_time_also_before_the_first_match(client, as_role, store, keys, join_query):
    query_id, _, _ = join_query
    assert act(client, as_role, query_id, "silence", until=time.time() - 1).status_code == 422
    assert act(client, as_role, query_id, "silence", until="tomorrow").status_code == 422
    silenced = act(client, as_role, query_id, "silence", until=time.time() + 0.8, comment="maintenance").json()
    assert silenced["state"] == "silenced" and silenced["silenced_until"] > time.time()
    assert silenced["matches"] == 0 and silenced["comment"] == "maintenance"
    assert last_audit(store, keys)["action"] == "alarm.silenced"
    write_matches(store, keys, query_id, [0.7])
    assert alarm_of(client, as_role, query_id).json()["state"] == "silenced"
    time.sleep(0.9)
    # matches came while silenced: new once the silence ends
    assert alarm_of(client, as_role, query_id).json()["state"] == "new"


def test_silences_by_matcher_cover_instances_of_their_key_even_before_they_exist(client, as_role, store, keys,
                                                                                 join_query):
    query_id, _, _ = join_query
    now = time.time()
    made = client.post("/api/silences", headers=as_role("analyst"), json={
        "query": query_id, "key": {"region": 17}, "end": now + 60, "comment": "sector 17 maintenance"})
    assert made.status_code == 201, made.text
    window = made.json()
    assert (window["author"], window["active"], window["key"]) == ("test-analyst", True, {"region": 17})
    assert last_audit(store, keys)["action"] == "silence.create"
    write_batch(store, keys, 1, {query_id: [{"events": {"A": "a", "B": "b"}, "prob": 0.9, "key": {"region": 17}},
                                            {"events": {"A": "c", "B": "d"}, "prob": 0.9, "key": {"region": 18}}]})
    states = {a["key"]["region"]: (a["state"], a["silence"]) for a in alarms(client, as_role, query=query_id)["items"]}
    assert states == {17: ("silenced", window["id"]), 18: ("new", None)}
    listed = client.get("/api/silences", headers=as_role("viewer")).json()["items"]
    assert window["id"] in [s["id"] for s in listed]
    assert client.delete(f"/api/silences/{window['id']}", headers=as_role("viewer")).status_code == 403
    assert client.delete(f"/api/silences/{window['id']}", headers=as_role("analyst")).status_code == 204
    assert client.delete(f"/api/silences/{window['id']}", headers=as_role("analyst")).status_code == 404
    assert {a["state"] for a in alarms(client, as_role, query=query_id)["items"]} == {"new"}
    # refused: an unknown query, an end in the past
    assert client.post("/api/silences", headers=as_role("analyst"),
                       json={"query": "nope", "end": now + 60}).status_code == 404
    refused = client.post("/api/silences", headers=as_role("analyst"), json={"query": query_id, "end": now - 1})
    assert refused.status_code == 422 and refused.json()["error"]["field"] == "end"


def test_trimmed_stream_still_counts(client, as_role, store, keys, join_query):
    query_id, _, _ = join_query
    write_matches(store, keys, query_id, [0.7] * 5)
    store.xtrim(keys.matches(query_id), maxlen=2)
    assert alarm_of(client, as_role, query_id).json()["matches"] == 5


def test_deleting_the_query_drops_its_alarms(client, as_role, store, keys, join_query):
    query_id, _, _ = join_query
    write_matches(store, keys, query_id, [0.7])
    act(client, as_role, query_id, "acknowledge")
    assert store.exists(keys.instances(query_id)) and store.exists(keys.alarm_states(query_id))
    client.delete(f"/api/queries/{query_id}", headers=as_role("analyst"))
    assert not store.exists(keys.instances(query_id)) and not store.exists(keys.alarm_states(query_id))
    assert alarm_of(client, as_role, query_id).status_code == 404
