"""The confidence of a match: the fast path against the plain dynamic programme (Algorithm 2,
Eq. 3 and 4), on random shapes, on every small shape, and on the matches the engines find."""

from __future__ import annotations

import itertools
import math
import random

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from penumbra.events import Event
from penumbra.patterns.any_state import AnyStateEngine, SelectivityEngine
from penumbra.patterns.bounds import close_window, run_bounds
from penumbra.patterns.confidence import (
    MEMO_SIZE, chain_confidence, confidences, dynamic_programme, memo_counters, point_confidence)
from penumbra.patterns.model import CompiledPattern, GridEvent, to_grid
from penumbra.patterns.point import PointEngine
from penumbra.patterns.query_order import SortedEngine
from penumbra.query import parse
from penumbra.timestamps import Interval

ENGINES = {"point": PointEngine, "any_state": AnyStateEngine, "sorted": SortedEngine,
           "selectivity": SelectivityEngine}


def assert_same(fast, reference):
    assert fast[1:] == reference[1:]
    assert fast[0] == pytest.approx(reference[0], rel=1e-12, abs=1e-300)


def grid_event(name: str, lo: int, weights: list[int] | None, span: int = 0) -> GridEvent:
    """A uniform event over ``[lo, lo + span]``, or one with the pmf ``weights`` (zeros inside allowed)."""
    if weights is None:
        return GridEvent(name[0], name, {}, lo, lo + span)
    return GridEvent(name[0], name, {}, lo, lo + len(weights) - 1, np.array(weights, float) / sum(weights))


pmfs = st.lists(st.integers(0, 3), min_size=1, max_size=6).filter(lambda w: w[0] > 0 and w[-1] > 0)


@st.composite
def events(draw, name: str, near: int):
    lo = draw(st.integers(near - 3, near + 6))
    if draw(st.booleans()):
        return grid_event(name, lo, draw(pmfs))
    return grid_event(name, lo, None, draw(st.integers(0, 7)))


@st.composite
def shapes(draw):
    """Events of a signature with valid intervals (from the engines' passes, or any
    sub-intervals), a window, and for skip till next match excluders per gap (some
    shared between gaps, as an event that can match several components is)."""
    length = draw(st.integers(1, 4))
    chain, near = [], draw(st.integers(0, 4))
    for j in range(length):
        chain.append(draw(events(f"m{j}", near)))
        near = chain[-1].lo + draw(st.integers(-2, 8))
    window = draw(st.integers(1, 30) | st.integers(1, 10))
    if draw(st.booleans()):
        bounds = run_bounds(dict(enumerate(chain)), window)
        if bounds is None:
            return None
        vlb = [bounds[0][j] for j in range(length)]
        vub = close_window(vlb, [bounds[1][j] for j in range(length)], window)
        if vub is None:
            return None
    else:
        vlb, vub = [], []
        for e in chain:
            lo = draw(st.integers(e.lo, e.hi))
            vlb.append(lo)
            vub.append(draw(st.integers(lo, e.hi)))
    gaps = None
    if length > 1 and draw(st.booleans()):
        gaps = [[draw(events(f"x{g}.{k}", vlb[g] + 1)) for k in range(draw(st.integers(0, 3)))]
                for g in range(length - 1)]
        if length > 2 and gaps[0] and draw(st.booleans()):
            gaps[-1].append(gaps[0][0])
    return chain, tuple(vlb), tuple(vub), window, gaps


def every_point_match(chain, vlb, vub, window, gaps):
    """Eq. 2 by enumeration: every tuple of points in the valid intervals, in order and within
    the window, times the probability that each excluder avoids every gap it could fall in."""
    owners = {}
    for g, candidates in enumerate(gaps or ()):
        for e in candidates:
            owners.setdefault(e.key, (e, []))[1].append(g)
    total, first, last = 0.0, None, None
    for times in itertools.product(*(range(lo, hi + 1) for lo, hi in zip(vlb, vub))):
        if any(a >= b for a, b in zip(times, times[1:])) or times[-1] - times[0] >= window:
            continue
        p = math.prod(e.probs[t - e.lo] for e, t in zip(chain, times))
        for e, where in owners.values():
            p *= sum(q for s, q in zip(range(e.lo, e.hi + 1), e.probs)
                     if not any(times[g] < s < times[g + 1] for g in where))
        if p > 0:
            total += p
            first = times[0] if first is None else min(first, times[0])
            last = times[-1] if last is None else max(last, times[-1])
    return (total, first, last) if total > 0 else (0.0, None, None)


