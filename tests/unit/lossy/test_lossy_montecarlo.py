"""Monte Carlo of AYAC's generative model (section 3): each complex-event instance (its
own RFID tag) places its components with gaps drawn from f_i after the previous
positive component, and each reader drops an event with probability epsilon. The
probabilities the operator reports must agree with the simulated frequencies of what
they claim, for each case the model covers:

* negatives (S^N, S^{N..N}, leading and trailing negatives): the probability that no
  negative happened in its interval, given that none was observed (a posterior);
* missed positives (S^P, S^PP): the probability that the skipped positives happened
  between the observed ones and were all dropped, with the observed ones T apart.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pytest

from penumbra.events import Event, parse_streams
from penumbra.lossy import build_operator
from penumbra.query import parse
from penumbra.timestamps import Interval

W = 60
F_SHORT = "uniform(1, 30)"
F_HIST = "histogram(10, 5, 3, 2, 1)"


def pmf_of(spec):
    """The query's GAP density, built here independently of the operator."""
    pmf = np.zeros(W + 1)
    if spec == F_SHORT:
        pmf[1:31] = 1 / 30
    else:
        for bin_, weight in enumerate((5, 3, 2, 1)):
            pmf[1 + 10 * bin_:11 + 10 * bin_] = weight / 110
    return pmf


def draw(rng, spec, size):
    return rng.choice(np.arange(W + 1), size=size, p=pmf_of(spec))


def make_event(stream, ident, t, tag):
    return Event(stream, ident, Interval(float(t), float(t)), {"tag": tag})


def run(query, miss, events, instances):
    op = build_operator(parse(query), parse_streams({s: {"miss_prob": e} for s, e in miss.items()}))
    events.sort(key=lambda e: e.ts.lo)
    matches = []
    for start in range(0, len(events), 5000):
        matches += op.feed(events[start:start + 5000]).matches
    return matches + op.flush().matches


def assert_calibrated(reported):
    """``reported``: (probability, truth, bin) per match. The total of truth - p is within
    4 standard deviations, and so is each well-populated bin's."""
    assert len(reported) > 1000
    groups = defaultdict(list)
    for prob, truth, key in reported:
        groups[key].append((prob, truth))
    groups["all"] = [(p, t) for p, t, _ in reported]
    checked = 0
    for key, items in groups.items():
        probs = np.array([p for p, _ in items])
        truths = np.array([t for _, t in items], dtype=float)
        spread = math.sqrt(max((probs * (1 - probs)).sum(), 1e-12))
        if len(items) >= 300:
            checked += 1
            assert abs(truths.sum() - probs.sum()) <= 4 * spread + 1e-9, (key, truths.mean(), probs.mean())
    assert checked >= 3


def tag_of(ident):
    return int(ident.split("-")[1])


