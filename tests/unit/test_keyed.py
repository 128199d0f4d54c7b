"""A query hosted as key groups equals one operator fed every event.

A plain simulation of what the Spark job does (tests/integration runs the real one):
each micro-batch is cut into source partitions whose clocks merge, split by key group
with Routing, and every group runs keyed.step on its share, idle groups left asleep
until due. For input whose disorder stays within the streams' max delay, the union of
the groups' matches must be the single operator's, with the same probabilities, each
exactly once; for the join also the brute-force all-pairs join of tests/unit/joins.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from penumbra.engine import build_operator
from penumbra.events import Event, parse_event, parse_streams
from penumbra.keyed import combine, state_part, step
from penumbra.keygroups import KeyGroup, Routing, key_hash
from penumbra.operator import BlockResult, is_due, merge_clocks
from penumbra.query import parse
from penumbra.timestamps import Interval
from tests.unit.joins.test_join_operator import brute_force, workload


def batches_of(events, rng):
    """Random micro-batches, then an empty one that ends the input."""
    cuts = np.cumsum(rng.integers(1, 60, len(events)))
    cuts = cuts[cuts < len(events)].tolist()
    return [events[a:b] for a, b in zip([0] + cuts, cuts + [len(events)])] + [[]]


def priors(clocker, pieces):
    """For each event of a batch cut into ``pieces`` (source partitions), the clock of the
    events before it: its piece's share merged with the clocks of the pieces before it,
    as the job's router and stateful step compute it."""
    out, earlier = [], -np.inf
    for piece in pieces:
        if piece:
            out.append(np.maximum(earlier, clocker.clocks_before(piece)))
            earlier = max(earlier, clocker.clock_of(piece).get("watermark", -np.inf))
    return np.concatenate(out) if out else np.empty(0)


def cluster(text, streams, batches, groups, rng, partitions=3, prior=True):
    """What each batch emits when ``text`` runs as ``groups`` key groups, and how many
    group steps slept. A join's groups are given each event's prior clock (``prior``)."""
    query = parse(text)
    routing = Routing(build_operator(query, streams).partition_keys(), groups)
    clocker = build_operator(query, streams)
    prior = prior and query.kind == "join"
    states, emitted, slept = {}, [], 0
    for number, batch in enumerate(batches):
        cuts = np.sort(rng.integers(0, len(batch) + 1, partitions - 1)).tolist()
        pieces = [batch[a:b] for a, b in zip([0] + cuts, cuts + [len(batch)])]
        clock = merge_clocks(*(clocker.clock_of(piece) for piece in pieces))
        before = priors(clocker, pieces) if prior else None
        shares = {g: [] for g in range(routing.count)}
        for position, event in enumerate(batch):
            for g in routing.groups(event.stream, event.attrs):
                shares[g].append(position)
        out = BlockResult()
        for g in range(routing.count):
            mine = np.asarray(shares[g], dtype=np.int64)
            result, states[g] = step(query, streams, KeyGroup(g, routing.count), states.get(g),
                                     [batch[i] for i in mine.tolist()], clock, end=number == len(batches) - 1,
                                     prior=before[mine] if prior else None)
            if result is None:
                slept += 1
            else:
                out.extend(result)
        emitted.append(out)
    return emitted, slept


def local(text, streams, batches):
    """What each batch emits from one operator fed every event."""
    operator = build_operator(parse(text), streams)
    emitted = [operator.feed(batch) for batch in batches]
    emitted[-1].extend(operator.flush())
    return emitted


def by_match(emitted):
    """Each match (events, probability, range) with the batch that emitted it."""
    found = Counter()
    when = {}
    for number, result in enumerate(emitted):
        for m in result.matches:
            key = (tuple(sorted(m.events.items())), round(m.prob, 12), m.range)
            found[key] += 1
            when.setdefault(key, number)
    return found, when


