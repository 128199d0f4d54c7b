"""How well reported probabilities match what people found: reliability and precision.

Operators report a probability with every match; people judge some matches (or alarms)
real or false. From those verdicts (``unknown`` ones left out):

- the *reliability diagram*: the reported probabilities in equal bins over [0, 1], each
  with its count, mean reported probability and the share judged real; a calibrated query
  has the share equal to the mean in every bin;
- the *expected calibration error*: the bins' ``|share real - mean probability|`` weighted
  by their counts;
- the *precision at each threshold*: among the verdicts whose probability is at least
  ``t``, the share judged real, and the smallest threshold that reaches a wanted precision.

>>> r = reliability([0.95, 0.9, 0.15, 0.1], [True, True, False, True], bins=2)
>>> [(b["count"], b["real_share"]) for b in r["bins"]], round(r["ece"], 3)
([(2, 0.5), (2, 1.0)], 0.225)
>>> threshold_for([0.95, 0.9, 0.15, 0.1], [True, True, False, True], 0.9)
0.9
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = ["precision_curve", "reliability", "threshold_for"]


def _arrays(probs: Sequence[float], real: Sequence[bool]) -> tuple[np.ndarray, np.ndarray]:
    p = np.asarray(probs, dtype=float)
    r = np.asarray(real, dtype=bool)
    if p.shape != r.shape or p.ndim != 1:
        raise ValueError("probs and real must be two sequences of one length")
    if len(p) and (np.isnan(p).any() or p.min() < 0 or p.max() > 1):
        raise ValueError("probabilities must lie in [0, 1]")
    return p, r


def reliability(probs: Sequence[float], real: Sequence[bool], bins: int = 10) -> dict:
    """The reliability diagram and the expected calibration error of judged matches.
    Bin ``k`` holds the probabilities in ``[k / bins, (k + 1) / bins)``, the last also 1."""
    if bins < 1:
        raise ValueError("bins must be at least 1")
    p, r = _arrays(probs, real)
    index = np.minimum((p * bins).astype(int), bins - 1)
    counts = np.bincount(index, minlength=bins)
    sums = np.bincount(index, weights=p, minlength=bins)
    hits = np.bincount(index, weights=r.astype(float), minlength=bins)
    out = []
    ece = 0.0
    for k in range(bins):
        n = int(counts[k])
        mean = float(sums[k] / n) if n else None
        share = float(hits[k] / n) if n else None
        if n:
            ece += n / len(p) * abs(share - mean)
        out.append({"lo": k / bins, "hi": (k + 1) / bins, "count": n, "mean_prob": mean, "real_share": share})
    return {"bins": out, "ece": ece if len(p) else None, "judged": int(len(p)), "real": int(r.sum())}


def precision_curve(probs: Sequence[float], real: Sequence[bool], thresholds: Sequence[float]) -> list[dict]:
    """For each threshold ``t``: the verdicts with probability ≥ t, the real ones among
    them, and their share (None when there are none)."""
    p, r = _arrays(probs, real)
    order = np.argsort(p)
    sorted_p = p[order]
    real_above = np.concatenate([np.cumsum(r[order][::-1])[::-1], [0]])
    out = []
    for t in thresholds:
        start = int(np.searchsorted(sorted_p, t, side="left"))
        judged = len(p) - start
        hits = int(real_above[start])
        out.append({"threshold": float(t), "judged": judged, "real": hits,
                    "precision": hits / judged if judged else None})
    return out


def threshold_for(probs: Sequence[float], real: Sequence[bool], precision: float) -> float | None:
    """The smallest threshold (one of the judged probabilities) whose precision is at
    least ``precision``; None when no threshold reaches it."""
    p, r = _arrays(probs, real)
    candidates = np.unique(p)
    for point in precision_curve(p, r, candidates):
        if point["precision"] is not None and point["precision"] >= precision:
            return point["threshold"]
    return None
