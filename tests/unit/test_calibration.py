"""Reliability, calibration error and precision by threshold, against a direct count over
every verdict (loops, no shared code), on random verdicts."""

from __future__ import annotations

import math

import numpy as np
import pytest

from penumbra.calibration import precision_curve, reliability, threshold_for


def verdicts(seed: int, n: int):
    rng = np.random.default_rng(seed)
    probs = np.round(rng.uniform(0, 1, n), 3)           # ties, and values on the bins' edges
    probs[: n // 10] = rng.choice([0.0, 0.1, 0.5, 1.0], n // 10)
    real = rng.uniform(0, 1, n) < probs ** 0.7          # over-confident at the low end
    return probs.tolist(), real.tolist()


@pytest.mark.parametrize("seed, bins", [(1, 10), (2, 5), (3, 1), (4, 20)])
def test_reliability_and_ece_count_every_verdict_in_its_bin(seed, bins):
    probs, real = verdicts(seed, 500)
    found = reliability(probs, real, bins=bins)
    ece = 0.0
    for k, b in enumerate(found["bins"]):
        inside = [(p, r) for p, r in zip(probs, real) if (k / bins <= p < (k + 1) / bins) or (k == bins - 1 and p == 1.0)]
        assert b["count"] == len(inside)
        if inside:
            mean = sum(p for p, _ in inside) / len(inside)
            share = sum(r for _, r in inside) / len(inside)
            assert b["mean_prob"] == pytest.approx(mean) and b["real_share"] == pytest.approx(share)
            ece += len(inside) / len(probs) * abs(share - mean)
        else:
            assert b["mean_prob"] is None and b["real_share"] is None
    assert sum(b["count"] for b in found["bins"]) == found["judged"] == 500
    assert found["ece"] == pytest.approx(ece) and found["real"] == sum(real)


def test_precision_at_each_threshold_and_the_threshold_that_reaches_a_precision():
    probs, real = verdicts(5, 400)
    grid = [k / 20 for k in range(21)] + [0.333]
    for point in precision_curve(probs, real, grid):
        above = [r for p, r in zip(probs, real) if p >= point["threshold"]]
        assert (point["judged"], point["real"]) == (len(above), sum(above))
        assert point["precision"] == (sum(above) / len(above) if above else None)
    for wanted in (0.5, 0.8, 0.9, 0.95, 1.0):
        found = threshold_for(probs, real, wanted)
        reaching = [t for t in sorted(set(probs))
                    if (lambda a: a and sum(a) / len(a) >= wanted)([r for p, r in zip(probs, real) if p >= t])]
        assert found == (reaching[0] if reaching else None)


def test_no_verdicts_and_bad_input():
    empty = reliability([], [])
    assert empty["judged"] == 0 and empty["ece"] is None and all(b["count"] == 0 for b in empty["bins"])
    assert threshold_for([], [], 0.9) is None
    assert precision_curve([], [], [0.5]) == [{"threshold": 0.5, "judged": 0, "real": 0, "precision": None}]
    for probs, real in (([0.5], [True, False]), ([1.5], [True]), ([math.nan], [True])):
        with pytest.raises(ValueError):
            reliability(probs, real)
    with pytest.raises(ValueError):
        reliability([0.5], [True], bins=0)
