"""What another threshold would have done: the thresholds a query's recorded candidates
answer for, and how many of them each threshold keeps.

A query's results hold its matches, each with its probability; a join also records its
*near misses*, the candidates between its floor and its threshold (the PTJoin paper's
buffers keep every event that could still reach the floor, Theorem 4), counted per block
in bins of :data:`NEAR_MISS_BIN` and sampled with their probabilities. From these:

- :func:`candidates_floor`: the lowest threshold the recorded candidates answer for (a
  join's floor, or the archive's when higher; any other query's threshold, since nothing
  below it is recorded);
- :func:`threshold_grid`: ``steps`` thresholds from the floor to 1, taken on the bins'
  edges when the near misses were binned, where counts are exact;
- :class:`NearMisses` and :func:`what_if`: the candidates at or above each threshold over
  a window of blocks: its matches plus its near misses, exact from the bins or from
  complete samples, else scaled from the samples.

>>> threshold_grid(0.05, 5, binned=True)
[0.05, 0.29, 0.53, 0.77, 1.0]
>>> what_if([0.9, 0.7], [{"counters": {"near_misses": 2}, "near_miss_histogram": {"0.40": 1, "0.55": 1}}],
...         0.4, 4)["points"]  # doctest: +NORMALIZE_WHITESPACE
[{'threshold': 0.4, 'matches': 4.0}, {'threshold': 0.6, 'matches': 2.0},
 {'threshold': 0.8, 'matches': 1.0}, {'threshold': 1.0, 'matches': 0.0}]
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np

from .operator import Operator
from .probability import meets

__all__ = ["NEAR_MISS_BIN", "NearMisses", "backtest_grid", "candidates_floor", "snap_to_bins", "threshold_grid",
           "what_if", "window_floor"]

#: the width of the bins a join counts its near misses by (``near_miss_histogram``): a
#: what-if is exact at thresholds on this grid
NEAR_MISS_BIN = 0.01
_BINS = round(1 / NEAR_MISS_BIN)


def candidates_floor(operator: Operator | None, archive_floor: float = 0.0, threshold: float | None = None) -> float:
    """The lowest threshold a query's recorded candidates answer for: an operator that
    reports near misses (a join) reports them down to its floor, and an archive keeps
    them from ``archive_floor`` on; any other reports nothing below its threshold. Without
    an operator (a query the core cannot build again, or one only the archive knows): its
    registered ``threshold``, or 0."""
    if operator is None:
        return float(threshold or 0.0)
    if operator.reports_near_misses:
        return max(float(operator.floor), archive_floor)
    return float(operator.threshold or 0.0)


def window_floor(observations: Sequence[dict[str, Any]], operator: Callable[[], Operator | None],
                 threshold: float | None = None) -> float:
    """The floor of a window of blocks, newest first: the one its newest block reported
    (``floor``), else :func:`candidates_floor` of the query's ``operator()``, built only
    then."""
    for observed in observations:
        floor = observed.get("floor")
        if isinstance(floor, (int, float)) and not isinstance(floor, bool):
            return float(floor)
    return candidates_floor(operator(), threshold=threshold)


def backtest_grid(operator: Operator | None, steps: int, *, archive_floor: float = 0.0,
                  threshold: float | None = None) -> list[float]:
    """The thresholds a backtest over the archive weighs: ``steps`` from the candidates'
    floor to 1, on the bins' edges where near misses may be archived (a join, or a query
    only the archive knows)."""
    floor = candidates_floor(operator, archive_floor, threshold)
    return threshold_grid(floor, steps, binned=operator is None or operator.reports_near_misses)


def snap_to_bins(thresholds: Sequence[float]) -> list[float]:
    """Each threshold moved up to the nearest edge of the near misses' bins (where their
    counts are exact), once each, in order."""
    return sorted({min(1.0, math.ceil(t * _BINS - 1e-9) / _BINS) for t in thresholds})


def threshold_grid(floor: float, steps: int, *, binned: bool) -> list[float]:
    """``steps`` thresholds from ``floor`` to 1, on the bins' edges when ``binned``."""
    grid = np.linspace(floor, 1.0, steps)
    return snap_to_bins(grid) if binned else [float(t) for t in grid]


class NearMisses:
    """A window's near misses from the observations of its blocks: per block, its
    histogram when it covers the block's count, else its samples (exact when they are all
    of them, scaled to the count otherwise)."""

    def __init__(self, observations: Sequence[dict[str, Any]]):
        self.total = self.samples = 0
        self.binned: dict[float, int] = {}
        known, sampled, sampled_total = [], [], 0
        for observed in observations:
            count = int(observed.get("counters", {}).get("near_misses", 0))
            probs = [m["prob"] for m in observed.get("near_misses", [])
                     if isinstance(m, dict) and isinstance(m.get("prob"), (int, float))]
            histogram = observed.get("near_miss_histogram")
            self.total += count
            self.samples += len(probs)
            if isinstance(histogram, dict) and sum(histogram.values()) == count:
                for edge, n in histogram.items():
                    self.binned[float(edge)] = self.binned.get(float(edge), 0) + int(n)
            elif len(probs) == count:
                known += probs
            else:
                sampled += probs
                sampled_total += count
        self.known = np.array(known)
        if not sampled:
            # blocks without a single sample of their own borrow the window's known probabilities
            sampled = known or [edge for edge, n in self.binned.items() for _ in range(n)]
        self.sampled = np.array(sampled)
        self.scale = sampled_total / len(sampled) if sampled else 0.0
        #: every count is exact (none scaled from samples)
        self.exact = sampled_total == 0

    def at_least(self, threshold: float) -> float:
        """Near misses with probability at least ``threshold`` (a bin counts when its lower
        edge does)."""
        binned = sum(n for edge, n in self.binned.items() if meets(edge, threshold))
        return float(binned + meets(self.known, threshold).sum() + meets(self.sampled, threshold).sum() * self.scale)


def what_if(match_probs: Sequence[float], observations: Sequence[dict[str, Any]], floor: float,
            steps: int) -> dict:
    """The candidates of a window that each of ``steps`` thresholds from ``floor`` to 1
    keeps: its matches (their probabilities) and its near misses (the observations of its
    blocks); the thresholds on the bins' edges when the near misses were binned.
    ``points`` has one ``{"threshold", "matches"}`` per threshold; ``near_misses`` the
    window's count, ``near_miss_samples`` how many had their probabilities sampled,
    ``exact`` whether no count was scaled from samples."""
    probs = np.asarray(match_probs, dtype=float)
    near = NearMisses(observations)
    points = [{"threshold": t, "matches": float(meets(probs, t).sum()) + near.at_least(t)}
              for t in threshold_grid(floor, steps, binned=bool(near.binned))]
    return {"points": points, "near_misses": near.total, "near_miss_samples": near.samples, "exact": near.exact}
