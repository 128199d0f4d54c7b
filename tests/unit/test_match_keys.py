"""Each match says what it is about (``Match.key``): the values of the query's equality key,
by the attribute names of its first keyed variable, None without one. Alarms are kept per
query and key, so every operator and strategy must name it; checked here against the
matched events' own attributes, on random workloads, across blocks, snapshots and key
groups, and never in the match's JSON.
"""

from __future__ import annotations

import numpy as np
import pytest

from penumbra.engine import build_operator, compile_query
from penumbra.events import Event, parse_streams
from penumbra.joins import STRATEGIES
from penumbra.keygroups import KeyGroup
from penumbra.query import parse
from penumbra.timestamps import Interval

from tests.unit.test_keyed import pattern_events, store_events


def join_events(seed: int, n: int = 600, keys: int = 7) -> list[Event]:
    """A and B events with a key under different names on each side (``region``, ``zone``),
    of mixed kinds (ints, strings, a float equal to an int), close enough in time to match."""
    rng = np.random.default_rng(seed)
    values = [1, 2, "north", "south", 3.0, "r17", 42][:keys]
    out = []
    for i in range(n):
        side = "AB"[int(rng.integers(0, 2))]
        lo = i * 3.0 + float(rng.uniform(0, 5))
        value = values[int(rng.integers(0, len(values)))]
        attrs = {"region": value} if side == "A" else {"zone": value}
        out.append(Event(side, f"{side}{i}", Interval(lo, lo + float(rng.uniform(1, 15))), attrs))
    return out


def feed_in_blocks(operator, events, block: int, restore_every: int = 0):
    """Every match over the events fed in blocks (and, every ``restore_every`` blocks, the
    operator snapshotted and restored), then flushed."""
    found = []
    for n, start in enumerate(range(0, len(events), block)):
        found += list(operator.feed(events[start:start + block]).matches)
        if restore_every and n % restore_every == restore_every - 1:
            operator = type(operator).restore(operator.snapshot())
    return found + list(operator.flush().matches)


JOIN = "SELECT * FROM A A, B B WHERE WINDOW(A, B) = 12 AND A.region = B.zone WITH THRESHOLD 0.3 USING {strategy}"


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_keyed_joins_matches_carry_side_as_key(strategy):
    events = join_events(3)
    attrs = {e.id: e.attrs for e in events}
    streams = parse_streams({"A": {"pi": 15, "max_delay": 10}, "B": {"pi": 15, "max_delay": 10}})
    found = feed_in_blocks(compile_query(JOIN.format(strategy=strategy), streams), events, block=37, restore_every=3)
    assert len(found) > 50
    for match in found:
        region, zone = attrs[match.events["A"]]["region"], attrs[match.events["B"]]["zone"]
        assert region == zone and match.key == {"region": region}
        assert type(match.key["region"]) is type(region)   # the value as the A event holds it
        assert "key" not in match.to_json()


def test_key_groups_name_the_same_keys_as_one_operator():
    events = join_events(5)
    streams = parse_streams({"A": {"pi": 15, "max_delay": 10}, "B": {"pi": 15, "max_delay": 10}})
    text = JOIN.format(strategy="lazy")
    whole = {(m.events["A"], m.events["B"]): m.key for m in feed_in_blocks(compile_query(text, streams), events, 50)}
    split = {}
    for index in range(3):
        operator = build_operator(parse(text), streams, key_group=KeyGroup(index, 3))
        split.update({(m.events["A"], m.events["B"]): m.key for m in feed_in_blocks(operator, events, 50)})
    assert split == whole and len(whole) > 50


def test_a_join_without_an_equality_has_no_key():
    events = join_events(4, n=200)
    streams = parse_streams({"A": {"pi": 15, "max_delay": 10}, "B": {"pi": 15, "max_delay": 10}})
    found = feed_in_blocks(compile_query("SELECT * FROM A A, B B WHERE WINDOW(A, B) = 12 WITH THRESHOLD 0.3",
                                         streams), events, 40)
    assert found and all(m.key is None for m in found)
    # matches indexed one at a time say the same
    result = compile_query("SELECT * FROM A A, B B WHERE WINDOW(A, B) = 12 AND A.region = B.zone "
                           "WITH THRESHOLD 0.3", streams).feed(events)
    assert [result.matches[k].key for k in range(len(result.matches))] == [m.key for m in result.matches]


@pytest.mark.parametrize("method", ["sorted", "any_state", "point"])
def test_a_patterns_matches_carry_its_partition_attribute(method):
    streams, events = pattern_events(19, n=300, keys=4)
    attrs = {e.id: e.attrs for e in events}
    text = ("PATTERN SEQ(A a, B b, C c) WHERE a.node = b.node AND b.node = c.node AND b.v > 2 "
            f"AND skip_till_any_match(a, b, c) WITHIN 30 USING {method}")
    found = feed_in_blocks(compile_query(text, streams), events, block=40, restore_every=2)
    assert len(found) > 10
    for match in found:
        assert match.key == {"node": attrs[match.events["a"]]["node"]} == {"node": attrs[match.events["c"]]["node"]}
    unkeyed = ("PATTERN SEQ(A a, B b, C c) WHERE b.v > 2 AND skip_till_any_match(a, b, c) WITHIN 8 USING "
               f"{method}")
    assert all(m.key is None for m in feed_in_blocks(compile_query(unkeyed, streams), events[:120], block=40))


def test_a_lossy_querys_matches_carry_its_hash_attribute_also_when_a_component_is_missed():
    streams, events = store_events(21, sweeps=False)
    attrs = {e.id: e.attrs for e in events}
    text = ("SEQUENCE(Shelf x, Counter y, Exit z) WHERE x.tag = z.tag AND y.tag = x.tag DEFAULT y.tag = x.tag "
            "GAP y = uniform(1, 30), z = exponential(25) WITHIN 90 THRESHOLD 0.05")
    found = feed_in_blocks(compile_query(text, streams), events, block=60, restore_every=2)
    assert len(found) > 20 and any("y" not in m.events for m in found) and any("y" in m.events for m in found)
    for match in found:
        tags = {attrs[event]["tag"] for event in match.events.values()}
        assert len(tags) == 1 and match.key == {"tag": tags.pop()}
