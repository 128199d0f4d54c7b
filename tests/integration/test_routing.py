"""The router inside the source's read, in a real Redis registry and without Spark: what
each entry becomes, and the packed blocks a key group receives."""

from __future__ import annotations

import json
import math
import pickle
import uuid

import numpy as np
import pytest
import redis

from contract import Keys, Registry
from penumbra.events.columns import EventColumns
from penumbra.keygroups import key_hash
from spark_jobs.routing import CONTROL, Router, compiled, unpack_columns, unpack_events

STREAMS = {"ra": {"max_delay": 5, "pi": 10}, "rb": {"max_delay": 5, "pi": 10}}
JOIN = "SELECT * FROM ra A, rb B WHERE WINDOW(A, B) = 3 AND A.k = B.k WITH THRESHOLD 0.5"


def event(stream: str, n: int, k, hi: float) -> bytes:
    return json.dumps({"stream": stream, "id": f"{stream}{n}", "ts": {"lo": hi - 1, "hi": hi},
                       "attrs": {"k": k}}).encode()


@pytest.fixture
def registry(redis_server):
    """A registry of its own with the streams and the join ``j``; its keys go when the
    test ends, also when it fails. Its prefix is new each time: an executor's compiled
    registries are cached by prefix and version, and versions count from 1 again."""
    client = redis.Redis.from_url(redis_server.url)
    prefix = f"pn-routing-{uuid.uuid4().hex[:8]}"
    registry = Registry(client, Keys(prefix))
    registry.put_streams(STREAMS)
    registry.register(JOIN, query_id="j")
    try:
        yield registry
    finally:
        client.delete(*client.keys(f"{prefix}:*"))
        client.close()


def test_entries_become_packed_blocks_dead_letters_and_ticks(redis_server, registry):
    keys = registry.keys
    registry.register(JOIN, query_id="p")
    registry.update("p", paused=True)
    version = registry.version()
    groups = 4
    good = [event("ra", n, n % 3, 10.0 + n) for n in range(12)] + [event("rb", n, n % 3, 11.0 + n) for n in range(9)]
    entries = [(100 + i, f"{i}-0", "e", line) for i, line in enumerate(good)]
    entries += [(200, "200-0", "e", b"{oops"), (201, "201-0", "e", b"\xff\xfe"), (202, "202-0", "x", b"1"),
                (203, "203-0", "c", json.dumps({"end": ["j", "nobody"]}).encode())]
    router = Router(redis_server.url, keys.prefix, groups)
    # two reads of one partition: the router keeps the clocks and end marks of both
    rows = router.route(version, entries[:10]) + router.route(version, entries[10:])
    rows += router.close(version)
    by_kind: dict[str, list] = {}
    for row in rows:
        by_kind.setdefault(row[3], []).append(row)
    rejected = {row[2]: json.loads(row[4])["reason"] for row in by_kind["r"]}
    assert set(rejected) == {200, 201, 202} and all(row[:2] == CONTROL for row in by_kind["r"])
    assert "invalid JSON" in rejected[200] and "UTF-8" in rejected[201] and "unknown entry field" in rejected[202]
    assert [json.loads(row[4])["entry"] for row in by_kind["x"]] == ["203-0"]
    # each event reached exactly its key's group of the running query, in order, packed
    expected: dict[int, list[str]] = {}
    for line in good:
        expected.setdefault(key_hash((json.loads(line)["attrs"]["k"],)) % groups, []).append(json.loads(line)["id"])
    blocks = by_kind["b"]
    # "p" is "j" paused: the two are one plan, which runs for "j" alone
    unit = compiled(redis_server.url, keys.prefix, version, groups).unit_of["j"]
    assert unit.startswith("~") and {row[0] for row in blocks} == {unit}
    # a join plan's events come as columns, in ordinal order across the two reads
    got = {group: unpack_columns([row[4] for row in blocks if row[1] == group])[0].ids.tolist()
           for group in {row[1] for row in blocks}}
    assert got == expected
    assert all(row[2] == pickle.loads(row[4])[0][0] for row in blocks), "a block's seq is its first ordinal"
    # ticks: every group of the running query, with the largest max time and the end mark
    ticks = {row[1]: json.loads(row[4]) for row in by_kind["t"]}
    assert {row[0] for row in by_kind["t"]} == {unit} and sorted(ticks) == list(range(groups))
    assert all(t == {"clock": {"watermark": 21.0}, "end": ["j"], "first": 0} for t in ticks.values())
    # each event with the largest max time of the events before it in the partition, every
    # group's and both reads' (what makes it late, as for one operator fed them all)
    his = [json.loads(line)["ts"]["hi"] for line in good]
    before = {100 + i: max(his[:i], default=-math.inf) for i in range(len(good))}
    for row in blocks:
        seqs, _, prior, first = pickle.loads(row[4])
        assert first == 0 and np.frombuffer(prior).tolist() == [before[seq] for seq in seqs]