@settings(max_examples=1500, deadline=None)
@given(shapes())
def test_fast_path_equals_the_dynamic_programme(shape):
    if shape is None:
        return
    chain, vlb, vub, window, gaps = shape
    fast = chain_confidence(chain, vlb, vub, window, gaps)
    assert_same(fast, dynamic_programme(chain, vlb, vub, window, gaps))
    enumerated = every_point_match(chain, vlb, vub, window, gaps)
    assert fast[1:] == enumerated[1:]
    assert fast[0] == pytest.approx(enumerated[0], rel=1e-9)


@pytest.mark.parametrize("window", range(1, 10))
def test_every_small_pair_and_triple(window):
    """Every chain of uniform events within [0, 4] (two or three components) under every window."""
    intervals = [(lo, hi) for lo in range(5) for hi in range(lo, 5)]
    rng = random.Random(window)
    shapes = list(itertools.product(intervals, repeat=2)) + [tuple(rng.sample(intervals, 3)) for _ in range(300)]
    for spans in shapes:
        chain = [grid_event(f"m{j}", lo, None, hi - lo) for j, (lo, hi) in enumerate(spans)]
        bounds = run_bounds(dict(enumerate(chain)), window)
        if bounds is None:
            continue
        vlb = tuple(bounds[0][j] for j in range(len(chain)))
        vub = close_window(vlb, [bounds[1][j] for j in range(len(chain))], window)
        if vub is not None:
            assert_same(chain_confidence(chain, vlb, vub, window), dynamic_programme(chain, vlb, vub, window))


def test_any_valid_intervals():
    """Pieces of several events, pmfs with zeros at the edge of a valid interval, matches
    longer than the window whose first or last piece has several events or a pmf: on any
    valid intervals, not only those the engines' passes leave."""
    rng = random.Random(11)
    for _ in range(3000):
        chain, vlb, vub = [], [], []
        for j in range(rng.randint(2, 4)):
            lo = rng.randint(0, 4) + (chain[-1].lo + rng.randint(-1, 5) if chain else 0)
            weights = [rng.randint(0, 2) for _ in range(rng.randint(1, 4))] if rng.random() < 0.3 else None
            event = grid_event(f"m{j}", lo, [1] + weights + [1] if weights else None, rng.randint(0, 4))
            chain.append(event)
            vlb.append(rng.randint(event.lo, event.hi))
            vub.append(rng.randint(vlb[-1], event.hi))
        window = rng.randint(1, max(1, vub[-1] - vlb[0] + 3))
        fast = chain_confidence(chain, vlb, vub, window)
        enumerated = every_point_match(chain, vlb, vub, window, None)
        assert fast[1:] == enumerated[1:]
        assert fast[0] == pytest.approx(enumerated[0], rel=1e-9)


def test_disjoint_intervals_in_the_window_multiply():
    """Ordered disjoint uniform intervals within the window: the product of the masses on
    the valid intervals, whatever the point matches."""
    chain = [grid_event("a", 0, None, 4), grid_event("b", 10, None, 9), grid_event("c", 30, None, 0)]
    confidence, first, last = chain_confidence(chain, (2, 10, 30), (4, 14, 30), 100)
    assert confidence == pytest.approx(3 / 5 * 5 / 10 * 1)
    assert (first, last) == (2, 30)
    certain = [grid_event(name, t, None) for name, t in (("a", 3), ("b", 7), ("c", 9))]
    assert chain_confidence(certain, (3, 7, 9), (3, 7, 9), 10) == (1.0, 3, 9)


