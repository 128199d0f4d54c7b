"""Alarms: a query's matches since its last resolution, with states; every action audited."""

from __future__ import annotations

import time

from .test_results import write_matches


def alarm_of(client, as_role, query_id):
    return client.get(f"/api/alarms/{query_id}", headers=as_role("viewer"))


def act(client, as_role, query_id, action, **body):
    return client.post(f"/api/alarms/{query_id}/{action}", json=body or None, headers=as_role("analyst"))


def last_audit(store, keys):
    fields = store.xrevrange(keys.audit, count=1)[0][1]
    return {k.decode(): v.decode() for k, v in fields.items()}


def test_alarm_lifecycle(client, as_role, store, keys, join_query):
    query_id, _, _ = join_query
    assert alarm_of(client, as_role, query_id).status_code == 404
    assert act(client, as_role, query_id, "acknowledge").status_code == 409
    ids = write_matches(store, keys, query_id, [0.7, 0.9])
    alarm = alarm_of(client, as_role, query_id).json()
    assert (alarm["state"], alarm["matches"], alarm["first"], alarm["last"], alarm["last_prob"]) == \
        ("new", 2, ids[0], ids[1], 0.9)
    assert query_id in [a["query"] for a in client.get("/api/alarms", headers=as_role("viewer")).json()["items"]]

    acked = act(client, as_role, query_id, "acknowledge").json()
    assert acked["state"] == "acknowledged" and acked["updated_by"] == "test-analyst"
    assert (last_audit(store, keys)["action"], last_audit(store, keys)["subject"]) == ("alarm.acknowledged", query_id)
    more = write_matches(store, keys, query_id, [0.8])
    alarm = alarm_of(client, as_role, query_id).json()
    assert alarm["state"] == "acknowledged" and alarm["matches"] == 3 and alarm["last"] == more[0]

    resolved = act(client, as_role, query_id, "resolve").json()
    assert resolved["state"] == "resolved" and resolved["matches"] == 0 and resolved["first"] is None
    # the next match opens a new alarm, counting from it
    again = write_matches(store, keys, query_id, [0.75])
    alarm = alarm_of(client, as_role, query_id).json()
    assert (alarm["state"], alarm["matches"], alarm["first"]) == ("new", 1, again[0])


def test_silence_until_a_time(client, as_role, store, keys, join_query):
    query_id, _, _ = join_query
    assert act(client, as_role, query_id, "silence", until=time.time() - 1).status_code == 422
    assert act(client, as_role, query_id, "silence", until="tomorrow").status_code == 422
    silenced = act(client, as_role, query_id, "silence", until=time.time() + 0.6).json()
    assert silenced["state"] == "silenced" and silenced["silenced_until"] > time.time()
    assert last_audit(store, keys)["action"] == "alarm.silenced"
    write_matches(store, keys, query_id, [0.7])
    assert alarm_of(client, as_role, query_id).json()["state"] == "silenced"
    time.sleep(0.7)
    # matches came while silenced: new again once the silence ends
    assert alarm_of(client, as_role, query_id).json()["state"] == "new"


def test_trimmed_stream_still_counts(client, as_role, store, keys, join_query):
    query_id, _, _ = join_query
    write_matches(store, keys, query_id, [0.7] * 5)
    store.xtrim(keys.matches(query_id), maxlen=2)
    assert alarm_of(client, as_role, query_id).json()["matches"] == 5


def test_deleting_the_query_drops_its_alarm(client, as_role, store, keys, join_query):
    query_id, _, _ = join_query
    write_matches(store, keys, query_id, [0.7])
    act(client, as_role, query_id, "acknowledge")
    assert store.exists(keys.alarms(query_id))
    client.delete(f"/api/queries/{query_id}", headers=as_role("analyst"))
    assert not store.exists(keys.alarms(query_id))
    assert alarm_of(client, as_role, query_id).status_code == 404