def quieten(events, name, values):
    """The events, but those of the keys ``values`` of attribute ``name`` stop half-way."""
    return [e for n, e in enumerate(events) if n < len(events) // 2 or e.attrs.get(name) not in values]


def late_of(emitted):
    """Each event reported late or not joinable, with its reason, and how often."""
    return Counter((item.event.stream, item.event.id, item.reason) for result in emitted for item in result.late)


def assert_same(text, streams, events, groups, seed, quiet=None, late=False):
    """Same matches, each once, none later than one operator emits it. ``quiet``: the
    attribute and values of keys that went quiet (:func:`quieten`): their group must
    sleep through later batches, and wake to emit what time alone makes final (some of
    its matches come out after its last event's batch and before the end of input).
    ``late``: the input has events beyond the max delay, and the groups report the same
    ones late, with the same reasons, as one operator fed the same batches."""
    rng = np.random.default_rng(seed)
    batches = batches_of(events, rng)
    hosted, slept = cluster(text, streams, batches, groups, rng)
    alone = local(text, streams, batches)
    if late:
        assert late_of(alone), "the workload should have late events"
        assert late_of(hosted) == late_of(alone)
    else:
        assert not any(r.late for r in hosted) and not any(r.late for r in alone)
    found, when = by_match(hosted)
    expected, expected_when = by_match(alone)
    assert expected, "the workload should produce matches"
    assert found == expected
    assert max(found.values()) == 1
    late = {key: (when[key], expected_when[key]) for key in found if when[key] > expected_when[key]}
    assert not late, f"emitted later than by one operator (batch, batch): {late}"
    if quiet is not None:
        assert slept > 0, "the quiet keys' group should have slept through a batch"
        name, values = quiet
        quiet_ids = {e.id for e in events if e.attrs.get(name) in values}
        went_quiet = max(n for n, batch in enumerate(batches) if any(e.id in quiet_ids for e in batch))
        woken = [key for key, number in when.items()
                 if went_quiet < number < len(batches) - 1 and any(i in quiet_ids for _, i in key[0])]
        assert woken, "no match of the quiet keys needed a wake-up: the workload does not test it"
    return [m for result in hosted for m in result.matches]


# --- joins ---------------------------------------------------------------------------------

JOIN = "SELECT * FROM S A, T B WHERE WINDOW(A, B) = {d} AND A.region = B.region WITH THRESHOLD {p}"


@pytest.mark.parametrize("kind", ["intervals", "templates", "mixed"])
@pytest.mark.parametrize("seed", [1, 2])
def test_keyed_join_equals_one_operator_and_brute_force(kind, seed):
    streams, events = workload(seed, kind, n=400, late_share=0.0)
    events = quieten(events, "region", {"s"})
    for d, p in ((10.0, 0.3), (25.0, 0.7)):
        text = JOIN.format(d=d, p=p)
        hosted = assert_same(text, streams, events, groups=2, seed=seed)
        expected, ambiguous, late = brute_force(streams, events, d, lambda position: p, keyed=True)
        assert not late
        assert {(m.events["A"], m.events["B"]) for m in hosted} - ambiguous == set(expected) - ambiguous
        for m in hosted:
            pair = (m.events["A"], m.events["B"])
            if pair in expected:
                assert m.prob == pytest.approx(expected[pair], abs=1e-9)


def rekeyed(events, seed, keys=12):
    """The events, each in one of ``keys`` regions at random: a key's own events are
    sparse, and most of what makes one late comes from other keys."""
    rng = np.random.default_rng(seed)
    return [dataclasses.replace(e, attrs={**e.attrs, "region": f"r{int(rng.integers(keys))}"}) for e in events]


@pytest.mark.parametrize("kind", ["intervals", "templates", "mixed"])
@pytest.mark.parametrize("seed", [3, 4])
def test_keyed_join_judges_late_events_as_one_operator(kind, seed):
    """Events beyond the max delay: an event is late by the events before it in every
    key group, so the groups given each event's prior clock report the same late events
    (with the same watermark in the reason) and find the same matches as one operator."""
    streams, events = workload(seed, kind, n=600, late_share=0.15)
    for d, p in ((10.0, 0.3), (25.0, 0.7)):
        assert_same(JOIN.format(d=d, p=p), streams, rekeyed(events, seed, keys=4), groups=3, seed=seed, late=True)


def test_without_prior_clocks_a_join_group_misses_what_other_groups_saw():
    """The check above can fail: groups judging lateness by their own events alone let
    through events one operator reports late."""
    streams, events = workload(3, "intervals", n=600, late_share=0.15)
    events = rekeyed(events, 3)
    text = JOIN.format(d=10.0, p=0.3)
    rng = np.random.default_rng(3)
    batches = batches_of(events, rng)
    hosted, _ = cluster(text, streams, batches, 3, rng, prior=False)
    assert sum(late_of(hosted).values()) < sum(late_of(local(text, streams, batches)).values())


def test_self_join_keyed_on_different_attributes_finds_each_pair_once():
    """An event plays side A keyed by x and side B keyed by y: it reaches two groups,
    and each pair is still found once."""
    rng = np.random.default_rng(5)
    streams = parse_streams({"S": {"pi": 6.0, "max_delay": 10.0}})
    raw = []
    for i in range(300):
        t = i * 1.5 + rng.uniform(-1, 1)
        raw.append((t + rng.uniform(0, 10), {"stream": "S", "id": f"s{i}", "ts": {"lo": round(t - 4, 2), "hi": round(t, 2)},
                                             "attrs": {"x": int(rng.integers(0, 5)), "y": int(rng.integers(0, 5))}}))
    events = [parse_event(obj, streams) for _, obj in sorted(raw, key=lambda item: item[0])]
    text = "SELECT * FROM S A, S B WHERE WINDOW(A, B) = 6 AND A.x = B.y WITH THRESHOLD 0.2"
    assert_same(text, streams, events, groups=3, seed=5)


# --- patterns --------------------------------------------------------------------------------

def pattern_events(seed, n=500, widths=(1, 8), delay=60, keys=2, declared=False, late_share=0.0):
    """Streams A, B, C in turn with integer intervals of random widths, arriving within
    ``delay`` of their lower bound (a share ``late_share`` of them three times as late);
    a ``node`` key."""
    rng = np.random.default_rng(seed)
    raw = []
    for i in range(n):
        lo = int(i * 2 + rng.integers(0, 3))
        width = int(rng.integers(*widths))
        stream = "ABC"[int(rng.integers(0, 3))]
        arrival = lo + (3 * delay if late_share and rng.random() < late_share else rng.uniform(0, delay))
        raw.append((arrival, Event(stream, f"{stream}{i}", Interval(lo, lo + width),
                                                      {"node": int(rng.integers(0, keys)), "v": int(rng.integers(0, 10))})))
    params = {s: {"max_delay": delay, **({"pi": widths[1]} if declared else {})} for s in "ABC"}
    return parse_streams(params), [e for _, e in sorted(raw, key=lambda item: item[0])]


PATTERN = ("PATTERN SEQ(A a, B b, C c) WHERE a.node = b.node AND b.node = c.node AND b.v > 2 "
           "AND {strategy}(a, b, c) WITHIN 30 USING {method}")


@pytest.mark.parametrize("method", ["sorted", "any_state", "selectivity", "point"])
@pytest.mark.parametrize("strategy", ["skip_till_any_match", "skip_till_next_match"])
def test_keyed_pattern_equals_one_operator(method, strategy):
    streams, events = pattern_events(19, n=300 if method == "point" else 500)
    events = quieten(events, "node", {1})
    # any_state and selectivity emit skip-till-any matches as they find them: nothing waits for time
    waits = strategy == "skip_till_next_match" or method in ("sorted", "point")
    assert_same(PATTERN.format(strategy=strategy, method=method), streams, events, groups=3, seed=19,
                quiet=("node", {1}) if waits else None)


@pytest.mark.parametrize("strategy", ["skip_till_any_match", "skip_till_next_match"])
def test_keyed_pattern_judges_late_events_as_one_operator(strategy):
    """A pattern's safe time moves at the end of a batch, by the batch's merged clock: the
    groups report the same late events as one operator fed the same batches."""
    streams, events = pattern_events(31, keys=5, late_share=0.1)
    assert_same(PATTERN.format(strategy=strategy, method="sorted"), streams, events, groups=3, seed=31, late=True)


def test_keyed_pattern_with_declared_lengths():
    streams, events = pattern_events(12, declared=True)
    assert_same(PATTERN.format(strategy="skip_till_next_match", method="sorted"), streams, events, groups=4, seed=12)


# --- lossy CEP -------------------------------------------------------------------------------

def store_events(seed, visits=400, tags=30, delay=6, sweeps=True, imprecise=0.0, late_share=0.0):
    """Shop visits of tagged items, arriving up to ``delay`` after their (first) instant
    (a share ``late_share`` of the reads 200 later); a share ``imprecise`` of the reads
    known only to 2-4 instants."""
    rng = np.random.default_rng(seed)
    raw = []

    def stamp(t):
        if imprecise and rng.random() < imprecise:
            return Interval(t, t + int(rng.integers(1, 4)))
        return Interval(t, t)

    for n in range(visits):
        tag = int(rng.integers(tags))
        t = int(rng.integers(0, 4000))
        route = ["shelf"] + (["counter"] if rng.random() < 0.6 else []) + ["exit"]
        for reader in route:
            if rng.random() > 0.1:
                arrival = t + (200 if late_share and rng.random() < late_share else rng.uniform(0, delay))
                raw.append((arrival, Event(reader, f"{reader}-{n}", stamp(t), {"tag": tag})))
            t += int(rng.integers(1, 30))
        if sweeps and rng.random() < 0.3:      # a guard's sweep: a counter read of no tag
            raw.append((t + rng.uniform(0, delay), Event("sweep", f"sweep-{n}", stamp(t), {})))
    params = {"shelf": {"max_delay": delay}, "counter": {"miss_prob": 0.2, "max_delay": delay},
              "exit": {"miss_prob": 0.1, "max_delay": delay}, "sweep": {"max_delay": delay}}
    return parse_streams(params), [e for _, e in sorted(raw, key=lambda item: item[0])]


def test_keyed_lossy_with_fixed_densities_and_an_untied_negative():
    """Hashed on the tag; the sweep is a negative tied to no tag, so its events reach every group."""
    streams, events = store_events(21)
    text = ("SEQUENCE(Shelf x, !Counter y, !Sweep w, Exit z) WHERE x.tag = z.tag AND y.tag = x.tag "
            "GAP y = uniform(1, 30), w = uniform(1, 60), z = exponential(25) WITHIN 90 THRESHOLD 0.3")
    assert Routing(build_operator(parse(text), streams).partition_keys(), 4).count == 4
    assert_same(text, streams, events, groups=4, seed=21)


def test_keyed_lossy_over_imprecise_timestamps():
    """A third of the reads imprecise, the sweep (tied to no tag) too: each group keeps
    the imprecise negatives it is sent, and evaluates the same worlds as one operator."""
    streams, events = store_events(24, imprecise=0.35)
    text = ("SEQUENCE(Shelf x, !Counter y, !Sweep w, Exit z) WHERE x.tag = z.tag AND y.tag = x.tag "
            "GAP y = uniform(1, 30), w = uniform(1, 60), z = exponential(25) WITHIN 90 THRESHOLD 0.3")
    matches = assert_same(text, streams, events, groups=4, seed=24)
    assert any(m.factors and m.factors[0].get("worlds") for m in matches)


def test_keyed_lossy_judges_late_events_as_one_operator():
    """The lossy operator's processed time moves at the end of a batch, by the batch's
    merged clock: the groups report the same late reads as one operator fed the same
    batches, and find the same matches."""
    streams, events = store_events(25, imprecise=0.2, late_share=0.05)
    text = ("SEQUENCE(Shelf x, !Counter y, Exit z) WHERE x.tag = z.tag AND y.tag = x.tag "
            "GAP y = uniform(1, 30), z = exponential(25) WITHIN 90 THRESHOLD 0.3")
    assert_same(text, streams, events, groups=4, seed=25, late=True)


def test_keyed_lossy_group_sleeps_and_wakes_to_release_waiting_matches():
    """Tags 10, 13, 28 and 29 (group 3 of 4) go quiet half-way: their matches waiting for the
    trailing negative's window are released when other tags' time passes."""
    streams, events = store_events(23, sweeps=False)
    text = ("SEQUENCE(Shelf x, Exit z, !Counter y) WHERE x.tag = z.tag AND y.tag = x.tag "
            "GAP z = uniform(1, 30), y = uniform(1, 40) WITHIN 300 THRESHOLD 0.3")
    assert {key_hash((tag,)) % 4 for tag in (10, 13, 28, 29)} == {3}
    events = quieten(events, "tag", {10, 13, 28, 29})
    assert_same(text, streams, events, groups=4, seed=23, quiet=("tag", {10, 13, 28, 29}))


def test_lossy_learning_densities_is_one_group():
    """What is learned comes from every key, so the query is not split."""
    streams, events = store_events(22)
    text = "SEQUENCE(Shelf x, !Counter y, Exit z) WHERE x.tag = z.tag AND y.tag = x.tag WITHIN 90 THRESHOLD 0.3"
    assert Routing(build_operator(parse(text), streams).partition_keys(), 4).count == 1
    assert_same(text, streams, events, groups=4, seed=22)


# --- the pieces ------------------------------------------------------------------------------

def test_key_hash_is_pinned_and_follows_the_operators_equality():
    # a checkpoint's key groups depend on it: it must not change between releases
    assert key_hash(("north",)) == 0x4E6F8674E3FF7569
    assert key_hash((1, "a")) == 0xA78009375E98AE62
    assert key_hash((1,)) == key_hash((1.0,)) == key_hash((True,))
    assert key_hash((0,)) == key_hash((-0.0,)) == key_hash((False,))
    assert key_hash(("1",)) != key_hash((1,))
    assert key_hash((1.5,)) != key_hash((1,))
    assert key_hash(("a", "b")) != key_hash(("ab",))
    assert key_hash((None,)) != key_hash(("",))


scalar_keys = st.lists(st.tuples(st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from([0.0, -0.0, 1.0, 2.5, 1e20, 10 ** 20, 2 ** 53 + 1,
                                                                 float(2 ** 53 + 1), "1", "", "a"]),
    st.integers(-2 ** 70, 2 ** 70), st.floats(allow_nan=False), st.text(max_size=3))), min_size=1, max_size=30)


