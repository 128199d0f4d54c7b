"""Independent probability oracles for the tests.

Exact rational arithmetic (``fractions.Fraction``) over every pair of buckets: for
``U ~ Uniform[a, b]`` and ``V ~ Uniform[c, e]``, ``P(U + d >= V)`` is the integral over
``[a, b]`` of the clamped-linear function ``clamp(x + d - c, 0, e - c)``, cut at its
kinks and integrated piece by piece with the trapezoid rule (exact for a linear piece).
Nothing here shares code or method with ``penumbra.probability`` (adjusted histograms,
antiderivative blocks); plus a Monte Carlo sampler for a sanity check.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np


def _fractions(values) -> list[Fraction]:
    return [Fraction(float(v)) for v in values]


def _clamped_integral(a: Fraction, b: Fraction, shift: Fraction, width: Fraction) -> Fraction:
    """Integral over [a, b] of clamp(x + shift, 0, width) dx, exactly."""
    cuts = sorted({a, b} | {k for k in (-shift, width - shift) if a < k < b})
    total = Fraction(0)
    for s, t in zip(cuts, cuts[1:]):
        f_s = min(max(s + shift, Fraction(0)), width)
        f_t = min(max(t + shift, Fraction(0)), width)
        total += (t - s) * (f_s + f_t) / 2
    return total


def p_geq_exact(edges_i, probs_i, edges_j, probs_j, d=0.0) -> Fraction:
    """P(X_i + d >= X_j) for histogram timestamps, as an exact fraction."""
    ei, pi, ej, pj = (_fractions(v) for v in (edges_i, probs_i, edges_j, probs_j))
    d = Fraction(float(d))
    total = Fraction(0)
    for u in range(len(pi)):
        a, b = ei[u], ei[u + 1]
        for v in range(len(pj)):
            if pi[u] == 0 or pj[v] == 0:
                continue
            c, e = ej[v], ej[v + 1]
            inner = _clamped_integral(a, b, d - c, e - c)
            total += pi[u] * pj[v] * inner / ((b - a) * (e - c))
    return total


def p_within_exact(edges_i, probs_i, edges_j, probs_j, d) -> Fraction:
    """P(|X_i - X_j| <= d) = P(X_i + d >= X_j) - P(X_i - d >= X_j) (continuous), exactly."""
    return p_geq_exact(edges_i, probs_i, edges_j, probs_j, d) - \
        p_geq_exact(edges_i, probs_i, edges_j, probs_j, -d)


def p_geq_float(edges_i, probs_i, edges_j, probs_j, d=0.0) -> float:
    """The same bucket-pair integration in floats (fast enough for bisection), in Python's
    own floats: the same double arithmetic as numpy's scalars, about twice as fast. A pair
    whose shifted bucket ends where the other's begins, or before, adds nothing."""
    ei, pi, ej, pj = (np.asarray(v, dtype=float).tolist() for v in (edges_i, probs_i, edges_j, probs_j))
    d = float(d)
    right = [(pj[v], ej[v], ej[v + 1]) for v in range(len(pj)) if pj[v] != 0]
    total = 0.0
    for u in range(len(pi)):
        if pi[u] == 0:
            continue
        a, b = ei[u] + d, ei[u + 1] + d
        for q, c, e in right:
            if b <= c:
                continue
            cuts = [a, *(k for k in (c, e) if a < k < b), b]     # in order: a < c < e < b
            inner = 0.0
            for s, t in zip(cuts, cuts[1:]):
                inner += (t - s) * (min(max(s - c, 0.0), e - c) + min(max(t - c, 0.0), e - c)) / 2
            total += pi[u] * q * inner / ((b - a) * (e - c))
    return total


def stime_bisection(edges_i, probs_i, edges_j, probs_j, delta: float) -> float:
    """Definition 8 by bisection: T = x* + max(H_j), x* the largest x with
    P(H_i - x >= H_j) >= delta."""
    lo = float(edges_i[0] - edges_j[-1])
    hi = float(edges_i[-1] - edges_j[0])
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        if p_geq_float(edges_i, probs_i, edges_j, probs_j, -mid) >= delta:
            lo = mid
        else:
            hi = mid
    return lo + float(edges_j[-1])


def sample(edges, probs, size: int, rng: np.random.Generator) -> np.ndarray:
    """Draws from a histogram timestamp: a bucket by its probability, then uniform inside."""
    edges = np.asarray(edges, dtype=float)
    bucket = rng.choice(len(probs), size=size, p=np.asarray(probs) / np.sum(probs))
    return rng.uniform(edges[bucket], edges[bucket + 1])
