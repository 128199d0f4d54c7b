"""The what-if and the backtest's thresholds (penumbra/tuning.py), against counts taken
here candidate by candidate: every near miss a join's observations describe is drawn
here first, with its probability, so the true count at each threshold is known."""

from __future__ import annotations

import math

import numpy as np
import pytest

from penumbra.engine import compile_query
from penumbra.events import parse_streams
from penumbra.tuning import (NEAR_MISS_BIN, NearMisses, candidates_floor, snap_to_bins, threshold_grid, what_if,
                             window_floor)

STREAMS = parse_streams({"S": {"pi": 4, "max_delay": 5}, "T": {"pi": 4, "max_delay": 5}})


def off_the_edges(rng: np.random.Generator, lo: float, hi: float, n: int) -> np.ndarray:
    """Probabilities in [lo, hi) at least 1e-6 from every bin edge (a threshold on an
    edge then keeps exactly the ones above it)."""
    probs = rng.uniform(lo, hi, n)
    return probs + np.where(np.abs(probs / NEAR_MISS_BIN - np.round(probs / NEAR_MISS_BIN)) < 1e-4, 2e-6, 0.0)


def join_observations(near: list[np.ndarray], histogram: bool, sampled: int | None) -> list[dict]:
    """A block's observations as a join writes them: the near misses' count, their
    histogram by hundredths, and a sample of their probabilities."""
    out = []
    for probs in near:
        observed = {"counters": {"near_misses": len(probs)},
                    "near_misses": [{"prob": float(p)} for p in (probs if sampled is None else probs[:sampled])]}
        if histogram:
            bins = np.floor(probs / NEAR_MISS_BIN + 1e-9).astype(int)
            observed["near_miss_histogram"] = {f"{k * NEAR_MISS_BIN:.2f}": int(n)
                                               for k, n in zip(*np.unique(bins, return_counts=True))}
        out.append(observed)
    return out


@pytest.mark.parametrize("histogram, sampled", [(True, 20), (False, None)], ids=["binned", "every-sample"])
def test_the_what_if_counts_every_candidate_at_each_threshold(histogram, sampled):
    rng = np.random.default_rng(5)
    matches = off_the_edges(rng, 0.6, 1.0, 300)
    near = [off_the_edges(rng, 0.05, 0.6, int(rng.integers(0, 60))) for _ in range(12)]
    answer = what_if(matches, join_observations(near, histogram, sampled), 0.05, 21)
    everything = np.concatenate([matches, *near])
    assert answer["exact"] and answer["near_misses"] == sum(map(len, near))
    assert len(answer["points"]) >= 2 and answer["points"][-1]["threshold"] == 1.0
    for point in answer["points"]:
        assert point["matches"] == float((everything >= point["threshold"]).sum()), point
    if histogram:
        assert all(math.isclose(p["threshold"] / NEAR_MISS_BIN, round(p["threshold"] / NEAR_MISS_BIN), abs_tol=1e-9)
                   for p in answer["points"])


def test_near_misses_known_only_by_a_sample_are_scaled_from_it():
    """Two blocks of 100 near misses, 20 sampled each: a sample drawn uniformly scales to
    the count; half of each block at 0.1 and half at 0.5, sampled evenly, scales exactly."""
    near = [np.repeat([0.1, 0.5], 50), np.repeat([0.1, 0.5], 50)]
    observations = [{"counters": {"near_misses": 100}, "near_misses": [{"prob": p} for p in [0.1, 0.5] * 10]}
                    for _ in near]
    counts = NearMisses(observations)
    assert not counts.exact and counts.total == 200 and counts.samples == 40
    assert counts.at_least(0.3) == 100.0 and counts.at_least(0.05) == 200.0 and counts.at_least(0.6) == 0.0


def test_a_block_without_samples_borrows_the_windows_known_probabilities():
    observations = [{"counters": {"near_misses": 2}, "near_misses": [{"prob": 0.2}, {"prob": 0.4}]},
                    {"counters": {"near_misses": 4}, "near_misses": []}]
    counts = NearMisses(observations)
    assert counts.at_least(0.3) == 1 + 0.5 * 4


def test_the_grid_runs_from_the_floor_to_one_on_the_bins_edges():
    for floor in (0.0, 0.05, 0.123, 0.5, 0.999, 1.0):
        for steps in (2, 3, 21, 200):
            plain = threshold_grid(floor, steps, binned=False)
            assert plain == sorted(plain) and len(plain) == steps
            assert plain[0] == pytest.approx(floor) and plain[-1] == 1.0
            snapped = threshold_grid(floor, steps, binned=True)
            assert snapped == sorted(set(snapped)) and snapped[-1] == 1.0
            assert floor - 1e-12 <= snapped[0] < floor + NEAR_MISS_BIN
            assert all(t == round(t, 2) for t in snapped)
    assert snap_to_bins([0.07, 0.0700001, 0.069999]) == [0.07, 0.08]


def test_the_floor_is_the_lowest_threshold_a_querys_candidates_answer_for():
    join = compile_query("SELECT * FROM S A, T B WHERE WINDOW(A, B) = 3 WITH THRESHOLD 0.6", STREAMS)
    low = compile_query("SELECT * FROM S A, T B WHERE WINDOW(A, B) = 3 WITH THRESHOLD 0.02", STREAMS)
    pattern = compile_query("PATTERN SEQ(S a, T b) WITHIN 5 WITH CONFIDENCE 0.3", STREAMS)
    every = compile_query("PATTERN SEQ(S a, T b) WITHIN 5", STREAMS)
    lossy = compile_query("SEQUENCE(S x, T y) WITHIN 5 THRESHOLD 0.4", STREAMS)
    assert candidates_floor(join) == 0.05 and candidates_floor(join, archive_floor=0.2) == 0.2
    assert candidates_floor(low) == 0.02           # a threshold below the default floor is the floor
    assert candidates_floor(pattern) == 0.3 and candidates_floor(pattern, archive_floor=0.5) == 0.3
    assert candidates_floor(every) == 0.0 and candidates_floor(lossy) == 0.4
    lossy.set_threshold(0.25)
    assert candidates_floor(lossy) == 0.25
    assert candidates_floor(None) == 0.0


def test_a_windows_floor_is_the_one_its_newest_block_reported_else_the_querys():
    built = []

    def operator():
        built.append(1)
        return compile_query("SELECT * FROM S A, T B WHERE WINDOW(A, B) = 3 WITH THRESHOLD 0.6", STREAMS)

    assert window_floor([{"counters": {}}, {"floor": 0.2}, {"floor": 0.1}], operator) == 0.2 and not built
    assert window_floor([{"floor": True}], operator) == 0.05 and built == [1]
    assert window_floor([], lambda: None, threshold=0.4) == 0.4