@settings(max_examples=200, deadline=None)
@given(scalar_keys)
def test_a_key_hash_is_the_same_whatever_keys_came_before(keys):
    """Hashes are remembered by key, where 1, 1.0 and True are one key: each key's hash in a
    sequence is its hash computed first in a fresh process (the memory cleared)."""
    from penumbra import keygroups

    alone = []
    for key in keys:
        keygroups._HASHES.clear()
        alone.append(key_hash(key))
    keygroups._HASHES.clear()
    assert [key_hash(key) for key in keys] == alone
    assert [key_hash(list(key)) for key in reversed(keys)] == alone[::-1]


def test_routing_sends_unkeyed_roles_everywhere_and_unread_streams_nowhere():
    routing = Routing({"s": [("x",), ("y",)], "t": [()]}, 5)
    assert routing.groups("S", {"x": 1, "y": 1}) == [key_hash((1,)) % 5]
    assert sorted(routing.groups("s", {"x": 1, "y": 2})) == sorted({key_hash((1,)) % 5, key_hash((2,)) % 5})
    assert routing.groups("t", {}) == [0, 1, 2, 3, 4]
    assert routing.groups("u", {"x": 1}) == []
    assert Routing({"s": [()]}, 5).count == 1


@pytest.mark.parametrize("seed", range(6))
def test_routing_a_block_sends_each_event_where_its_key_hash_says(seed):
    """Routing.assign over a block: each group gets the positions of the events whose key
    (in any of the stream's roles) hashes to it, or of every event of a role not keyed;
    1, 1.0 and True alike, "1" and None apart, a missing attribute as None."""
    rng = np.random.default_rng(seed)
    values = [1, 1.0, True, False, 0, -0.0, "1", "a", "b", None, 2.5, 10 ** 20, "\ud800"]
    count = int(rng.integers(1, 7))
    roles = {"s": [("x",)], "t": [("x",), ("y",)], "u": [("x", "y")], "v": [("x",), ()]}
    routing = Routing(roles, count)
    for _ in range(3):      # a second and third block meet keys the cache knows
        for stream in ("S", "t", "u", "v", "w"):
            block = []
            for _ in range(int(rng.integers(0, 40))):
                attrs = {name: values[int(rng.integers(len(values)))] for name in ("x", "y") if rng.random() < 0.9}
                block.append(attrs)
            expected: dict[int, list[int]] = {}
            for position, attrs in enumerate(block):
                groups = set()
                for attributes in roles.get(stream.casefold(), []):
                    groups |= set(range(count)) if not attributes else \
                        {key_hash([attrs.get(name) for name in attributes]) % count}
                for group in groups:
                    expected.setdefault(group, []).append(position)
            got = routing.assign(stream, block)
            assert {group: positions.tolist() for group, positions in got.items()} == expected
            assert all(positions.dtype == np.int64 for positions in got.values())


