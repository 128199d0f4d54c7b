"""Scoring functions of AYAC section 3 against direct sums over the gaps (the numerical
integration of the model on the unit grid), for several gap densities."""

from __future__ import annotations

import numpy as np
import pytest
import hypothesis.strategies as st
from hypothesis import given, settings

from lossy_reference import F, enumerate_run, not_happened_given_unobserved
from penumbra.events.streams import gap_pmf
from penumbra.lossy.model import (GapHistogram, RunComponent, cdf_before, run_score, s_negative, s_negatives,
                                  s_positive, s_positive_pair, s_positive_within_negatives)

W = 40


def uniform(lo, hi, window=W):
    pmf = np.zeros(window + 1)
    pmf[lo:hi + 1] = 1.0 / (hi - lo + 1)
    return pmf


def exponential_histogram(mean, width, window=W):
    """An exponential-like histogram: bins of ``width`` with weights exp(-bin centre / mean)."""
    pmf = np.zeros(window + 1)
    for d in range(1, window):
        pmf[d] = np.exp(-((d - 1) // width * width + width / 2) / mean) / width
    return pmf / pmf.sum()


DENSITIES = {
    "uniform": uniform(1, 25),
    "uniform_late": uniform(10, 30),
    "exp_fast": exponential_histogram(4.0, 2),
    "exp_slow": exponential_histogram(15.0, 5),
}


@pytest.mark.parametrize("name", sorted(DENSITIES))
@pytest.mark.parametrize("eps", [0.0, 0.1, 0.35])
def test_single_missing_positive_and_negative(name, eps):
    pmf = DENSITIES[name]
    sp, sn = s_positive(pmf, eps), s_negative(pmf, eps)
    for T in range(W + 1):
        assert sp[T] == pytest.approx(eps * F(pmf, T), abs=1e-12)
        assert sn[T] == pytest.approx(not_happened_given_unobserved(pmf, eps, T), abs=1e-12)
    # S^P non-decreasing and S^N non-increasing in T (section 3.1, 3.2)
    assert np.all(np.diff(sp) >= -1e-15) and np.all(np.diff(sn) <= 1e-15)
    # a run of one missed positive is S^P; a run of one negative is S^N
    run_p = run_score([RunComponent(True, pmf, eps)], W)
    run_n = run_score([RunComponent(False, pmf, eps)], W)
    assert np.allclose(run_p[1:], sp[1:], atol=1e-12) and run_p[0] == 0
    assert np.allclose(run_n[1:], sn[1:], atol=1e-12)


@pytest.mark.parametrize("first,second", [("uniform", "exp_fast"), ("exp_slow", "uniform_late"),
                                          ("exp_fast", "exp_fast")])
def test_two_missing_positives(first, second):
    f1, f2, e1, e2 = DENSITIES[first], DENSITIES[second], 0.2, 0.3
    table = s_positive_pair(RunComponent(True, f1, e1), RunComponent(True, f2, e2), W)
    for T in range(W + 1):
        expected = e1 * e2 * sum(f1[g1] * f2[g2] for g1 in range(1, W) for g2 in range(1, W) if g1 + g2 < T)
        assert table[T] == pytest.approx(expected, abs=1e-12)


def test_several_negatives_multiply():
    pairs = [(DENSITIES["uniform"], 0.1), (DENSITIES["exp_fast"], 0.4), (DENSITIES["exp_slow"], 0.0)]
    table = s_negatives(pairs, W)
    run = run_score([RunComponent(False, pmf, eps) for pmf, eps in pairs], W)
    for T in range(1, W + 1):
        expected = np.prod([not_happened_given_unobserved(pmf, eps, T) for pmf, eps in pairs])
        assert table[T] == pytest.approx(expected, abs=1e-12)
        assert run[T] == pytest.approx(expected, abs=1e-12)


def test_positive_surrounded_by_negatives():
    """S^{N..NPN..N}: negatives before the missed positive over its gap t, after it over T - t."""
    before = [RunComponent(False, DENSITIES["exp_fast"], 0.3), RunComponent(False, DENSITIES["uniform"], 0.1)]
    missed = RunComponent(True, DENSITIES["exp_slow"], 0.25)
    after = [RunComponent(False, DENSITIES["uniform_late"], 0.5)]
    table = s_positive_within_negatives(before, missed, after, W)
    for T in range(W + 1):
        expected = 0.0
        for t in range(1, T):
            pre = np.prod([not_happened_given_unobserved(c.pmf, c.miss_prob, t) for c in before])
            post = np.prod([not_happened_given_unobserved(c.pmf, c.miss_prob, T - t) for c in after])
            expected += missed.miss_prob * missed.pmf[t] * pre * post
        assert table[T] == pytest.approx(expected, abs=1e-12)


@st.composite
def runs(draw):
    components = []
    for _ in range(draw(st.integers(1, 4))):
        weights = draw(st.lists(st.floats(0, 1), min_size=W - 1, max_size=W - 1).filter(lambda w: sum(w) > 0.1))
        pmf = np.concatenate(([0.0], np.array(weights) / sum(weights), [0.0]))
        components.append(RunComponent(draw(st.booleans()), pmf, draw(st.sampled_from([0.0, 0.2, 0.6]))))
    return components


@settings(max_examples=25, deadline=None)
@given(runs(), st.integers(0, 12))
def test_any_run_equals_enumeration(run, T):
    assert run_score(run, W)[T] == pytest.approx(enumerate_run(run, T), abs=1e-12)


def test_long_window_uses_the_same_numbers():
    """Beyond the direct-convolution size the FFT path must agree with direct sums."""
    window = 6000
    f1, f2 = uniform(1, 50, window), exponential_histogram(20.0, 4, window)
    table = s_positive_pair(RunComponent(True, f1, 0.5), RunComponent(True, f2, 0.5), window)
    for T in (0, 1, 2, 3, 30, 60, 140, 5999):
        expected = 0.25 * sum(f1[g1] * f2[:max(0, T - g1)].sum() for g1 in range(1, 51))
        assert table[T] == pytest.approx(expected, abs=1e-12)


def test_cdf_before_counts_gaps_strictly_below():
    pmf = uniform(3, 5, 10)
    assert cdf_before(pmf).tolist() == pytest.approx([0, 0, 0, 0, 1 / 3, 2 / 3, 1, 1, 1, 1, 1])


def test_gap_pmf_families():
    assert gap_pmf("uniform", (3, 5), 10).tolist() == pytest.approx(uniform(3, 5, 10).tolist())
    exp = gap_pmf("exponential", (4.0,), 10)
    direct = np.array([0] + [np.exp(-d / 4) for d in range(1, 10)] + [0])
    assert exp == pytest.approx(direct / direct.sum())
    hist = gap_pmf("histogram", (3, 1, 2), 10)      # gaps 1-3 weight 1, gaps 4-6 weight 2
    assert hist.tolist() == pytest.approx([0] + [1 / 9] * 3 + [2 / 9] * 3 + [0] * 4)
    with pytest.raises(ValueError, match="no mass"):
        gap_pmf("uniform", (20, 30), 10)


def test_gap_histogram_prior_then_learning():
    estimator = GapHistogram(window=101, bins=10, prior=1.0)
    assert estimator.pmf()[1:101] == pytest.approx(np.full(100, 0.01))
    rng = np.random.default_rng(7)
    truth = exponential_histogram(12.0, 10, 101)
    estimator.add(rng.choice(np.arange(102), size=200_000, p=truth))
    estimator.add(np.array([0, 101, 500]))           # outside 1..W-1: ignored
    assert estimator.observations == 200_000
    learned = estimator.pmf()
    assert learned.sum() == pytest.approx(1.0)
    binned = [truth[1 + 10 * b:11 + 10 * b].sum() for b in range(10)]
    assert [learned[1 + 10 * b:11 + 10 * b].sum() for b in range(10)] == pytest.approx(binned, abs=3e-3)


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("family, extreme, equivalent", [
    ("exponential", (1e-320,), ("uniform", (1, 1))),        # a vanishing mean: every gap is 1
    ("exponential", (1e-3,), ("uniform", (1, 1))),
    ("histogram", (10, 1e308, 1e308), ("histogram", (10, 1, 1))),
    ("histogram", (3, 5e-324, 1e-323), ("histogram", (3, 1, 2))),
])
def test_gap_pmf_extreme_parameters_mean_their_density(family, extreme, equivalent):
    assert gap_pmf(family, extreme, 600).tolist() == pytest.approx(gap_pmf(*equivalent, 600).tolist(), abs=1e-15)


def test_gap_pmf_names_the_density_as_written():
    with pytest.raises(ValueError, match=r"^uniform\(20, 30\) puts no mass on gaps 1\.\.9"):
        gap_pmf("uniform", (20.0, 30.0), 10)


def test_runs_of_one_missed_positive_need_no_convolution(monkeypatch):
    """The first missed positive convolves the unit impulse and a closing without negatives
    is 1 on every gap: both are closed forms, so a long window's table takes no FFT."""
    window = 2 * 4096
    f, g = uniform(1, 50, window), exponential_histogram(20.0, 4, window)
    expected_p, absent = s_positive(f, 0.3), s_negative(g, 0.5)
    expected_np = [0.3 * sum(f[t] * absent[t] for t in range(1, T)) for T in (0, 1, 2, 30, 60, 8000)]
    monkeypatch.setattr("penumbra.lossy.model._convolve", lambda *args: pytest.fail("a convolution"))
    assert np.allclose(run_score([RunComponent(True, f, 0.3)], window), expected_p, rtol=0, atol=1e-15)
    table = run_score([RunComponent(False, g, 0.5), RunComponent(True, f, 0.3)], window)
    assert table[[0, 1, 2, 30, 60, 8000]] == pytest.approx(expected_np, abs=1e-12)
