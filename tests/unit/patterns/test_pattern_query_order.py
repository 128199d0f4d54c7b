"""Query-order evaluation on long streams, where a block holds many partial matches and
only a few can take each event: every match a brute force over triples finds, with the
confidence of the dynamic programme over the events' whole intervals, and the same matches
as the point-based framework for skip till next match."""

from __future__ import annotations

import itertools
import random

import pytest

from penumbra.events import Event, StreamParams, Streams
from penumbra.patterns import build_operator
from penumbra.patterns.confidence import dynamic_programme
from penumbra.patterns.model import to_grid
from penumbra.query import parse
from penumbra.timestamps import Interval

WINDOW = 20
#: one pattern with three streams, one where an event could be bound twice, one with a
#: condition between two components (with the brute force's reading of it)
PATTERNS = {
    "SEQ(A x, B y, C z)": (("A", "B", "C"), lambda x, y, z: True),
    "SEQ(A x, A y, B z) WHERE x.k = z.k": (("A", "A", "B"), lambda x, y, z: x.attrs["k"] == z.attrs["k"]),
}


def stream(seed: int, count: int, widest: int) -> list[Event]:
    """Events of A, B and C in arrival order, mostly short, a few up to ``widest`` long."""
    rng = random.Random(seed)
    events, start = [], 0
    for k in range(count):
        start += rng.randint(0, 4)
        width = rng.randint(0, widest) if rng.random() < 0.1 else rng.randint(0, 4)
        events.append(Event(rng.choice("ABC"), f"e{k}", Interval(start, start + width), {"k": rng.randint(0, 1)}))
    return events


def feed(text: str, events: list[Event], block: int, widest: int):
    streams = Streams([StreamParams(name, pi=widest) for name in "ABC"])
    operator = build_operator(parse(text), streams)
    matches = []
    for first in range(0, len(events), block):
        matches += operator.feed(events[first: first + block]).matches
    matches += operator.flush().matches
    return {tuple(m.events.values()): (m.prob, m.range) for m in matches}


def assert_same(actual, expected):
    assert set(actual) == set(expected)
    for signature, (confidence, span) in expected.items():
        assert actual[signature][0] == pytest.approx(confidence, rel=1e-12), signature
        assert actual[signature][1] == span, signature


def brute_force(types, condition, events):
    """Signature -> (confidence, range) of every triple of distinct events, in the pattern's
    types, that has points ``t_1 < t_2 < t_3`` with ``t_3 - t_1 < W``."""
    out = {}
    for chosen in itertools.permutations(events, 3):
        if [e.stream for e in chosen] != list(types) or not condition(*chosen):
            continue
        grid = [to_grid(e, 1.0) for e in chosen]
        confidence, first, last = dynamic_programme(grid, [e.lo for e in grid], [e.hi for e in grid], WINDOW)
        if confidence > 0:
            out[tuple(e.id for e in chosen)] = (confidence, (float(first), float(last)))
    return out


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("seed", range(3))
def test_long_blocks_find_every_match(pattern, seed):
    types, condition = PATTERNS[pattern]
    widest = 40
    events = stream(seed, 90, widest)
    expected = brute_force(types, condition, events)
    assert len(expected) > 20
    text = f"PATTERN {pattern} WITHIN {WINDOW} USING sorted"
    for block in (len(events), 7):
        assert_same(feed(text, events, block, widest), expected)


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("seed", range(3))
def test_skip_till_next_match_equals_the_point_based_framework(pattern, seed):
    widest = 12
    events = stream(seed, 70, widest)
    head, _, tail = pattern.partition(")")
    conditions = f"{tail.strip()} AND" if tail.strip() else "WHERE"
    text = f"PATTERN {head}) {conditions} skip_till_next_match(x, y, z) WITHIN {WINDOW}"
    expected = feed(f"{text} USING point", events, len(events), widest)
    assert len(expected) > 10
    for block in (len(events), 5):
        assert_same(feed(f"{text} USING sorted", events, block, widest), expected)