def test_blocks_of_several_read_partitions_unpack_in_ordinal_order():
    from penumbra.events import parse_event
    from spark_jobs.routing import pack_columns, pack_events

    def events(*ids):
        return EventColumns.from_events([parse_event({"stream": "ra", "id": i, "ts": {"lo": 0, "hi": 1}}) for i in ids])

    later, earlier = pack_events([5, 7], events("e5", "e7")), pack_events([1, 6], events("e1", "e6"))
    assert [e.id for e in unpack_events([later, earlier], None)] == ["e1", "e5", "e6", "e7"]
    assert [e.id for e in unpack_events([earlier], None)] == ["e1", "e6"]

    later, earlier = pack_columns([5, 7], events("e5", "e7")), pack_columns([1, 6], events("e1", "e6"))
    assert unpack_columns([later, earlier])[0].ids.tolist() == ["e1", "e5", "e6", "e7"]
    assert unpack_columns([earlier])[0].ids.tolist() == ["e1", "e6"]
    # a group's blocks from two read partitions (ordinals 1-4 and 5-8): an event's prior
    # clock takes its own partition's share and the whole of each partition before it
    first = pack_columns([1, 3], events("e1", "e3"), np.array([-math.inf, 2.0]), first=1)
    second = pack_columns([5, 7], events("e5", "e7"), np.array([-math.inf, 6.0]), first=5)
    ticks = [{"clock": {"watermark": 8.0}, "end": [], "first": 5}, {"clock": {"watermark": 4.0}, "end": [], "first": 1}]
    columns, prior = unpack_columns([second, first], ticks)
    assert columns.ids.tolist() == ["e1", "e3", "e5", "e7"] and prior.tolist() == [-math.inf, 2.0, 4.0, 6.0]


def test_every_row_of_a_group_carries_the_slot_that_places_it(redis_server, registry):
    from spark_jobs.placement import slot

    registry.register(JOIN, query_id="gone")
    registry.remove("gone")
    version = registry.version()
    lines = [event("ra", n, n % 7, 10.0 + n) for n in range(20)] + [b"{oops"]
    entries = [(i, f"{i}-0", "e", line) for i, line in enumerate(lines)]
    for partitions, placed in ((2, True), (0, False)):
        router = Router(redis_server.url, registry.keys.prefix, 4, partitions)
        rows = router.route(version, entries) + router.close(version)
        kinds = {row[3] for row in rows}
        assert {"b", "t", "d", "r"} <= kinds
        for row in rows:
            query_id, group, kind, row_slot = row[0], row[1], row[3], row[7]
            if kind == "r":
                assert (query_id, group, row_slot) == (*CONTROL, 0)
            else:
                assert row_slot == (slot(query_id, group, partitions) if placed else 0), row[:4]


def test_selective_joins_run_as_one_plan_that_gets_what_some_of_them_keep(redis_server, registry):
    """Ten joins keeping one value of A.z in 40 each: one plan, which gets once each A event
    one of them keeps and every B event, and the clock of every event of its streams. (The
    unfiltered ``j`` is paused: running, it would be in the plan, which would get everything.)"""
    keys = registry.keys
    registry.update("j", paused=True)
    for r in range(10):
        registry.register(JOIN.replace("WITH", f"AND A.z % 40 = {r} WITH"), query_id=f"s{r}")
    registry.register(JOIN.replace("= 3", "= 4"), query_id="other")     # another window: another plan
    version = registry.version()
    lines = [json.dumps({"stream": "ra", "id": f"a{n}", "ts": {"lo": n, "hi": n + 1.0}, "attrs": {"k": 1, "z": n}}).encode()
             for n in range(80)]
    lines += [event("rb", n, 1, 5.0 + n) for n in range(10)]
    router = Router(redis_server.url, keys.prefix, 1)
    rows = router.route(version, [(i, f"{i}-0", "e", line) for i, line in enumerate(lines)]) + router.close(version)
    units = compiled(redis_server.url, keys.prefix, version, 1).unit_of
    plan = units["s0"]
    assert {units[f"s{r}"] for r in range(10)} == {plan} and units["other"] != plan and "j" not in units
    got: dict[str, list[str]] = {}
    for row in rows:
        if row[3] == "b":
            got.setdefault(row[0], []).extend(unpack_columns([row[4]])[0].ids.tolist())
    assert got[plan] == [f"a{n}" for n in range(80) if n % 40 < 10] + [f"rb{n}" for n in range(10)]
    assert len(got[units["other"]]) == 90
    ticks = {row[0]: json.loads(row[4])["clock"] for row in rows if row[3] == "t"}
    assert ticks == {plan: {"watermark": 80.0}, units["other"]: {"watermark": 80.0}}


def test_a_plan_is_dropped_when_no_join_holds_it_any_more(redis_server, registry):
    keys = registry.keys
    registry.register(JOIN.replace("WITH", "AND A.z = 1 WITH"), query_id="one")
    plan = compiled(redis_server.url, keys.prefix, registry.version(), 1).unit_of["j"]

    def drops() -> set[str]:
        version = registry.version()
        return {row[0] for row in Router(redis_server.url, keys.prefix, 1).close(version) if row[3] == "d"}

    registry.remove("one")
    assert drops() == {"one"}, "the plan still runs for j"
    registry.update("j", paused=True)
    assert drops() == {"one"}, "a paused join keeps its plan's state"
    registry.remove("j")
    assert drops() == {"one", "j", plan}
