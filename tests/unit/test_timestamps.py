"""penumbra.timestamps: histograms, intervals, blocks, and every validation error."""

from __future__ import annotations

import math

import numpy as np
import pytest

from penumbra.errors import ValidationError
from penumbra.events import parse_event_line
from penumbra.timestamps import MAX_BUCKETS, Histogram, HistogramBlock, Interval
from tests.oracle import sample


def test_template_resolution_example_3():
    phi1 = Histogram([0, 20, 30, 40], [0.1, 0.3, 0.6])
    h1 = Histogram.from_template(phi1, 60)          # a1 detected at 60 by s1
    assert h1.edges.tolist() == [20, 40, 50, 60]
    assert (h1.lo, h1.hi, h1.length, h1.buckets) == (20, 60, 40, 3)
    assert h1.probs.tolist() == pytest.approx([0.1, 0.3, 0.6])


def test_shift_and_uniform():
    h = Histogram.uniform(100, 120)
    assert h.shift(5).edges.tolist() == [105, 125]
    assert h.shift(5).probs.tolist() == [1.0]
    assert h.mean() == 110


def test_cdf_matches_the_sampled_distribution():
    h = Histogram([0, 1, 4, 5], [0.5, 0.25, 0.25])
    points = np.array([-1, 0, 0.5, 1, 2.5, 4, 4.5, 5, 6])
    expected = [0, 0, 0.25, 0.5, 0.625, 0.75, 0.875, 1, 1]
    assert h.cdf(points).tolist() == pytest.approx(expected)
    draws = sample(h.edges, h.probs, 200_000, np.random.default_rng(1))
    assert np.mean(draws <= 2.5) == pytest.approx(h.cdf(2.5), abs=0.005)


def test_probabilities_within_tolerance_are_renormalised():
    h = Histogram([0, 1, 2], [0.5, 0.5 + 5e-10])
    assert math.fsum(h.probs) == pytest.approx(1.0, abs=1e-15)


def test_numpy_inputs_are_numbers():
    h = Histogram(np.array([0, 1, 3]), [np.float32(0.25), np.int64(1) - 0.25])
    assert h.edges.tolist() == [0, 1, 3] and h.probs.tolist() == [0.25, 0.25 * 3]
    assert Histogram.uniform(np.int64(2), np.float64(4.5)).hi == 4.5
    with pytest.raises(ValidationError, match="number"):
        Histogram([0, np.bool_(True)], [1])


def test_histograms_are_immutable():
    h = Histogram([0, 1], [1])
    with pytest.raises(ValueError):
        h.edges[0] = 5


@pytest.mark.parametrize("edges,probs,field,words", [
    ([0, 1, 1, 2], [0.3, 0.3, 0.4], "edges[2]", "strictly increasing"),
    ([0, 2, 1], [0.5, 0.5], "edges[2]", "got 1.0 after 2.0"),
    ([0, float("nan"), 2], [0.5, 0.5], "edges[1]", "finite"),
    ([0, 1, float("inf")], [0.5, 0.5], "edges[2]", "finite"),
    ([0], [], "edges", "at least 2"),
    ([0, 1, 2], [0.5, 0.6], "probs", "sum to 1"),
    ([0, 1, 2], [1.2, -0.2], "probs[1]", ">= 0, got -0.2"),
    ([0, 1, 2], [1.0], "probs", "one probability per bucket"),
    ([0, 1, 2], [0.5, float("nan")], "probs[1]", "finite"),
    ([0, 1], [True], "probs[0]", "number"),
    ("0,1", [1], "edges", "list of numbers"),
    ([0, "1"], [1], "edges[1]", "number"),
    (list(range(MAX_BUCKETS + 2)), [1 / (MAX_BUCKETS + 1)] * (MAX_BUCKETS + 1), "edges", "too long"),
])
def test_bad_histograms_name_the_field(edges, probs, field, words):
    with pytest.raises(ValidationError) as error:
        Histogram(edges, probs)
    assert error.value.field == field
    assert words in error.value.message
    assert "np." not in error.value.message      # values as the client wrote them, not numpy's repr


