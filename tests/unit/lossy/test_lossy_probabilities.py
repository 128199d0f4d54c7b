"""With epsilon > 0 the operator reports every path (observed events, missed positives
skipped) whose probability reaches the threshold, with the probability of the model:
the product, over the runs between consecutive observed positives and the runs before
the first and after the last, of the run scores of section 3. Checked against an
enumeration of every assignment of events to components, scored term by term."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given, settings

from lossy_reference import enumerate_run
from penumbra.events import Event, parse_streams
from penumbra.lossy import build_operator
from penumbra.query import parse
from penumbra.timestamps import Interval

STREAMS = ("A", "B", "C")
THRESHOLD = 0.001


@dataclass
class Part:
    positive: bool
    pmf: np.ndarray
    miss_prob: float


def scenario(seed: int) -> dict:
    """A random query and stream, dense enough that most have matches."""
    rng = np.random.default_rng(seed)
    size = int(rng.integers(2, 5))
    negated = (rng.random(size) < 0.4).tolist()
    if all(negated):
        negated[int(rng.integers(size))] = False
    window = int(rng.integers(5, 13))
    weights = [rng.integers(0, 4, window - 1).tolist() for _ in range(size)]
    for w in weights:
        w[int(rng.integers(window - 1))] += 1
    streams = rng.choice(STREAMS, size).tolist()
    return dict(
        negated=negated, window=window, weights=weights, streams=streams,
        eps={s: float(rng.choice([0.3, 0.6, 0.0], p=[0.4, 0.4, 0.2])) for s in STREAMS},
        events=[(str(rng.choice(streams)), f"e{n}", int(rng.integers(0, 15)), int(rng.integers(0, 2)))
                for n in range(int(rng.integers(6, 21)))],
        blocks=int(rng.integers(1, 4)))


def query_text(s):
    names = [f"c{k}" for k in range(len(s["negated"]))]
    first = names[s["negated"].index(False)]
    parts = ", ".join(("!" if neg else "") + f"{stream} {name}"
                      for neg, stream, name in zip(s["negated"], s["streams"], names))
    where = " AND ".join(f"{first}.tag = {n}.tag" for n in names if n != first)
    interior = [n for n, neg in zip(names, s["negated"]) if not neg and n != first]
    defaults = f" DEFAULT {', '.join(f'{n}.tag = {first}.tag' for n in interior)}" if interior else ""
    gaps = ", ".join(f"{n} = histogram(1, {', '.join(map(str, w))})"
                     for n, w in zip(names, s["weights"]) if n != first)
    return (f"SEQUENCE({parts}) WHERE {where}{defaults} GAP {gaps} "
            f"WITHIN {s['window']} THRESHOLD {THRESHOLD}")


def reference(s):
    """Every assignment of events to the positive components, first and last observed,
    interior ones observed or missed, scored from the model."""
    negated, window, streams = s["negated"], s["window"], s["streams"]
    names = [f"c{k}" for k in range(len(negated))]
    parts = []
    for weights, stream, neg in zip(s["weights"], streams, negated):
        pmf = np.zeros(window + 1)
        pmf[1:window] = np.array(weights) / sum(weights)
        parts.append(Part(not neg, pmf, s["eps"][stream]))
    positives = [k for k, neg in enumerate(negated) if not neg]
    events = [dict(stream=e[0], id=e[1], t=e[2], tag=e[3]) for e in s["events"]]
    found = {}
    choices = [events] + [events + [None]] * (len(positives) - 2) + ([events] if len(positives) > 1 else [])
    for chosen in itertools.product(*choices):
        observed = [(k, e) for k, e in zip(positives, chosen) if e is not None]
        times = [e["t"] for _, e in observed]
        if any(a >= b for a, b in zip(times, times[1:])) or times[-1] - times[0] >= window:
            continue
        if any(e["stream"] != streams[k] for k, e in observed) or len({e["tag"] for _, e in observed}) > 1:
            continue
        tag, t_first, t_last = observed[0][1]["tag"], times[0], times[-1]
        # the observed positives bound the runs; V_0 opens at t_last - W, V_{l+1} closes at t_first + W
        bounds = [(-1, t_last - window)] + [(k, e["t"]) for k, e in observed] + \
                 [(len(negated), t_first + window)]
        score = 1.0
        violated = False
        for (a, t_a), (b, t_b) in zip(bounds, bounds[1:]):
            score *= enumerate_run(parts[a + 1:b], t_b - t_a)
            for n in range(a + 1, b):
                if negated[n]:
                    violated |= any(e["stream"] == streams[n] and e["tag"] == tag and t_a < e["t"] < t_b
                                    for e in events)
        if not violated and score >= THRESHOLD * (1 - 1e-9):
            found[tuple(sorted((names[k], e["id"]) for k, e in observed))] = score
    return found


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_probabilities_equal_the_model(seed):
    s = scenario(seed)
    op = build_operator(parse(query_text(s)), parse_streams({name: {"miss_prob": e} for name, e in s["eps"].items()}))
    events = sorted((Event(stream, ident, Interval(float(t), float(t)), {"tag": tag})
                     for stream, ident, t, tag in s["events"]), key=lambda e: e.ts.lo)
    size = max(1, -(-len(events) // s["blocks"]))
    matches = []
    for start in range(0, len(events), size):
        matches += op.feed(events[start:start + size]).matches
    matches += op.flush().matches
    got = {tuple(sorted(m.events.items())): m.prob for m in matches}
    assert len(got) == len(matches)
    expected = reference(s)
    near_threshold = {key for key, p in expected.items() if abs(p - THRESHOLD) < 1e-9}
    assert set(got) - near_threshold == set(expected) - near_threshold
    for key, prob in got.items():
        assert prob == pytest.approx(expected[key], rel=1e-9, abs=1e-12)
