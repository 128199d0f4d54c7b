"""Joins run as one plan (penumbra/plans.py): each member's share equals its own join
fed the same events (matches, probabilities, late events, near misses), and its matches
equal an all-pairs join written here with its conditions as Python predicates."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from penumbra.engine import compile_query
from penumbra.errors import ValidationError
from penumbra.keygroups import KeyGroup
from penumbra.plans import Member, Plan, members_plan, plan_key
from tests.unit.joins.test_join_operator import AMBIGUOUS, admitted_events, oracle_within, workload

#: one-source conditions as the query writes them and as a predicate on (A attrs, B attrs)
CONDITIONS = [
    ("", lambda a, b: True),
    ("AND A.v % 3 = 1", lambda a, b: a["v"] % 3 == 1),
    ("AND B.v > 4", lambda a, b: b["v"] > 4),
    ("AND A.v < 5 AND B.v >= 2", lambda a, b: a["v"] < 5 and b["v"] >= 2),
    ("AND A.region = 'n'", lambda a, b: a["region"] == "n"),     # strings: decided event by event
    ("AND (A.v = 0 OR A.v = 9)", lambda a, b: a["v"] in (0, 9)),
]
QUERY = "SELECT * FROM S A, {right} B WHERE WINDOW(A, B) = {d} {keys} {where} WITH THRESHOLD {t} USING {s}"


def members_of(seed: int, streams, d: float, keyed: bool, self_join: bool, strategy: str, count: int):
    rng = random.Random(seed)
    out = []
    for k in range(count):
        where, predicate = rng.choice(CONDITIONS)
        threshold = rng.choice([0.3, 0.5, 0.7])
        # a registered threshold: none, a move either way, or one below the floor (refused)
        moved = rng.choice([None, None, 0.4, 0.9, 0.01])
        text = QUERY.format(right="S" if self_join else "T", d=d, keys="AND A.region = B.region" if keyed else "",
                            where=where, t=threshold, s=strategy)
        out.append((Member(f"q{k}", compile_query(text, streams), moved), predicate,
                    threshold if moved is None or moved < 0.05 else moved))
    return out


def run_plan(plan: Plan, streams, events, block: int, everything: bool):
    """The plan over ``events`` in blocks, fed all of each block or only what some member
    is concerned with (then moved to the block's clock, as the job does)."""
    state, found, late, near = None, {m.id: {} for m in plan.members}, {m.id: [] for m in plan.members}, \
        {m.id: {} for m in plan.members}
    for start in range(0, len(events), block):
        chunk = events[start:start + block]
        fed = chunk if everything else [e for e, keep in zip(chunk, plan.concerned(chunk)) if keep]
        clock = plan.members[0].operator.clock_of(chunk)
        shares, state = plan.step(streams, KeyGroup(0, 1), state, fed, clock)
        for member_id, share in (shares or {}).items():
            for m in share.matches:
                pair = tuple(m.events.values())
                assert pair not in found[member_id], f"{pair} emitted twice"
                found[member_id][pair] = (m.prob, m.partition)
            late[member_id] += [(item.event.id, item.reason) for item in share.late]
            for name, count in share.observations.get("near_miss_histogram", {}).items():
                near[member_id][name] = near[member_id].get(name, 0) + count
    return found, late, near


def run_alone(member: Member, streams, events, block: int):
    op = type(member.operator)(member.operator.query, streams)
    if member.threshold is not None:
        try:
            op.set_threshold(member.threshold)
        except ValidationError:     # refused, as the plan refuses it
            pass
    found, late, near = {}, [], {}
    for start in range(0, len(events), block):
        result = op.feed(events[start:start + block])
        found.update({tuple(m.events.values()): (m.prob, m.partition) for m in result.matches})
        late += [(item.event.id, item.reason) for item in result.late]
        for name, count in result.observations.get("near_miss_histogram", {}).items():
            near[name] = near.get(name, 0) + count
    return found, late, near


def all_pairs(events, streams, d: float, keyed: bool, self_join: bool, predicate, threshold: float,
              known: dict | None = None):
    """The pairs of admitted events the predicate passes with P >= the threshold;
    ``known``: the probabilities of pairs worked out already, by id (filled in)."""
    known = {} if known is None else known
    admitted = admitted_events(streams, events)
    left = [e for e in admitted if e.stream == "S"]
    right = [e for e in admitted if e.stream == ("S" if self_join else "T")]
    expected, ambiguous = {}, set()
    for a, b in itertools.product(left, right):
        if a.id == b.id or (keyed and a.attrs["region"] != b.attrs["region"]) or not predicate(a.attrs, b.attrs):
            continue
        p = known.get((a.id, b.id))
        if p is None:
            p = known[(a.id, b.id)] = oracle_within(a.histogram, b.histogram, d)
        if abs(p - threshold) < AMBIGUOUS:
            ambiguous.add((a.id, b.id))
        elif p >= threshold:
            expected[(a.id, b.id)] = p
    return expected, ambiguous


CASES = [
    # kind, d, keyed, self-join, strategy, block
    ("templates", 14.0, True, False, "lazy", 40),
    ("templates", 5.0, False, False, "lazy_lookup", 17),
    ("intervals", 15.0, True, False, "ssort", 50),
    ("intervals", 4.0, False, True, "lazy", 33),
    ("mixed", 16.0, True, False, "eager", 25),
    ("mixed", 3.0, False, False, "simple", 60),
]


@pytest.mark.parametrize("kind,d,keyed,self_join,strategy,block", CASES)
def test_each_member_gets_what_its_own_join_finds(kind, d, keyed, self_join, strategy, block):
    """Fed every event (late ones too), a member's matches, late events and near-miss
    histogram are its own join's, and its matches the all-pairs join's."""
    streams, events = workload(len(kind) * 100 + int(d), kind, n=300, late_share=0.03)
    members = members_of(int(d) * 7 + block, streams, d, keyed, self_join, strategy, count=5)
    plans = members_plan([m for m, _, _ in members])
    assert len(plans) == 1, "conditions and thresholds apart, the members are one join"
    plan = next(iter(plans.values()))
    found, late, near = run_plan(plan, streams, events, block, everything=True)
    matched, known = 0, {}
    for member, predicate, threshold in members:
        alone_found, alone_late, alone_near = run_alone(member, streams, events, block)
        assert found[member.id].keys() == alone_found.keys(), member.operator.query
        for pair, (p, partition) in alone_found.items():
            assert found[member.id][pair][0] == pytest.approx(p, abs=1e-12)
            assert found[member.id][pair][1] == partition, "the probing range at the member's own threshold"
        assert sorted(late[member.id]) == sorted(alone_late)
        assert near[member.id] == alone_near
        if not self_join:   # (late events of a self-join: its own join is the reference)
            expected, ambiguous = all_pairs(events, streams, d, keyed, self_join, predicate, threshold, known)
            assert set(found[member.id]) - ambiguous == set(expected) - ambiguous
        matched += len(alone_found)
    assert matched > 50 and any(late.values())


@pytest.mark.parametrize("kind,d,keyed,self_join,strategy,block", CASES[:4])
def test_fed_only_what_members_keep_the_matches_are_the_same(kind, d, keyed, self_join, strategy, block):
    """As the job feeds it: only the events some member keeps, the block's clock after."""
    streams, events = workload(len(kind) * 31 + int(d), kind, n=300, late_share=0.0)
    members = members_of(int(d) * 3 + block, streams, d, keyed, self_join, strategy, count=4)
    plan = Plan([m for m, _, _ in members])
    found, late, _ = run_plan(plan, streams, events, block, everything=False)
    known = {}
    for member, predicate, threshold in members:
        expected, ambiguous = all_pairs(events, streams, d, keyed, self_join, predicate, threshold, known)
        assert set(found[member.id]) - ambiguous == set(expected) - ambiguous
        for pair, p in expected.items():
            if pair in found[member.id]:
                assert found[member.id][pair][0] == pytest.approx(p, abs=1e-9)
    assert not any(late.values())


def test_a_plan_buffers_each_event_once_for_all_its_members():
    """Forty slices of one join: the plan holds what one unfiltered join holds, not forty copies."""
    streams, events = workload(5, "intervals", n=400, late_share=0.0)
    text = QUERY.format(right="T", d=15.0, keys="AND A.region = B.region", where="AND A.v % 40 = {r}", t=0.5,
                        s="lazy")
    plan = Plan([Member(f"q{r}", compile_query(text.replace("{r}", str(r)), streams)) for r in range(40)])
    shares, state = plan.step(streams, KeyGroup(0, 1), None, events, plan.members[0].operator.clock_of(events))
    unfiltered = compile_query(text.replace(" AND A.v % 40 = {r}", ""), streams)
    alone = unfiltered.feed(events)
    assert sum(shares[m.id].observations["buffers"]["A"] for m in plan.members[:1]) == \
        alone.observations["buffers"]["A"]
    assert sorted(p for s in shares.values() for m in s.matches for p in [tuple(m.events.values())]) == \
        sorted(tuple(m.events.values()) for m in alone.matches)


def test_what_makes_joins_one_plan():
    streams, _ = workload(1, "intervals", n=4)
    base = "SELECT * FROM S A, T B WHERE WINDOW(A, B) = 5 AND A.region = B.region {} WITH THRESHOLD {}"
    key = plan_key(compile_query(base.format("", 0.5), streams))
    assert plan_key(compile_query(base.format("AND A.v > 3 AND B.v < 2", 0.9), streams)) == key
    for other in ["SELECT * FROM S A, T B WHERE WINDOW(A, B) = 6 AND A.region = B.region WITH THRESHOLD 0.5",
                  "SELECT * FROM S A, T B WHERE WINDOW(A, B) = 5 WITH THRESHOLD 0.5",
                  "SELECT * FROM S X, T B WHERE WINDOW(X, B) = 5 AND X.region = B.region WITH THRESHOLD 0.5",
                  "SELECT * FROM S A, T B WHERE WINDOW(A, B) = 5 AND A.region = B.region WITH THRESHOLD 0.5 "
                  "USING ssort",
                  base.format("", 0.01)]:     # a threshold below the default floor lowers the floor
        assert plan_key(compile_query(other, streams)) != key, other
    assert key.startswith("~") and len(key) == 17


def test_a_refused_threshold_is_said_for_its_member_alone():
    streams, events = workload(3, "intervals", n=60, late_share=0.0)
    text = "SELECT * FROM S A, T B WHERE WINDOW(A, B) = 9 WITH THRESHOLD 0.5"
    plan = Plan([Member("low", compile_query(text, streams), 0.001), Member("ok", compile_query(text, streams), 0.8)])
    assert plan.thresholds == {"low": 0.5, "ok": 0.8} and plan.threshold == 0.5
    shares, _ = plan.step(streams, KeyGroup(0, 1), None, events, plan.members[0].operator.clock_of(events))
    assert "floor" in shares["low"].observations["threshold_refused"]
    assert "threshold_refused" not in shares["ok"].observations
    assert all(m.prob >= 0.8 for m in shares["ok"].matches)
    assert np.isclose(shares["ok"].observations["threshold"], 0.8)