def test_negative_between_positives():
    """S^N: SEQUENCE(A x, !B y, C z); y placed after x with f_y, dropped with eps = 0.35."""
    rng = np.random.default_rng(11)
    n = 20_000
    starts = rng.integers(0, 50 * n, n)
    g_z, g_y = draw(rng, F_SHORT, n), draw(rng, F_HIST, n)
    kept = rng.random(n) >= 0.35
    events = []
    for k in range(n):
        events += [make_event("A", f"a-{k}", starts[k], k), make_event("C", f"c-{k}", starts[k] + g_z[k], k)]
        if kept[k]:
            events.append(make_event("B", f"b-{k}", starts[k] + g_y[k], k))
    query = (f"SEQUENCE(A x, !B y, C z) WHERE x.tag = z.tag AND y.tag = x.tag "
             f"GAP y = {F_HIST}, z = {F_SHORT} WITHIN {W} THRESHOLD 0.01")
    matches = run(query, {"B": 0.35}, events, n)
    truth = g_y >= g_z                           # y did not happen strictly between x and z
    assert_calibrated([(m.prob, truth[tag_of(m.events["x"])], g_z[tag_of(m.events["x"])] // 3)
                       for m in matches])


def test_several_negatives_between_positives():
    """S^{N..N}: two negatives from different readers, each placed and dropped independently."""
    rng = np.random.default_rng(12)
    n = 20_000
    starts = rng.integers(0, 50 * n, n)
    g_z, g_y, g_w = draw(rng, F_SHORT, n), draw(rng, F_HIST, n), draw(rng, F_SHORT, n)
    kept_y, kept_w = rng.random(n) >= 0.3, rng.random(n) >= 0.5
    events = []
    for k in range(n):
        events += [make_event("A", f"a-{k}", starts[k], k), make_event("C", f"c-{k}", starts[k] + g_z[k], k)]
        if kept_y[k]:
            events.append(make_event("B", f"b-{k}", starts[k] + g_y[k], k))
        if kept_w[k]:
            events.append(make_event("D", f"d-{k}", starts[k] + g_w[k], k))
    query = (f"SEQUENCE(A x, !B y, !D w, C z) WHERE x.tag = y.tag AND x.tag = w.tag AND x.tag = z.tag "
             f"GAP y = {F_HIST}, w = {F_SHORT}, z = {F_SHORT} WITHIN {W} THRESHOLD 0.01")
    matches = run(query, {"B": 0.3, "D": 0.5}, events, n)
    truth = (g_y >= g_z) & (g_w >= g_z)
    assert_calibrated([(m.prob, truth[tag_of(m.events["x"])], g_z[tag_of(m.events["x"])] // 3)
                       for m in matches])


@pytest.mark.parametrize("where", ["leading", "trailing"])
def test_negative_at_an_end(where):
    """A leading negative is placed after V_0 = t_last - W, a trailing one after the last
    positive; the interval runs to the first positive, or to t_first + W."""
    rng = np.random.default_rng(13 if where == "leading" else 14)
    n = 20_000
    starts = rng.integers(0, 50 * n, n)
    g_z, g_y = draw(rng, F_SHORT, n), draw(rng, F_HIST, n)
    kept = rng.random(n) >= 0.4
    events = []
    for k in range(n):
        events += [make_event("A", f"a-{k}", starts[k], k), make_event("C", f"c-{k}", starts[k] + g_z[k], k)]
        anchor = starts[k] + g_z[k] - W if where == "leading" else starts[k] + g_z[k]
        if kept[k]:
            events.append(make_event("B", f"b-{k}", anchor + g_y[k], k))
    parts = "!B y, A x, C z" if where == "leading" else "A x, C z, !B y"
    query = (f"SEQUENCE({parts}) WHERE x.tag = z.tag AND y.tag = x.tag "
             f"GAP y = {F_HIST}, z = {F_SHORT} WITHIN {W} THRESHOLD 0.01")
    matches = run(query, {"B": 0.4}, events, n)
    # the interval is (t_last - W, t_first) or (t_last, t_first + W): W - g_z long either way
    truth = g_y >= W - g_z
    assert_calibrated([(m.prob, truth[tag_of(m.events["x"])], g_z[tag_of(m.events["x"])] // 3)
                       for m in matches])


@pytest.mark.slow
@pytest.mark.parametrize("missed", [1, 2])
def test_missed_positives(missed):
    """S^P and S^PP: x and z observed T apart (T independent of the skipped components),
    the skipped positives placed after x with their gaps and dropped with eps."""
    rng = np.random.default_rng(20 + missed)
    n = 20_000
    eps = {"B": 0.4, "D": 0.6}
    starts = rng.integers(0, 50 * n, n)
    span = rng.integers(2, W, n)
    g_y, g_w = draw(rng, F_HIST, n), draw(rng, F_SHORT, n)
    dropped_y, dropped_w = rng.random(n) < eps["B"], rng.random(n) < eps["D"]
    events = []
    for k in range(n):
        events += [make_event("A", f"a-{k}", starts[k], k), make_event("C", f"c-{k}", starts[k] + span[k], k)]
        if not dropped_y[k]:
            events.append(make_event("B", f"b-{k}", starts[k] + g_y[k], k))
        if missed == 2 and not dropped_w[k]:
            events.append(make_event("D", f"d-{k}", starts[k] + g_y[k] + g_w[k], k))
    if missed == 1:
        query = (f"SEQUENCE(A x, B y, C z) WHERE x.tag = z.tag AND y.tag = x.tag DEFAULT y.tag = x.tag "
                 f"GAP y = {F_HIST} WITHIN {W} THRESHOLD 0.001")
        truth = dropped_y & (g_y < span)
    else:
        query = (f"SEQUENCE(A x, B y, D w, C z) WHERE x.tag = y.tag AND y.tag = w.tag AND w.tag = z.tag "
                 f"DEFAULT y.tag = x.tag, w.tag = y.tag GAP y = {F_HIST}, w = {F_SHORT} "
                 f"WITHIN {W} THRESHOLD 0.001")
        truth = dropped_y & dropped_w & (g_y + g_w < span)
    matches = [m for m in run(query, eps, events, n) if set(m.events) == {"x", "z"}]
    assert len(matches) == len({m.events["x"] for m in matches})
    assert_calibrated([(m.prob, truth[tag_of(m.events["x"])], span[tag_of(m.events["x"])] // 4)
                       for m in matches])
