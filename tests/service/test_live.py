"""The live feed (WebSocket /ws) on a real uvicorn server (``python -m backend`` in a
subprocess, stopped by its pid) with real websocket clients.

Results are written the way the job's sink writes them (XADD on the result streams, then
a PUBLISH on pn:live in the same MULTI/EXEC), and every check compares what a client got
with what the streams hold.
"""

from __future__ import annotations

import asyncio
import json
import time

import orjson
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from .conftest import fresh_join, unique, write_batch


@pytest.fixture(scope="session")
def live_url(api_server):
    return api_server.ws_url


def run(coroutine, timeout: float = 30.0):
    return asyncio.run(asyncio.wait_for(coroutine, timeout))


def match(n: int, size: int = 0) -> dict:
    return {"events": {"A": f"a{n}" + "x" * size, "B": f"b{n}"}, "prob": 0.6 + (n % 40) / 100}


def stream_ids(store, stream) -> list[str]:
    return [i.decode() for i, _ in store.xrange(stream)]


async def open_feed(url, token, **subscribe):
    """A client that authenticated with its first message and subscribed."""
    ws = await connect(url, proxy=None, compression=None, max_size=None)
    await ws.send(orjson.dumps({"token": token}).decode())
    welcome = json.loads(await ws.recv())
    assert welcome["type"] == "welcome"
    if subscribe:
        await ws.send(orjson.dumps({"type": "subscribe", **subscribe}).decode())
        reply = await next_of(ws, "subscribed")
        assert reply["type"] == "subscribed", reply
    return ws


async def next_of(ws, *types, timeout: float = 5.0) -> dict:
    while True:
        message = json.loads(await asyncio.wait_for(ws.recv(), timeout))
        if message["type"] in types or message["type"] == "error":
            return message


async def collect(ws, kind: str, count: int, timeout: float = 10.0) -> list[dict]:
    got = []
    while len(got) < count:
        message = json.loads(await asyncio.wait_for(ws.recv(), timeout))
        if message["type"] == kind:
            got.append(message)
    return got


async def by_type(ws, timeout: float = 10.0, **counts: int) -> dict[str, list[dict]]:
    """Messages of each type until there are ``counts`` of each, whatever their order."""
    got: dict[str, list[dict]] = {kind: [] for kind in counts}
    while any(len(got[k]) < n for k, n in counts.items()):
        message = json.loads(await asyncio.wait_for(ws.recv(), timeout))
        got.setdefault(message["type"], []).append(message)
    return got


async def closed_code(ws, timeout: float = 5.0) -> int:
    try:
        while True:
            await asyncio.wait_for(ws.recv(), timeout)
    except ConnectionClosed as closed:
        return closed.rcvd.code if closed.rcvd else None


# ---- authentication


@pytest.mark.parametrize("role", ["viewer", "analyst", "admin"])
def test_every_role_may_subscribe_by_header_or_first_message(live_url, tokens, role):
    async def scenario():
        async with connect(live_url, proxy=None, additional_headers={"Authorization": f"Bearer {tokens[role]}"}) as ws:
            welcome = json.loads(await ws.recv())
            assert (welcome["type"], welcome["role"]) == ("welcome", role)
        ws = await open_feed(live_url, tokens[role], queries="*", kinds=["metrics"])
        await ws.close()

    run(scenario())


@pytest.mark.parametrize("first", [{"token": "pn_nope"}, {"tok": "x"}, "not json", None])
def test_refused_without_a_valid_token(live_url, first):
    async def scenario():
        async with connect(live_url, proxy=None) as ws:
            if first is not None:
                await ws.send(first if isinstance(first, str) else json.dumps(first))
            return await closed_code(ws)  # None: nothing sent, closed after PENUMBRA_WS_AUTH_TIMEOUT

    assert run(scenario()) == 4401


def test_refused_with_a_bad_header(live_url):
    async def scenario():
        async with connect(live_url, proxy=None, additional_headers={"Authorization": "Bearer pn_unknown"}) as ws:
            return await closed_code(ws)

    assert run(scenario()) == 4401


def test_a_revoked_token_is_closed_at_its_next_subscribe(live_url, client, as_role, store, keys):
    made = client.post("/api/tokens", json={"role": "viewer", "label": "soon-revoked"}, headers=as_role("admin"))
    token, ident = made.json()["token"], made.json()["id"]

    async def scenario():
        ws = await open_feed(live_url, token, queries="*", kinds=["metrics"])
        assert client.delete(f"/api/tokens/{ident}", headers=as_role("admin")).status_code == 204
        await ws.send(json.dumps({"type": "subscribe", "kinds": ["matches"]}))
        return await closed_code(ws)

    assert run(scenario()) == 4401