def test_shapes_are_remembered_wherever_they_lie():
    """A piece the window cuts, with an excluder between its points, is a shape: weighed once,
    then looked up, at any offset; a chain the window does not cut needs no memo at all."""
    def weigh(offset):
        chain = [grid_event("a", offset, None, 9), grid_event("b", offset + 5, None, 9)]
        excluder = grid_event("x", offset + 3, None, 8)
        return chain_confidence(chain, (offset, offset + 5), (offset + 9, offset + 14), 10, [[excluder]])

    before = memo_counters()
    first = weigh(1000)
    middle = memo_counters()
    second = weigh(5000)
    after = memo_counters()
    assert middle["confidence_memo_misses"] == before["confidence_memo_misses"] + 1
    assert after["confidence_memo_hits"] == middle["confidence_memo_hits"] + 1
    assert second[0] == first[0] and (second[1] - 4000, second[2] - 4000) == first[1:]
    chain = [grid_event("a", 0, None, 6), grid_event("b", 3, None, 6), grid_event("c", 5, None, 6)]
    chain_confidence(chain, (0, 3, 5), (6, 9, 11), 20)
    chain_confidence(chain, (0, 3, 5), (6, 9, 11), 20, [[grid_event("x", 2, None, 3)], [grid_event("y", 4, None, 6)]])
    assert memo_counters() == after
    assert after["confidence_memo_shapes"] <= MEMO_SIZE


def stream(rng: random.Random, count: int) -> list[Event]:
    """One stream ``E`` (an event can match several components), uniform and weighted intervals."""
    out, t = [], 0
    for k in range(count):
        t += rng.randint(0, 3)
        span = rng.randint(0, 4)
        pmf = None
        if span and rng.random() < 0.3:
            weights = [rng.randint(0, 3) for _ in range(span + 1)]
            weights[0] = weights[-1] = 1
            pmf = [w / sum(weights) for w in weights]
        out.append(Event("E", f"e{k}", Interval(t, t + span, pmf), {"v": rng.randint(0, 5)}))
    return out


def excluders(pattern: CompiledPattern, engine, found) -> list[list[GridEvent]]:
    """``S-bar`` of Algorithm 1: the indexed events that could match component ``g + 1``
    right after the match's first ``g + 1`` events."""
    keys = {e.key for e in found.events}
    return [[e for e in engine.index[g + 1]
             if e.key not in keys and pattern.admits(dict(enumerate(found.events[: g + 1])), g + 1, e)]
            for g in range(len(found.events) - 1)]


@pytest.mark.parametrize("method", sorted(ENGINES))
@pytest.mark.parametrize("strategy", ["skip_till_any_match", "skip_till_next_match"])
def test_the_matches_engines_find(method, strategy):
    """Every match of a dense stream, where events match several components, excluders fall
    between points and pmfs have zeros: the fast path equals the dynamic programme, and the
    block form equals the match-by-match one."""
    query = parse(f"PATTERN SEQ(E a, E b, E c) WHERE a.v <= 2 AND c.v >= 2 AND {strategy}(a, b, c) WITHIN 9")
    pattern = CompiledPattern(query)
    engine = ENGINES[method](pattern)
    source = stream(random.Random(7), 120)
    engine.add(sorted(((to_grid(source[i], 1.0), j) for i, j in pattern.items_of(source)),
                      key=lambda item: (item[0].lo, item[1])))
    found = engine.advance(math.inf)
    gaps = [excluders(pattern, engine, f) if pattern.next_match else None for f in found]
    assert len(found) > 50
    for match, excluded in zip(found, gaps):
        reference = dynamic_programme(match.events, match.vlb, match.vub, pattern.window, excluded)
        assert_same(chain_confidence(match.events, match.vlb, match.vub, pattern.window, excluded), reference)
    found, gaps = found[:40], gaps[:40]
    values, first, last = confidences(found, pattern.window, gaps)
    for k, (match, excluded) in enumerate(zip(found, gaps)):
        if match.points is not None:
            expected = point_confidence(match.events, match.points, excluded)
        else:
            expected = chain_confidence(match.events, match.vlb, match.vub, pattern.window, excluded)
        assert values[k] == expected[0]
        assert (int(first[k]), int(last[k])) == (expected[1:] if expected[0] > 0 else (0, 0))
