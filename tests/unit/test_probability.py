"""penumbra.probability against independent oracles (exact rational integration,
the paper's Lemma 1 and Example 4, bisection, Monte Carlo)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from penumbra.probability import (
    ge, p_deadline, p_delay, p_geq, p_geq_block, p_within, p_within_block, stime, stime_table)
from penumbra.errors import ValidationError
from penumbra.timestamps import Histogram, HistogramBlock
from tests.oracle import p_geq_exact, p_within_exact, sample, stime_bisection
from tests.strategies import histograms, random_histogram

EXACT = 1e-9

# PTJoin paper, Example 3: templates of sensors s1 and s2; a2 detected at 110, a3 at 210.
PHI1 = Histogram([0, 20, 30, 40], [0.1, 0.3, 0.6])
PHI2 = Histogram([0, 10, 20, 30, 40], [0.15, 0.3, 0.4, 0.15])
H2 = Histogram.from_template(PHI2, 110)
H3 = Histogram.from_template(PHI1, 210)


def oracle(h_i, h_j, d=0.0) -> float:
    return float(p_geq_exact(h_i.edges, h_i.probs, h_j.edges, h_j.probs, d))


# --- the paper's worked example ---------------------------------------------------------

def test_example_4_probabilities():
    assert p_geq(H3, H2, -90) == pytest.approx(0.925, abs=5e-4)
    assert p_geq(H3, H2, -100) == pytest.approx(0.769, abs=5e-4)
    assert p_geq(H3, H2, -90) == pytest.approx(oracle(H3, H2, -90), abs=EXACT)
    assert p_geq(H3, H2, -100) == pytest.approx(oracle(H3, H2, -100), abs=EXACT)


@pytest.mark.parametrize("y", [160.0, 162.5, 165.0, 168.59, 169.9])
def test_example_4_quadratic_of_the_bounding_configuration(y):
    # ge(H3, H2 + x) with y = 70 + x is -0.0007625 y^2 + 0.236 y - 17.315 for 90 <= x < 100.
    assert p_geq(H3, H2, -(y - 70)) == pytest.approx(-0.0007625 * y * y + 0.236 * y - 17.315, abs=1e-9)


def test_example_4_satisfaction_time():
    assert stime(H3, H2, 0.8) == pytest.approx(208.59, abs=5e-3)
    assert stime(H3, H2, 0.8) == pytest.approx(
        stime_bisection(H3.edges, H3.probs, H2.edges, H2.probs, 0.8), rel=1e-9)


# --- Lemma 1: one bucket each, every case --------------------------------------------------

def lemma_1(i1, i2, j1, j2, p_i=1.0, p_j=1.0) -> float:
    """The joint probability P(X_i >= X_j, X_i in I_iu, X_j in I_jv) as Lemma 1 states it."""
    pp = p_i * p_j
    if i2 <= j1:
        return 0.0
    if i1 >= j2:
        return pp
    if i2 > j1 and i2 <= j2 and i1 < j1:
        return pp * (i2 - j1) ** 2 / (2 * (i2 - i1) * (j2 - j1))
    if i2 >= j2 and i1 < j1:
        return pp * (2 * i2 - j1 - j2) / (2 * (i2 - i1))
    if i2 > j2 and i1 >= j1 and i1 < j2:
        return pp - pp * (j2 - i1) ** 2 / (2 * (i2 - i1) * (j2 - j1))
    return pp * (i2 - 2 * j1 + i1) / (2 * (j2 - j1))


LEMMA_1_CASES = {
    "1 disjoint, I_iu before": (0, 10, 15, 30),
    "1 touching": (0, 10, 10, 30),
    "2 disjoint, I_iu after": (40, 50, 15, 30),
    "3 overlap, I_iu left": (0, 20, 10, 30),
    "4 I_jv inside I_iu": (0, 40, 10, 30),
    "4 same max": (0, 30, 10, 30),
    "5 overlap, I_iu right": (15, 40, 10, 30),
    "6 I_iu inside I_jv": (12, 20, 10, 30),
    "6 identical": (10, 30, 10, 30),
}


@pytest.mark.parametrize("case", list(LEMMA_1_CASES))
def test_lemma_1_cases(case):
    i1, i2, j1, j2 = LEMMA_1_CASES[case]
    h_i, h_j = Histogram.uniform(i1, i2), Histogram.uniform(j1, j2)
    expected = lemma_1(i1, i2, j1, j2)
    assert ge(h_i, h_j) == pytest.approx(expected, abs=EXACT)
    assert oracle(h_i, h_j) == pytest.approx(expected, abs=EXACT)
    block = p_geq_block(HistogramBlock.from_histograms([h_i]), HistogramBlock.from_histograms([h_j]))
    assert block[0] == pytest.approx(expected, abs=EXACT)


# --- random histograms against the exact oracle -------------------------------------------

distances = st.one_of(st.just(0.0), st.floats(-80, 80), st.floats(-1, 1))


@settings(max_examples=1500, deadline=None)
@given(histograms(), histograms(), distances)
def test_p_geq_is_exact(h_i, h_j, d):
    assert p_geq(h_i, h_j, d) == pytest.approx(oracle(h_i, h_j, d), abs=EXACT)


@settings(max_examples=1000, deadline=None)
@given(histograms(), histograms(), st.one_of(st.just(0.0), st.floats(0, 1), st.floats(0, 80)))
def test_p_within_is_exact_for_every_window(h_i, h_j, d):
    exact = float(p_within_exact(h_i.edges, h_i.probs, h_j.edges, h_j.probs, d))
    assert p_within(h_i, h_j, d) == pytest.approx(exact, abs=EXACT)
    assert p_within(h_j, h_i, d) == pytest.approx(exact, abs=EXACT)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(histograms(), histograms()), min_size=1, max_size=12), distances)
def test_blocks_of_mixed_sizes_are_exact(pairs, d):
    left = HistogramBlock.from_histograms([a for a, _ in pairs])
    right = HistogramBlock.from_histograms([b for _, b in pairs])
    expected = [oracle(a, b, d) for a, b in pairs]
    np.testing.assert_allclose(p_geq_block(left, right, d), expected, rtol=0, atol=EXACT)
    within = [oracle(a, b, abs(d)) - oracle(a, b, -abs(d)) for a, b in pairs]
    np.testing.assert_allclose(p_within_block(left, right, abs(d)), within, rtol=0, atol=EXACT)


def test_block_kernels_on_thousands_of_pairs_with_one_window_per_pair():
    rng = np.random.default_rng(7)
    left = [random_histogram(rng, int(rng.integers(1, 6)), rng.uniform(-30, 30)) for _ in range(3000)]
    right = [random_histogram(rng, int(rng.integers(1, 6)), rng.uniform(-30, 30)) for _ in range(3000)]
    windows = rng.uniform(0, 40, 3000)
    got = p_within_block(HistogramBlock.from_histograms(left), HistogramBlock.from_histograms(right), windows)
    expected = [float(p_within_exact(a.edges, a.probs, b.edges, b.probs, w))
                for a, b, w in zip(left, right, windows)]
    np.testing.assert_allclose(got, expected, rtol=0, atol=EXACT)


def test_buckets_narrower_than_the_distances_rounding_keep_their_weight():
    """A bucket of 1e-12 to 1e-4 beside distances of tens: its density is 1e4 to 1e13, and
    a sum over edges of densities times distances would lose the pair's probability to
    cancellation (1e-5 off at 1e-11). Histograms with such buckets, and plain narrow
    intervals, against exact rational integration, in both roles and as a block of one."""
    rng = np.random.default_rng(11)
    left, right = [], []
    for n in range(1500):
        h = random_histogram(rng, int(rng.integers(1, 5)), rng.uniform(-30, 30))
        edges = h.edges.copy()
        k = int(rng.integers(0, len(h.probs)))
        narrow = 10.0 ** rng.uniform(-12, -4)
        edges[k + 1:] = edges[k] + narrow + (edges[k + 1:] - edges[k + 1])     # bucket k made narrow
        if n % 3 == 0:
            edges, probs = np.array([edges[0], edges[0] + narrow]), np.array([1.0])
        else:
            probs = h.probs
        (left if n % 2 else right).append(Histogram(edges, probs))
    right = right[:len(left)]
    others = [random_histogram(rng, int(rng.integers(1, 5)), rng.uniform(-30, 30)) for _ in left]
    windows = rng.uniform(0, 20, len(left))
    for a_side, b_side in ((left, others), (others, left), (left, right)):
        got = p_within_block(HistogramBlock.from_histograms(a_side), HistogramBlock.from_histograms(b_side), windows)
        expected = [float(p_within_exact(a.edges, a.probs, b.edges, b.probs, w))
                    for a, b, w in zip(a_side, b_side, windows)]
        np.testing.assert_allclose(got, expected, rtol=0, atol=5e-11)
    one = left[3]
    got = p_geq_block(HistogramBlock.from_histograms([one]), HistogramBlock.from_histograms(others), -windows)
    expected = [oracle(one, b, -w) for b, w in zip(others, windows)]
    np.testing.assert_allclose(got, expected, rtol=0, atol=5e-11)


def test_a_window_below_the_edges_spacing_and_distances_as_large_as_the_window_are_not_rounded_away():
    """``d`` added to the edges' differences, each sum rounded once: a ``d`` of 1e-12 next
    to edges at 1e4 (whose float step is 1.8e-12), and buckets of 1e-9 a window of 1,000
    apart (the step of a difference of 1,000 is 1.1e-13), in one-pair and block form."""
    cases = [(Histogram([0.0, 1e4, 1e4 + 1e-11], [0.5, 0.5]), Histogram([0.0, 1e4, 1e4 + 1e-11], [0.5, 0.5]), 1e-12),
             (Histogram([0.0, 1e-9], [1.0]), Histogram([1000.0, 1000.0 + 1e-9], [1.0]), 1000.0),
             (Histogram([0.3, 0.3 + 1e-9], [1.0]), Histogram([1000.3, 1000.3 + 1e-9], [1.0]), 1000.0),
             (Histogram([-1e9, -1e9 + 3e-7], [1.0]), Histogram([1e-6, 1e-6 + 2e-7], [1.0]), 1e9 + 1e-6)]
    for a, b, d in cases:
        for dd in (d, -d):
            assert p_geq(a, b, dd) == pytest.approx(oracle(a, b, dd), abs=1e-11), (a, b, dd)
            got = p_geq_block(HistogramBlock.from_histograms([a]), HistogramBlock.from_histograms([b]), dd)[0]
            assert got == pytest.approx(oracle(a, b, dd), abs=1e-11), (a, b, dd)
        exact = float(p_within_exact(a.edges, a.probs, b.edges, b.probs, abs(d)))
        assert p_within(a, b, abs(d)) == pytest.approx(exact, abs=1e-11)
    # the second case's probability is just above one half: found, not rounded below it
    assert p_within(cases[1][0], cases[1][1], 1000.0) > 0.5


def test_stime_with_buckets_narrower_than_the_breakpoints_rounding():
    """Configuration changes ``e_a - e_b`` rounded at thousands move by more than a bucket
    of 1e-12: between two of them g may not be one quadratic. The time found must still
    be where g crosses delta (exact rational g a few float steps either side of it)."""
    rng = np.random.default_rng(23)

    def make(origin):
        n = int(rng.choice([1, 2, 3, 5, 10]))
        widths = rng.choice([1e-12, 1e-9, 1e-6, 1e-3, 0.5, 1.0, 7.0, 1e3], n) * rng.uniform(0.5, 2, n)
        probs = rng.choice([0.0, 1e-15, 0.3, 0.6, 0.9], n) * rng.uniform(0.5, 1.5, n)
        probs[0] = probs[0] or 1.0
        return Histogram(origin + np.concatenate(([0.0], np.cumsum(widths))), probs / math.fsum(probs))

    checked = 0
    while checked < 400:
        origin = float(rng.choice([0.0, 1e3, 1e9]))
        try:
            h_i, h_j = make(origin), make(origin + float(rng.choice([0.0, 0.5, 10.0, -10.0])))
        except ValidationError:          # a bucket too narrow for its origin's float step
            continue
        delta = float(rng.choice([0.5, 0.9, 0.1, rng.uniform(0.01, 0.99)]))
        earliest = bool(rng.random() < 0.3)
        t = stime(h_i, h_j, delta, earliest=earliest)
        x = Fraction(t) - Fraction(float(h_j.hi))
        step = Fraction(8 * (np.spacing(abs(t)) + np.spacing(abs(h_j.hi))))
        before = p_geq_exact(h_i.edges, h_i.probs, h_j.edges, h_j.probs, -(x - step))
        after = p_geq_exact(h_i.edges, h_i.probs, h_j.edges, h_j.probs, -(x + step))
        assert before >= Fraction(delta) - Fraction(1, 10 ** 9) and after <= Fraction(delta) + Fraction(1, 10 ** 9), \
            (h_i, h_j, delta, earliest, t)
        checked += 1


def test_a_block_of_one_pairs_with_every_row():
    rng = np.random.default_rng(3)
    one = random_histogram(rng, 3, 5.0)
    many = [random_histogram(rng, 4, rng.uniform(-10, 20)) for _ in range(50)]
    got = p_geq_block(HistogramBlock.from_histograms([one]), HistogramBlock.from_histograms(many), 2.5)
    np.testing.assert_allclose(got, [oracle(one, b, 2.5) for b in many], rtol=0, atol=EXACT)
    got = p_geq_block(HistogramBlock.from_histograms(many), HistogramBlock.from_histograms([one]), -1.0)
    np.testing.assert_allclose(got, [oracle(a, one, -1.0) for a in many], rtol=0, atol=EXACT)


def test_far_apart_and_identical_histograms():
    h = Histogram([0, 1, 3, 4], [0.2, 0.5, 0.3])
    assert ge(h, h) == pytest.approx(0.5, abs=EXACT)
    assert p_geq(h, h, 100) == 1.0
    assert p_geq(h, h, -100) == 0.0
    assert p_within(h, h, 0) == 0.0
    assert p_within(h, h.shift(1e6), 10) == 0.0
    with pytest.raises(ValueError):
        p_within(h, h, -1)


def test_large_absolute_times_keep_their_precision():
    """Epoch seconds, buckets of a second and of a millisecond: exact to rounding near 0,
    not to the float spacing at 1.7e9 (2.4e-7, which made errors of 1e-7 to 1e-4)."""
    rng = np.random.default_rng(11)
    for base, unit in ((1.7e9, 1.0), (1.7e9, 1e-3), (-3.2e8, 0.25)):
        for _ in range(60):
            h_i, h_j = (random_histogram(rng, int(rng.integers(1, 4)), origin)
                        for origin in (0.0, rng.uniform(-3, 3)))
            h_i, h_j = (Histogram(h.edges * unit + base, h.probs) for h in (h_i, h_j))
            d = float(rng.choice([0.0, 0.3, 1.7, 6.0])) * unit
            exact = float(p_within_exact(h_i.edges, h_i.probs, h_j.edges, h_j.probs, d))
            assert p_within(h_i, h_j, d) == pytest.approx(exact, abs=EXACT)
            block = p_within_block(HistogramBlock.from_histograms([h_i]), HistogramBlock.from_histograms([h_j]), d)
            assert block[0] == pytest.approx(exact, abs=EXACT)
            assert p_geq(h_i, h_j, d) == pytest.approx(float(p_geq_exact(h_i.edges, h_i.probs, h_j.edges,
                                                                          h_j.probs, d)), abs=EXACT)


def test_zero_probability_end_buckets_leave_a_certain_pair_certain():
    """Where the supports' mass alone decides, 1 and 0 come out exactly (a threshold of 1
    keeps the pair), whatever zero-probability buckets lie beyond it."""
    a, b = Histogram.uniform(0, 10), Histogram([0, 5, 20], [1.0, 0.0])
    assert p_within(a, b, 14.9) == 1.0
    assert p_within_block(HistogramBlock.from_histograms([a]), HistogramBlock.from_histograms([b]), 14.9)[0] == 1.0
    late = Histogram([-30, 20, 25], [0.0, 1.0])
    assert p_geq(a, late, 5.0) == 0.0 and p_geq(late, a, -10.0) == 1.0
    assert p_geq_block(HistogramBlock.from_histograms([a]), HistogramBlock.from_histograms([late]), 10.0)[0] == 0.0


@pytest.mark.parametrize("d", [0.0, 4.0, -3.0])
def test_monte_carlo_agrees(d):
    rng = np.random.default_rng(11)
    h_i, h_j = H3.shift(-100), H2
    n = 400_000
    x_i = sample(h_i.edges, h_i.probs, n, rng)
    x_j = sample(h_j.edges, h_j.probs, n, rng)
    p = p_geq(h_i, h_j, d)
    assert np.mean(x_i + d >= x_j) == pytest.approx(p, abs=5 * np.sqrt(p * (1 - p) / n) + 1e-4)
    w = p_within(h_i, h_j, abs(d))
    assert np.mean(np.abs(x_i - x_j) <= abs(d)) == pytest.approx(w, abs=5 * np.sqrt(w * (1 - w) / n) + 1e-4)


# --- the interval paper's deadline and delay predicates -----------------------------------

def theorem_1_integral(lo1, hi1, lo2, hi2, d, points=400_000) -> float:
    """prob(I1 + d >= I2) = 1/(len I1 len I2) int_{min I1}^{max I1} MIN(MAX(x + d - min I2, 0), len I2) dx,
    by the midpoint rule."""
    x = lo1 + (np.arange(points) + 0.5) * (hi1 - lo1) / points
    integrand = np.minimum(np.maximum(x + d - lo2, 0.0), hi2 - lo2)
    return float(integrand.mean() / (hi2 - lo2))


@pytest.mark.parametrize("lo1,hi1,lo2,hi2,d", [
    (0, 10, 5, 25, 3), (0, 10, 5, 25, 0), (10, 30, 0, 5, 2), (0, 50, 10, 20, 7), (3, 4, 0, 40, 12)])
def test_deadline_and_delay_follow_theorem_1(lo1, hi1, lo2, hi2, d):
    i1, i2 = Histogram.uniform(lo1, hi1), Histogram.uniform(lo2, hi2)
    assert p_deadline(i1, i2, d) == pytest.approx(theorem_1_integral(lo1, hi1, lo2, hi2, d), abs=1e-8)
    # delay: the corresponding event at least d after the triggering one
    assert p_delay(i1, i2, d) == pytest.approx(theorem_1_integral(lo2, hi2, lo1, hi1, -d), abs=1e-8)
    assert p_delay(i1, i2, d) == pytest.approx(oracle(i2, i1, -d), abs=EXACT)


# --- satisfaction time -----------------------------------------------------------------

@settings(max_examples=400, deadline=None)
@given(histograms(allow_zero=False), histograms(allow_zero=False), st.floats(0.02, 0.98))
def test_stime_is_exact(h_i, h_j, delta):
    expected = stime_bisection(h_i.edges, h_i.probs, h_j.edges, h_j.probs, delta)
    scale = max(1.0, abs(expected), h_i.length + h_j.length)
    assert stime(h_i, h_j, delta) == pytest.approx(expected, abs=1e-6 * scale)


@settings(max_examples=200, deadline=None)
@given(histograms(), histograms(), st.floats(0.02, 1.0))
def test_stime_is_the_largest_time_that_still_satisfies(h_i, h_j, delta):
    # Lemma 3 / Theorem 2: t <= stime gives probability >= delta, t > stime gives < delta
    # (with zero-probability buckets the probability can be flat: stime is the last time).
    t = stime(h_i, h_j, delta)
    tolerance = 1e-7 * max(1.0, abs(t), h_i.length + h_j.length)
    assert oracle(h_i, h_j, h_j.hi - (t - tolerance)) >= delta - 1e-9
    assert oracle(h_i, h_j, h_j.hi - (t + tolerance)) < delta + 1e-9


def test_stime_on_a_plateau_takes_the_latest_time():
    # H_i has an empty middle bucket: P(H_i - x >= H_j) is 0.5 for every x in [1, 8]
    # (H_j entirely above the first bucket, entirely below the last): x* = 8, T = x* + max(H_j).
    h_i = Histogram([0, 1, 9, 10], [0.5, 0.0, 0.5])
    h_j = Histogram([0, 1], [1.0])
    assert oracle(h_i, h_j, -1.0) == oracle(h_i, h_j, -8.0) == 0.5
    assert stime(h_i, h_j, 0.5) == pytest.approx(8.0 + 1.0, abs=1e-9)


def test_earliest_stime_on_a_plateau_takes_the_first_time():
    h_i = Histogram([0, 1, 9, 10], [0.5, 0.0, 0.5])
    h_j = Histogram([0, 1], [1.0])
    assert stime(h_i, h_j, 0.5, earliest=True) == pytest.approx(1.0 + 1.0, abs=1e-9)
    assert stime(h_i, h_j, 0.0, earliest=True) == pytest.approx(10.0 + 1.0, abs=1e-9)


@pytest.mark.parametrize("h_i, h_j, delta, earliest, expected", [
    # flat at 0.5 for x in [2, 3]: the kernel gives 0.49999999999999994 at x = 3
    ([[-2, 2, 5, 6, 8, 11], [0, 0, .5, 0, .5]], [[4, 5], [1.0]], 0.5, False, 8.0),
    # touches 0.5 at x = 14 only, past a zero-probability bucket
    ([[10, 13, 15, 19, 22, 23], [.5, 0, .125, .125, .25]], [[-6, -5, -2, -1, 1], [0, 0, 0, 1.0]], 0.5, False, 15.0),
    # flat at 0.625 from x = 15 (earliest): the first time it no longer exceeds it
    ([[10, 13, 16, 17, 20, 22, 24], [.375, 0, .25, .25, .125, 0]], [[-2, -1, 1], [1.0, 0]], 0.625, True, 16.0),
    ([[0, 4, 8, 11, 13, 15], [0, .05, 0, 0, .95]], [[0, 4, 5, 9, 10], [1.0, 0, 0, 0]], 0.95, True, 18.0),
])
def test_stime_where_the_probability_is_flat_at_delta_to_a_rounding(h_i, h_j, delta, earliest, expected):
    """Where the probability is delta on a plateau (or touches it), its computed value may
    fall a rounding on either side: the time is still the plateau's end (latest) or start
    (earliest), as the oracle places it, not a breakpoint before or after."""
    h_i, h_j = Histogram(*h_i), Histogram(*h_j)
    at = oracle(h_i, h_j, h_j.hi - expected)
    assert at == pytest.approx(delta, abs=1e-9)
    if earliest:
        assert oracle(h_i, h_j, h_j.hi - (expected - 0.01)) > delta + 1e-9
    else:
        assert oracle(h_i, h_j, h_j.hi - (expected + 0.01)) < delta - 1e-9
    assert stime(h_i, h_j, delta, earliest=earliest) == pytest.approx(expected, abs=1e-9)


@settings(max_examples=200, deadline=None)
@given(histograms(), histograms(), st.floats(0.0, 0.98))
def test_earliest_stime_is_the_first_time_that_no_longer_exceeds(h_i, h_j, delta):
    t = stime(h_i, h_j, delta, earliest=True)
    tolerance = 1e-7 * max(1.0, abs(t), h_i.length + h_j.length)
    assert oracle(h_i, h_j, h_j.hi - (t - tolerance)) > delta - 1e-9
    assert oracle(h_i, h_j, h_j.hi - (t + tolerance)) <= delta + 1e-9


def test_stime_table_and_shift_rule():
    table = stime_table([PHI1, PHI2], [PHI2], 0.8)
    assert table.shape == (2, 1)
    assert table[0, 0] == pytest.approx(stime(PHI1, PHI2, 0.8), abs=1e-12)
    # Eq. 7: stime(H_i, H_j, delta) + x = stime(H_i + x, H_j, delta)
    assert stime(PHI1.shift(210 - 40), PHI2, 0.8) == pytest.approx(table[0, 0] + 170, abs=1e-9)
    with pytest.raises(ValueError):
        stime(PHI1, PHI2, 0.0)