def test_a_role_below_the_live_feed_is_closed_with_4403(settings, tokens, monkeypatch):
    """No role is below viewer today; the check is the one REST makes, so raise the bar."""
    from fastapi.testclient import TestClient
    from starlette.websockets import WebSocketDisconnect

    from backend import create_app
    from backend.routes import live
    from contract.tokens import Role

    monkeypatch.setattr(live, "LIVE_ROLE", Role.analyst)
    with TestClient(create_app(settings)) as test_client:
        with test_client.websocket_connect("/ws") as ws:
            ws.send_json({"token": tokens["viewer"]})
            with pytest.raises(WebSocketDisconnect) as closed:
                ws.receive_json()
            assert closed.value.code == 4403
        with test_client.websocket_connect("/ws") as ws:
            ws.send_json({"token": tokens["analyst"]})
            assert ws.receive_json()["role"] == "analyst"


# ---- what flows


def test_matches_alarms_and_observations_as_written(live_url, tokens, store, keys, join_query):
    query_id, _, _ = join_query

    async def scenario():
        ws = await open_feed(live_url, tokens["viewer"], queries=[query_id], kinds=["matches", "alarms", "buffers"])
        ids = write_batch(store, keys, 1, {query_id: [match(0), match(1)]},
                          {query_id: {"buffers": {"A": 3}, "watermark": 7.5, "groups": 1}})[query_id]
        got = await by_type(ws, matches=2, alarms=1, buffers=1)
        await ws.close()
        return ids, got["matches"], got["alarms"][0], got["buffers"][0]

    ids, got, alarm, buffers = run(scenario())
    stored = store.xrange(keys.matches(query_id))
    assert [m["id"] for m in got] == ids == [i.decode() for i, _ in stored]
    assert [m["data"]["events"] for m in got] == [json.loads(f[b"m"])["events"] for _, f in stored]
    assert [m["data"]["prob"] for m in got] == [0.6, 0.61] and got[0]["data"]["batch"] == 1
    # the alarm is the one GET /api/alarms/{id} computes
    assert (alarm["query"], alarm["id"], alarm["data"]["state"], alarm["data"]["matches"]) == \
        (query_id, ids[-1], "new", 2)
    assert alarm["data"]["first"] == ids[0] and alarm["data"]["last_prob"] == 0.61
    obs_id = store.xrevrange(keys.observations(query_id), count=1)[0][0].decode()
    assert buffers["id"] == obs_id and buffers["data"]["value"]["buffers"] == {"A": 3}
    assert buffers["data"]["value"]["watermark"] == 7.5


def test_alarm_actions_reach_alarm_feeds_at_once(api_server, live_url, tokens, store, keys, join_query):
    """Acknowledge, silence and resolve over REST: a client of the query's alarms gets each
    new state as it happens, with no new match (also when the job's observations of the
    query land meanwhile), as GET /api/alarms/{id} has it; a client of its matches gets none."""
    import httpx

    query_id, _, _ = join_query
    ids = write_batch(store, keys, 1, {query_id: [match(0)]})[query_id]
    headers = {"Authorization": f"Bearer {tokens['analyst']}"}
    actions = [("acknowledge", None, "acknowledged"), ("silence", {"until": time.time() + 600}, "silenced"),
               ("resolve", None, "resolved")]

    async def scenario():
        alarms = await open_feed(live_url, tokens["viewer"], queries=[query_id], kinds=["alarms"])
        matches = await open_feed(live_url, tokens["viewer"], queries=[query_id], kinds=["matches"])
        first = await next_of(alarms, "alarms")
        seen, answers = [], []
        async with httpx.AsyncClient(base_url=api_server.url, headers=headers, timeout=10) as rest:
            for n, (action, body, _) in enumerate(actions):
                answer = await rest.post(f"/api/alarms/{query_id}/{action}", json=body)
                assert answer.status_code == 200, answer.text
                answers.append(answer.json())
                write_batch(store, keys, 2 + n, {}, {query_id: {"buffers": {"A": n}}})
                seen.append(await next_of(alarms, "alarms"))
        stray = await drain(matches)
        await alarms.close()
        await matches.close()
        return first, seen, answers, stray

    first, seen, answers, stray = run(scenario())
    assert first["data"]["state"] == "new"
    assert [m["data"]["state"] for m in seen] == [state for _, _, state in actions]
    assert [m["data"] for m in seen] == answers
    assert all(m["id"] == ids[-1] for m in seen), "an action moves no match cursor"
    assert stray == []