def test_merge_and_due():
    assert merge_clocks({"a": 1.0}, {"a": 3.0, "b": -2.0}, {}) == {"a": 3.0, "b": -2.0}
    assert is_due({"a": 2.0}, {"a": 2.5}) and not is_due({"a": 2.0}, {"a": 2.0})
    assert not is_due({}, {"a": 1e9}) and not is_due({"a": 2.0}, {"b": 5.0})


def test_combine_adds_counts_concatenates_samples_and_keeps_the_largest_shared_figures():
    groups = [
        {"counters": {"events": 3, "matches": 1}, "buffers": {"A": 2, "B": 0}, "watermark": 10.0,
         "buffer_bounds": [1.0, None], "near_misses": [{"p": 1}], "threshold": 0.6, "method": "sorted"},
        {"counters": {"events": 4, "late": 2}, "buffers": {"A": 1, "B": 5}, "watermark": 12.0,
         "buffer_bounds": [3.0, 2.0], "near_misses": [{"p": 2}, {"p": 3}], "threshold": 0.6, "method": "sorted"},
        {"watermark": None, "buffers": {"A": 1}},
    ]
    assert combine(groups, samples=2) == {
        "counters": {"events": 7, "matches": 1, "late": 2}, "buffers": {"A": 4, "B": 5}, "watermark": 12.0,
        "buffer_bounds": [3.0, 2.0], "near_misses": [{"p": 1}, {"p": 2}], "threshold": 0.6, "method": "sorted"}
    assert state_part(groups[0]) == {"buffers": {"A": 2, "B": 0}, "watermark": 10.0, "buffer_bounds": [1.0, None],
                                     "threshold": 0.6, "method": "sorted"}