def test_a_pmf_over_bounds_further_apart_than_any_float_is_refused_by_name():
    """Finite bounds whose difference overflows a float: an error naming the pmf, not a crash."""
    for lo, hi in ((-1e308, 1e308), (-1.7976931348623157e308, 1.7976931348623157e308)):
        with pytest.raises(ValidationError) as error:
            Interval(lo, hi, (1.0,))
        assert error.value.field == "pmf" and "too long" in error.value.message
    line = '{"stream": "s", "id": "x", "ts": {"lo": -1e308, "hi": 1e308, "pmf": [1]}}'
    with pytest.raises(ValidationError) as error:
        parse_event_line(line)
    assert error.value.field == "ts.pmf"


def test_probability_sum_just_outside_tolerance_is_rejected():
    with pytest.raises(ValidationError, match="sum to 1"):
        Histogram([0, 1, 2], [0.5, 0.5 + 3e-9])


def test_uniform_needs_a_proper_interval():
    with pytest.raises(ValidationError) as error:
        Histogram.uniform(5, 5)
    assert error.value.field == "hi"


def test_interval_validation_and_grid():
    assert Interval(3, 3).grid()[0].tolist() == [3]
    points, weights = Interval(0, 4).grid(2.0)
    assert points.tolist() == [0, 2, 4] and weights.tolist() == pytest.approx([1 / 3] * 3)
    points, weights = Interval(10, 12, (0.2, 0.3, 0.5)).grid()
    assert points.tolist() == [10, 11, 12] and weights.tolist() == pytest.approx([0.2, 0.3, 0.5])
    for args, field in [((5, 4), "hi"), ((float("nan"), 4), "lo"), ((0, 2, (0.5, 0.5)), "pmf"),
                        ((0, 1.5, (0.5, 0.5)), "pmf"), ((0, 1, (0.5, 0.6)), "pmf"),
                        ((0, 1, (1.5, -0.5)), "pmf[1]")]:
        with pytest.raises(ValidationError) as error:
            Interval(*args)
        assert error.value.field == field, args
    with pytest.raises(ValidationError, match="multiple of the time unit"):
        Interval(0, 3).grid(2.0)
    with pytest.raises(ValidationError, match="discrete grid"):
        Interval(0, 1, (0.5, 0.5)).as_histogram()
    assert Interval(0, 2).as_histogram() == Histogram([0, 2], [1])


def test_blocks_pad_and_round_trip():
    hs = [Histogram([0, 1], [1]), Histogram([0, 1, 3, 4], [0.2, 0.3, 0.5]), Histogram([5, 6, 9], [0.5, 0.5])]
    block = HistogramBlock.from_histograms(hs)
    assert block.edges.shape == (4, 3) and len(block) == 3 and block.buckets == 3
    assert block.hi.tolist() == [1, 4, 9] and block.lo.tolist() == [0, 0, 5]
    assert [block.histogram(k) for k in range(3)] == hs
    assert block.take([2, 0]).histogram(0) == hs[2]
    both = HistogramBlock.concat([HistogramBlock.from_histograms(hs[:1]), block])
    assert len(both) == 4 and both.histogram(2) == hs[1]
    assert HistogramBlock.uniform(np.array([0.0]), np.array([2.0])).histogram(0) == Histogram([0, 2], [1])


@pytest.mark.parametrize("seed", range(6))
def test_a_block_holds_each_histogram_in_its_column_padded_at_its_max(seed):
    rng = np.random.default_rng(seed)
    hs = []
    for _ in range(int(rng.integers(1, 40))):
        n = int(rng.choice([1, 2, 3, 5])) if seed % 2 else 3  # mixed bucket counts, or one count for all
        edges = np.cumsum(rng.uniform(0.1, 5.0, n + 1)) + rng.uniform(-100, 100)
        hs.append(Histogram(edges, rng.dirichlet(np.ones(n))))
    least = int(rng.integers(1, 8))
    block = HistogramBlock.from_histograms(hs, buckets=least)
    width = max([len(h.probs) for h in hs] + [least])
    assert block.edges.shape == (width + 1, len(hs)) and block.probs.shape == (width, len(hs))
    for col, h in enumerate(hs):
        n = len(h.probs)
        expected_edges = list(h.edges) + [h.edges[-1]] * (width - n)
        expected_probs = list(h.probs) + [0.0] * (width - n)
        assert block.edges[:, col].tolist() == expected_edges
        assert block.probs[:, col].tolist() == expected_probs