def test_changing_the_subscription(live_url, tokens, store, keys, client, as_role):
    def register() -> str:
        answer = client.post("/api/queries", json={"text": fresh_join(client),
                                                   "id": unique("q-")}, headers=as_role("analyst"))
        assert answer.status_code == 201, answer.text
        return answer.json()["id"]

    first, second = register(), register()

    async def scenario():
        ws = await open_feed(live_url, tokens["viewer"], queries=[first], kinds=["matches"])
        write_batch(store, keys, 1, {first: [match(1)], second: [match(2)]})
        got = await collect(ws, "matches", 1)
        await ws.send(json.dumps({"type": "subscribe", "queries": [second], "kinds": ["matches"]}))
        await next_of(ws, "subscribed")
        ids = write_batch(store, keys, 2, {first: [match(3)], second: [match(4)]})
        got += await collect(ws, "matches", 1)
        # every query, also one registered after the subscription
        await ws.send(json.dumps({"type": "subscribe", "queries": "*", "kinds": ["matches"]}))
        await next_of(ws, "subscribed")
        third = register()
        await asyncio.sleep(1.5)  # the live feed sees the registry at its next read (ws_poll)
        later = write_batch(store, keys, 3, {third: [match(5)], first: [match(6)]})
        got += await collect(ws, "matches", 2)
        await ws.close()
        return ids, later, third, got

    ids, later, third, got = run(scenario())
    assert [(m["query"], m["data"]["events"]["A"]) for m in got[:2]] == [(first, "a1"), (second, "a4")]
    assert got[1]["id"] == ids[second][0]
    assert sorted((m["query"], m["id"]) for m in got[2:]) == sorted([(third, later[third][0]),
                                                                     (first, later[first][0])])


def test_resume_after_a_reconnect_has_no_gap_and_no_duplicate(live_url, tokens, store, keys, join_query):
    query_id, _, _ = join_query
    stream = keys.matches(query_id)

    async def scenario():
        ws = await open_feed(live_url, tokens["viewer"], queries=[query_id], kinds=["matches", "alarms"])
        for batch in range(3):
            write_batch(store, keys, batch, {query_id: [match(batch * 10 + n) for n in range(5)]})
        seen = await collect(ws, "matches", 15)
        cursors = {"matches:" + query_id: seen[-1]["id"]}
        await ws.close()
        # written while the client is away
        for batch in range(3, 6):
            write_batch(store, keys, batch, {query_id: [match(batch * 10 + n) for n in range(5)]})
        ws = await open_feed(live_url, tokens["viewer"], queries=[query_id], kinds=["matches", "alarms"],
                             since={**cursors, "alarms:" + query_id: seen[-1]["id"]})
        write_batch(store, keys, 6, {query_id: [match(60 + n) for n in range(5)]})
        got = await by_type(ws, matches=20, alarms=1)
        # nothing more than what was written; the alarm as it stands once the feed is quiet (the
        # catch-up's alarm, of 30 matches, may come before batch 6's matches and its alarm)
        extra = [json.loads(m) for m in await drain(ws)]
        await ws.close()
        alarm = [m for m in got["alarms"] + extra if m["type"] == "alarms"][-1]
        return seen, got["matches"], alarm, extra

    seen, resumed, alarm, extra = run(scenario())
    assert [m["id"] for m in seen + resumed] == stream_ids(store, stream)
    assert not [m for m in extra if m["type"] == "matches"]
    assert alarm["data"]["matches"] == 35


async def drain(ws, quiet: float = 0.5) -> list[str]:
    out = []
    try:
        while True:
            out.append(await asyncio.wait_for(ws.recv(), quiet))
    except TimeoutError:
        return out