def test_a_threshold_below_the_join_floor_is_refused_and_reported():
    streams, events = workload(3, "intervals", n=60, late_share=0.0)
    query = parse(JOIN.format(d=10.0, p=0.5))
    result, state = step(query, streams, KeyGroup(0, 1), None, events, {}, threshold=0.01)
    assert "floor" in result.observations["threshold_refused"]
    operator = build_operator(query, streams).restore(state.snapshot)
    assert operator.threshold == 0.5


def test_a_join_group_fed_every_event_counts_what_is_not_its_own():
    """Each of 3 groups of a keyed join with a filter, fed every event (keys 1, 1.0 and
    True among them, some events without the key, a stream spelled in other cases): the
    counters follow from the events alone, the keys' groups split the matches of one
    operator, and a key's events all land in one group."""
    streams = parse_streams({"S": {"pi": 5.0, "max_delay": 10}, "T": {"pi": 5.0, "max_delay": 10}})
    rng = np.random.default_rng(11)
    keys = ["north", "south", 1, 1.0, True, 2, "2", None]
    events = []
    for n in range(400):
        stream = ["S", "s", "T", "t", "U"][int(rng.integers(0, 5))]
        lo = float(n // 2 + rng.uniform(0, 3))
        attrs = {"v": int(rng.integers(0, 10))}
        key = keys[int(rng.integers(0, len(keys)))]
        if key is not None:
            attrs["k"] = key
        events.append(Event(stream, f"e{n}", Interval(lo, lo + float(rng.uniform(0.5, 4))), attrs))
    text = "SELECT * FROM S A, T B WHERE WINDOW(A, B) = 4 AND A.k = B.k AND A.v > 2 WITH THRESHOLD 0.3"
    read = [e for e in events if e.stream.casefold() in ("s", "t")]
    kept = [e for e in read if e.stream.casefold() == "t" or e.attrs["v"] > 2]
    keyed = [e for e in kept if "k" in e.attrs]
    whole = build_operator(parse(text), streams)
    expected = {(tuple(sorted(m.events.items())), m.prob) for m in [*whole.feed(events).matches,
                                                                     *whole.flush().matches]}
    found, owner = set(), {}
    for g in range(3):
        operator = build_operator(parse(text), streams, KeyGroup(g, 3))
        for start in range(0, len(events), 90):
            found |= {(tuple(sorted(m.events.items())), m.prob) for m in operator.feed(events[start:start + 90]).matches}
        found |= {(tuple(sorted(m.events.items())), m.prob) for m in operator.flush().matches}
        counters = operator.counters
        assert counters["events"] == len(events) and counters["late"] == 0
        assert counters["ignored"] == len(events) - len(read)
        assert counters["filtered"] == len(read) - len(kept)
        assert counters["unkeyed"] == len(kept) - len(keyed)
        mine = [e for e in keyed if key_hash((e.attrs["k"],)) % 3 == g]
        assert counters["other_group"] == len(keyed) - len(mine)
        for e in mine:
            owner.setdefault(e.attrs["k"], set()).add(g)
    assert found == expected and expected
    assert all(len(groups) == 1 for groups in owner.values())
    assert owner.keys() == {"north", "south", 1, 2, "2"}  # 1, 1.0 and True are one key