def test_one_since_for_every_feed_and_latest_snapshots(live_url, tokens, store, keys, join_query):
    query_id, _, _ = join_query
    ids = write_batch(store, keys, 1, {query_id: [match(n) for n in range(4)]},
                      {query_id: {"partitions": {"lpr": 1}}})[query_id]
    # one since for every feed compares a match id with ids of the observations' stream, which
    # only milliseconds order: the next batch comes a millisecond later at least, as the job's do
    time.sleep(0.005)
    write_batch(store, keys, 2, {}, {query_id: {"partitions": {"lpr": 2}}})

    async def scenario():
        ws = await open_feed(live_url, tokens["viewer"], queries=[query_id], kinds=["matches", "partitions"],
                             since=ids[1])
        got = await by_type(ws, matches=2, partitions=1)
        got, partitions = got["matches"], got["partitions"][0]
        await ws.close()
        # no since: matches from now, partitions' latest at once
        ws = await open_feed(live_url, tokens["viewer"], queries=[query_id], kinds=["matches", "partitions"])
        latest = await next_of(ws, "partitions", "matches")
        rest = await drain(ws)
        await ws.close()
        return got, partitions, latest, rest

    got, partitions, latest, rest = run(scenario())
    assert [m["id"] for m in got] == ids[2:]
    # coalesced: only the newest observation after the cursor
    assert partitions["data"]["value"]["partitions"] == {"lpr": 2}
    assert latest["type"] == "partitions" and latest["data"]["value"]["partitions"] == {"lpr": 2}
    assert not [m for m in rest if '"matches"' in m and '"type":"matches"' in m]


def test_bad_messages_are_answered_and_the_feed_goes_on(live_url, tokens, store, keys, join_query):
    query_id, _, _ = join_query
    bad = [("{oops", None), ("[1, 2]", "type"), ('{"type": "dance"}', "type"),
           ('{"type": "subscribe", "kinds": ["gossip"]}', "kinds[0]"),
           ('{"type": "subscribe", "queries": 7}', "queries"),
           ('{"type": "subscribe", "since": "yesterday"}', "since"),
           ('{"type": "subscribe", "queries": ["%s"], "since": {"matches:%s": "12-x"}}' % (query_id, query_id),
            f"matches:{query_id}"),
           ('{"type": "subscribe", "queries": ["%s"], "kinds": ["matches"], "since": {"alarms:%s": "1-0"}}'
            % (query_id, query_id), f"alarms:{query_id}"),
           ('{"type": "subscribe", "extra": 1}', "extra")]

    async def scenario():
        ws = await open_feed(live_url, tokens["viewer"], queries=[query_id], kinds=["matches"])
        answers = []
        for text, _ in bad:
            await ws.send(text)
            answers.append(await next_of(ws, "error"))
        await ws.send(b"\x00binary")
        answers.append(await next_of(ws, "error"))
        await ws.send(json.dumps({"type": "subscribe", "queries": [query_id, "no-such-query"], "kinds": ["matches"]}))
        unknown = await next_of(ws, "error")
        await ws.send(json.dumps({"type": "ping"}))
        pong = await next_of(ws, "pong")
        ids = write_batch(store, keys, 1, {query_id: [match(0)]})[query_id]
        got = await collect(ws, "matches", 1)
        await ws.close()
        return answers, unknown, pong, ids, got

    answers, unknown, pong, ids, got = run(scenario())
    assert all(a["type"] == "error" and a["message"] for a in answers)
    for answer, (_, field) in zip(answers, bad):
        if field is not None:
            assert field in (answer.get("field") or ""), (answer, field)
    assert unknown["field"] == "queries" and "no-such-query" in unknown["message"]
    assert pong["type"] == "pong"
    assert [m["id"] for m in got] == ids


# ---- a slow client


def test_a_slow_client_does_not_delay_a_fast_one_and_is_closed_to_resume(live_url, tokens, store, keys, join_query):
    """The slow client subscribes and stops reading; 16 KB matches fill its socket and its
    queue of LIVE_QUEUE messages (conftest), so it is closed with 4008, while the fast one gets each match
    within a bounded delay. Then the slow one resumes from its last cursor. The 9.6 MB written
    are more than loopback's socket buffers take (up to 4 MB a side), so the queue overflows."""
    query_id, _, _ = join_query
    stream = keys.matches(query_id)
    batches, per_batch = 60, 10

    async def scenario():
        feed = dict(queries=[query_id], kinds=["matches"])
        fast = await open_feed(live_url, tokens["viewer"], **feed)
        slow = await open_feed(live_url, tokens["viewer"], **feed)
        # the slow one reads nothing: its 16-frame queue fills, then the sockets' buffers

        delays, received = [], []

        async def read_fast():
            while len(received) < batches * per_batch:
                message = json.loads(await asyncio.wait_for(fast.recv(), 10))
                if message["type"] == "matches":
                    received.append(message["id"])
                    delays.append(time.time() - int(message["id"].split("-")[0]) / 1000)

        reader = asyncio.create_task(read_fast())
        for batch in range(batches):
            write_batch(store, keys, batch, {query_id: [match(batch * per_batch + n, size=16_000)
                                                        for n in range(per_batch)]})
            await asyncio.sleep(0.02)
        await reader
        await fast.close()

        first_part = []
        code = None
        try:
            while True:
                message = json.loads(await asyncio.wait_for(slow.recv(), 10))
                if message["type"] == "matches":
                    first_part.append(message["id"])
        except ConnectionClosed as closed:
            code = closed.rcvd.code if closed.rcvd else None
        since = {"matches:" + query_id: first_part[-1]} if first_part else "0-0"
        again = await open_feed(live_url, tokens["viewer"], **feed, since=since)
        rest = [m["id"] for m in await collect(again, "matches", batches * per_batch - len(first_part))]
        await again.close()
        return delays, received, code, first_part, rest

    delays, received, code, first_part, rest = run(scenario(), timeout=60)
    written = stream_ids(store, stream)
    assert received == written
    delays.sort()
    assert delays[int(len(delays) * 0.99)] < 1.0, delays[-10:]
    assert code == 4008
    assert len(first_part) < len(written)
    assert first_part + rest == written


def test_a_burst_beyond_the_redis_pool_waits_for_connections(settings):
    """Many clients subscribing at once share the process's Redis connections: a call
    beyond them waits for one to be free, rather than telling its client that Redis is
    unavailable (what redis-py's default pool answers beyond 100 connections)."""
    from backend.deps import Service
    from backend.live import REDIS_CONNECTIONS, Hub

    async def burst():
        hub = Hub(Service.connect(settings))
        await hub.start()
        try:
            empty = unique("empty-list")
            # BLPOP on an empty list holds its connection for its timeout, without loading Redis
            calls = [hub.redis.blpop([empty], timeout=0.2) for _ in range(2 * REDIS_CONNECTIONS + 10)]
            return await asyncio.gather(*calls, return_exceptions=True)
        finally:
            await hub.stop()

    results = run(burst(), 60)
    assert [r for r in results if r is not None] == []


def test_alarm_feeds_send_each_instance_touched_and_resume_with_every_instance_touched_meanwhile(
        api_server, live_url, tokens, store, keys, join_query):
    """A keyed query: a batch about three keys gives the alarm feed one message per instance;
    after a reconnect from the alarm cursor, every instance that matches or an action touched
    meanwhile comes again, as REST has it, and no other."""
    import httpx

    from contract.alarms import instance_id

    query_id, _, _ = join_query
    keyed = lambda n, region: {**match(n), "key": {"region": region}}  # noqa: E731

    async def scenario():
        ws = await open_feed(live_url, tokens["viewer"], queries=[query_id], kinds=["alarms"])
        write_batch(store, keys, 1, {query_id: [keyed(n, n % 3) for n in range(6)]})
        first = await collect(ws, "alarms", 3)
        cursor = max((m["id"] for m in first), key=lambda i: tuple(map(int, i.split("-"))))
        await ws.close()
        # while away: matches about regions 3 and 0, an acknowledgement of region 1
        write_batch(store, keys, 2, {query_id: [keyed(10, 3), keyed(11, 0)]})
        async with httpx.AsyncClient(base_url=api_server.url) as rest:
            answer = await rest.post(f"/api/alarms/{instance_id(query_id, {'region': 1})}/acknowledge",
                                     headers={"Authorization": f"Bearer {tokens['analyst']}"})
            assert answer.status_code == 200, answer.text
        ws = await open_feed(live_url, tokens["viewer"], queries=[query_id], kinds=["alarms"],
                             since={"alarms:" + query_id: cursor})
        resumed = await collect(ws, "alarms", 3)
        extra = [json.loads(m) for m in await drain(ws)]
        await ws.close()
        return first, resumed, extra

    first, resumed, extra = run(scenario())
    assert sorted(m["data"]["key"]["region"] for m in first) == [0, 1, 2]
    assert all(m["data"]["matches"] == 2 for m in first)
    latest = {m["data"]["key"]["region"]: m["data"] for m in resumed + [e for e in extra if e["type"] == "alarms"]}
    assert set(latest) == {0, 1, 3}
    assert (latest[0]["matches"], latest[1]["state"], latest[3]["matches"]) == (3, "acknowledged", 1)
