"""Exact probabilities of timing relations between uncertain timestamps.

The formulas of the PTJoin paper (section 2) and the interval paper (Theorem 1):

* :func:`ge` -- ``ge(H_i, H_j) = P(X_i >= X_j)`` by adjusted histograms (Definition 3,
  Theorem 1, Eq. 3).
* :func:`p_geq` -- ``P(X_i + d >= X_j)``, the probabilistic timing constraint of
  Definition 7 (a deadline when ``d >= 0``, a delay when ``d < 0``).
* :func:`p_within` -- ``P(|X_i - X_j| <= d)``, the join condition ``jc: (d, delta)``,
  exact for every ``d >= 0`` (the papers only treat ``d >= pi``).
* :func:`p_deadline`, :func:`p_delay` -- the interval paper's deadline and delay predicates.
* :func:`stime` -- the satisfaction time of Definition 8, exact.
* :func:`p_geq_block`, :func:`p_within_block` -- the same probabilities for a whole
  block of pairs at once (numpy), which is what the operators call per micro-batch.

>>> from penumbra.timestamps import Histogram
>>> phi1 = Histogram([0, 20, 30, 40], [0.1, 0.3, 0.6])
>>> phi2 = Histogram([0, 10, 20, 30, 40], [0.15, 0.3, 0.4, 0.15])
>>> H2, H3 = Histogram.from_template(phi2, 110), Histogram.from_template(phi1, 210)
>>> round(p_geq(H3, H2, -90), 3), round(p_geq(H3, H2, -100), 3)       # Example 4
(0.925, 0.769)
>>> round(stime(H3, H2, 0.8), 2)
208.59
"""

from __future__ import annotations


import numpy as np

from .timestamps import Histogram, HistogramBlock

__all__ = [
    "ROUNDING", "adjusted_histograms", "ge", "meets", "offset", "p_deadline", "p_delay", "p_geq", "p_geq_block",
    "p_within", "p_within_block", "stime", "stime_block", "stime_table",
]

#: How far below a threshold a computed probability may fall and still meet it. The
#: operators' probabilities are exact to rounding (a few units in the last place), so a
#: probability that equals its threshold exactly (0.1 against ``THRESHOLD 0.1``) meets it
#: whatever its last bit, and every method and strategy keeps the same matches.
ROUNDING = 1e-12


def meets(prob, threshold):
    """Whether ``prob`` (a number or an array) reaches ``threshold``, to rounding."""
    return prob >= threshold - ROUNDING


def offset(x, y, d):
    """``x - y + d`` (numbers or arrays) rounded once: the difference and the sum are kept
    with their rounding errors (Knuth's TwoSum) and added back, so a window added to the
    difference of two times far apart keeps what ``(x - y) + d`` would round away (a time
    1,000 s from its partner's against a window of 1,000 s: steps of 1.1e-13, not of the
    window's bucket widths). Its sign is the exact sum's.

    >>> (1000.3 - 0.3) - 1000.0, float(offset(1000.3, 0.3, -1000.0))    # exactly -4.5463632858400...e-14
    (0.0, -4.546363285840016e-14)
    """
    x, y, d = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64), np.asarray(d, dtype=np.float64)
    s = x - y
    back = s - x
    first = (x - (s - back)) + (-y - back)
    t = s + d
    back = t - s
    second = (s - (t - back)) + (d - back)
    return t + (first + second)


def adjusted_histograms(h_i: Histogram, h_j: Histogram) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Definition 3: the merged time points ``t_1 < ... < t_{l+1}`` of both histograms and
    the probabilities ``P(X_i in I_u)``, ``P(X_j in I_u)`` of each merged interval ``I_u``.

    Both edge lists are sorted, so the merge is linear (a stable sort of two sorted runs).
    """
    points = np.sort(np.concatenate((h_i.edges, h_j.edges)), kind="stable")
    points = points[np.concatenate(([True], np.diff(points) > 0))]
    return points, np.diff(h_i.cdf(points)), np.diff(h_j.cdf(points))


def ge(h_i: Histogram, h_j: Histogram) -> float:
    """``ge(H_i, H_j) = P(X_i >= X_j)`` by Theorem 1 (Eq. 3)::

        sum_u sum_{v<u} p~_iu p~_jv  +  1/2 sum_u p~_iu p~_ju

    over the adjusted histograms; ``O(n + m)``.
    """
    _, p_i, p_j = adjusted_histograms(h_i, h_j)
    below_j = np.cumsum(p_j) - p_j
    value = float(np.dot(p_i, below_j) + 0.5 * np.dot(p_i, p_j))
    return min(1.0, max(0.0, value))


def p_geq(h_i: Histogram, h_j: Histogram, d: float = 0.0) -> float:
    """``P(X_i + d >= X_j)`` exactly: Theorem 1's value, computed by :func:`p_geq_block` on
    the differences of the edges with ``d`` added to them (:func:`offset`), so neither epoch
    seconds nor a ``d`` below the edges' spacing is rounded away (``ge(H_i + d, H_j)`` would
    add ``d`` to every edge). 1 and 0 where the supports' mass alone decides."""
    support_i, support_j = _support(h_i), _support(h_j)
    if offset(support_i[0], support_j[1], d) >= 0:
        return 1.0
    if offset(support_i[1], support_j[0], d) <= 0:
        return 0.0
    return float(p_geq_block(HistogramBlock.from_histograms([h_i]), HistogramBlock.from_histograms([h_j]), d)[0])


def _support(h: Histogram) -> tuple[float, float]:
    """Where ``h``'s mass lies: its edges but for zero-probability buckets at either end."""
    mass = np.flatnonzero(h.probs > 0)
    return float(h.edges[mass[0]]), float(h.edges[mass[-1] + 1])


def p_within(h_i: Histogram, h_j: Histogram, d: float) -> float:
    """``P(|X_i - X_j| <= d)`` exactly, for every ``d >= 0``.

    ``P(-d <= X_i - X_j <= d) = P(X_i + d >= X_j) - P(X_i - d > X_j)``; the difference
    is continuous, so ``>`` and ``>=`` give the same probability.
    """
    if d < 0:
        raise ValueError(f"the window d must be >= 0, got {d!r}")
    return max(0.0, p_geq(h_i, h_j, d) - p_geq(h_i, h_j, -d))


def p_deadline(h_1: Histogram, h_2: Histogram, d: float) -> float:
    """The interval paper's deadline predicate ``c: I1 + d >= I2`` (its Theorem 1), ``d >= 0``."""
    return p_geq(h_1, h_2, d)


def p_delay(h_1: Histogram, h_2: Histogram, d: float) -> float:
    """The delay predicate: the corresponding event comes at least ``d`` after the
    triggering one, ``P(X_2 >= X_1 + d)``."""
    return p_geq(h_2, h_1, -d)


def stime(h_i: Histogram, h_j: Histogram, delta: float, *, earliest: bool = False) -> float:
    """The satisfaction time ``T`` of Definition 8: ``P(H_i + max(H_j) - T >= H_j) = delta``.

    With ``g(x) = P(H_i - x >= H_j)`` (non-increasing in ``x``), ``T = x* + max(H_j)`` where
    ``x*`` is the largest ``x`` with ``g(x) >= delta``; with ``earliest=True`` it is the
    smallest ``x`` with ``g(x) <= delta`` instead. The two differ only where ``g`` is flat at
    ``delta`` (zero-probability buckets): Theorem 2's inequality 8 needs the latest time and
    inequality 9 (used with ``1 - delta``) the earliest, for both to stay exact there.
    See :func:`stime_block` for the method.
    """
    return float(stime_block(HistogramBlock.from_histograms([h_i]), HistogramBlock.from_histograms([h_j]),
                             delta, earliest=earliest)[0])


def stime_table(templates_i: list[Histogram], templates_j: list[Histogram], delta: float,
                *, earliest: bool = False) -> np.ndarray:
    """``stime(phi_u, phi_v, delta)`` for every template pair, as a (len_i, len_j) table
    (computed once per query and threshold)."""
    rows = np.repeat(np.arange(len(templates_i)), len(templates_j))
    cols = np.tile(np.arange(len(templates_j)), len(templates_i))
    times = stime_block(HistogramBlock.from_histograms(templates_i).take(rows),
                        HistogramBlock.from_histograms(templates_j).take(cols), delta, earliest=earliest)
    return times.reshape(len(templates_i), len(templates_j))


def stime_block(a: HistogramBlock, b: HistogramBlock, delta: float, *, earliest: bool = False) -> np.ndarray:
    """:func:`stime` for every pair of columns of two blocks at once.

    ``g(x) = P(H_a - x >= H_b)`` is quadratic between the configuration changes
    ``x = e_ak - e_bl`` (an edge of ``H_a - x`` meets one of ``H_b``). A binary search over
    the sorted changes, in lockstep for all pairs, finds each pair's bounding configuration;
    three exact evaluations of ``g`` there give its quadratic, which is then solved.
    """
    if not (0 <= delta < 1 if earliest else 0 < delta <= 1):
        raise ValueError(f"delta must be in {'[0, 1)' if earliest else '(0, 1]'}, got {delta!r}")
    pairs = max(len(a), len(b))
    a_edges = np.broadcast_to(a.edges, (a.edges.shape[0], pairs))
    b_edges = np.broadcast_to(b.edges, (b.edges.shape[0], pairs))
    breaks = np.sort((a_edges[:, None, :] - b_edges[None, :, :]).reshape(-1, pairs), axis=0)
    rows = np.arange(pairs)

    def g(x: np.ndarray) -> np.ndarray:
        return p_geq_block(a, b, -x)

    # g(breaks[0]) = 1 and g(breaks[-1]) = 0: keep lo before the crossing, hi after it. A
    # value within rounding of delta reaches it (as :func:`meets` decides a pair): where g is
    # flat at delta, its computed value may fall a rounding below or above, and the latest
    # (earliest) time must still be the end (start) of the flat part, not a breakpoint before
    lo = np.zeros(pairs, dtype=np.intp)
    hi = np.full(pairs, breaks.shape[0] - 1, dtype=np.intp)
    while np.any(hi - lo > 1):
        mid = (lo + hi) // 2
        value = g(breaks[mid, rows])
        before = value > delta + ROUNDING if earliest else value >= delta - ROUNDING
        lo = np.where(before, mid, lo)
        hi = np.where(before, hi, mid)
    x0, x1 = breaks[lo, rows], breaks[hi, rows]
    g0, g1, gm = g(x0), g(x1), g(0.5 * (x0 + x1))
    # g(x0 + s (x1 - x0)) = qa s^2 + qb s + g0 on s in [0, 1].
    qa = 2.0 * (g1 + g0 - 2.0 * gm)
    qb = g1 - g0 - qa
    s = _unit_roots(qa, qb, g0 - delta)
    # a crossing at a breakpoint is the breakpoint itself (near a tangent, the root formula
    # would move it by the square root of a rounding)
    s = np.where(g0 <= delta + ROUNDING, 0.0, np.where(g1 >= delta - ROUNDING, 1.0, s))
    x = x0 + s * (x1 - x0)
    # the root checked a few float steps either side: where buckets are narrower than the
    # breakpoints' rounding, two configuration changes may round to one order or place, and
    # g is not one quadratic between them; such a pair is bisected on g itself
    step = 4.0 * np.spacing(np.abs(x))
    before, after = g(x - step), g(x + step)
    wrong = np.flatnonzero((before < delta - _ROOT_CHECK) | (after > delta + _ROOT_CHECK))
    if len(wrong):
        x[wrong] = _bisected(a, b, wrong, breaks[0, wrong], breaks[-1, wrong], delta, earliest)
    return x + b_edges[-1]


#: How far from delta the probability a few float steps either side of a satisfaction
#: time may be before the time is found again by bisection.
_ROOT_CHECK = 1e-11


def _bisected(a: HistogramBlock, b: HistogramBlock, rows: np.ndarray, lo: np.ndarray, hi: np.ndarray,
              delta: float, earliest: bool) -> np.ndarray:
    """:func:`stime_block`'s ``x`` for ``rows`` by bisection on ``g`` between ``lo`` (where
    ``g`` is 1) and ``hi`` (0): the latest ``x`` with ``g >= delta`` (the earliest with
    ``g <= delta``), to rounding, in at most 200 halvings."""
    pick = lambda h: h if len(h) == 1 else h.take(rows)  # noqa: E731 - a block of one pairs with all
    a, b = pick(a), pick(b)
    lo, hi = lo.astype(np.float64), hi.astype(np.float64)
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if not np.any((mid != lo) & (mid != hi)):
            break
        value = p_geq_block(a, b, -mid)
        before = value > delta + ROUNDING if earliest else value >= delta - ROUNDING
        lo, hi = np.where(before, mid, lo), np.where(before, hi, mid)
    return hi if earliest else lo


def _unit_roots(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """For each quadratic ``a s^2 + b s + c`` that goes from ``c >= 0`` at 0 to ``<= 0`` at 1,
    its root in [0, 1] (the numerically stable formula, the better of the two roots)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        linear = -c / b
        q = -0.5 * (b + np.copysign(np.sqrt(np.maximum(b * b - 4.0 * a * c, 0.0)), b))
        candidates = np.stack([np.where(np.abs(a) > 1e-14 * (np.abs(b) + np.abs(c)), q / a, linear),
                               c / q, linear])
    candidates = np.where(np.isfinite(candidates), np.clip(candidates, 0.0, 1.0), 0.5)
    residual = np.abs((a * candidates + b) * candidates + c)
    return candidates[np.argmin(residual, axis=0), np.arange(candidates.shape[1])]


# --- blocks of pairs ------------------------------------------------------------------

#: Pairs per chunk: keeps the (m+1, n+1, chunk) temporaries in the second-level cache.
_CHUNK = 2048


def p_geq_block(a: HistogramBlock, b: HistogramBlock, d=0.0) -> np.ndarray:
    """``P(X_a[r] + d >= X_b[r])`` for every pair ``r`` (a block of one histogram pairs
    with all; ``d`` is a scalar or one value per pair).

    For piecewise-uniform densities, with ``y_k = e_a[k] + d``::

        P = sum_u dens_au (Phi_b(y_{u+1}) - Phi_b(y_u)) = sum_k (dens_a[k-1] - dens_a[k]) Phi_b(y_k)
        Phi_b(y) = int F_b up to y = sum_v 1/2 dens_bv min(relu(y - e_bv), w_bv)^2 + p_bv relu(y - e_b[v+1])

    the same value as Theorem 1, for a whole block of pairs in a few array operations
    (each term is bounded by ``p_bv w_bv``). The edges' differences ``e_ak - e_bv`` are
    taken before ``d`` is added (exact for times close together), so ``d`` is added near 0
    rather than to, say, epoch seconds, where a float's spacing is 2.4e-7. The sum over
    ``k`` cancels where a bucket of ``a`` is narrow beside the distances (its density
    jumps are large, ``Phi_b`` is known to the distances' rounding): a pair whose jumps
    times its largest distance exceed :data:`_CANCELLING` is weighed bucket by bucket
    instead (:func:`_p_geq_buckets`, exact to rounding whatever the widths). A pair whose
    supports' mass alone decides (``min + d >= max`` of the other, or ``max + d <= min``)
    is 1 or 0 exactly.
    """
    rows = max(len(a), len(b), np.size(d))
    shift = np.broadcast_to(np.asarray(d, dtype=np.float64).reshape(-1), (rows,))
    out = np.empty(rows)
    # the kernel's sums come to 1 and 0 where the edges decide; only a histogram whose mass
    # is narrower than its edges needs its support's decision (rarely: such blocks are few)
    supports = a.derived("narrower") or b.derived("narrower")
    # whether any pair may cancel: the largest jumps against the block's largest distance
    reach = max(abs(float(a.hi.max()) - float(b.lo.min())), abs(float(b.hi.max()) - float(a.lo.min())))
    cancels = float(a.derived("jump_mass").max()) * (reach + float(np.abs(shift).max(initial=0.0))) > _CANCELLING
    for start in range(0, rows, _CHUNK):
        stop = min(start + _CHUNK, rows)
        a_edges, a_jumps = a.columns(start, stop, "edges", "density_jumps")
        b_edges, b_widths, b_probs, b_half_dens = b.columns(start, stop, "edges", "widths", "probs", "half_density")
        d_chunk = shift[start:stop]
        ramps = a_edges[None, :, :] - b_edges[:, None, :]
        ramps += d_chunk
        np.maximum(ramps, 0.0, out=ramps)
        inside = np.minimum(ramps[:-1], b_widths[:, None, :])
        inside *= inside
        inside *= b_half_dens[:, None, :]
        beyond = ramps[1:]
        beyond *= b_probs[:, None, :]
        inside += beyond
        phi = inside.sum(axis=0)
        value = np.einsum("kr,kr->r", a_jumps, phi)
        # the sum's rounding is about 2**-53 of the jumps times the largest distance or d
        # (the differences of the edges are rounded before d is added)
        cancelling = ()
        if cancels:
            (a_mass,) = a.columns(start, stop, "jump_mass")
            far = np.maximum(np.abs(a_edges[-1] - b_edges[0]), np.abs(a_edges[0] - b_edges[-1])) + np.abs(d_chunk)
            cancelling = np.flatnonzero(a_mass[0] * far > _CANCELLING)
        if len(cancelling):
            rows_a = a_edges[:, cancelling], a.columns(start, stop, "probs")[0][:, cancelling]
            rows_b = b_edges[:, cancelling], b_probs[:, cancelling]
            value[cancelling] = _p_geq_buckets(*rows_a, *rows_b, d_chunk[cancelling])
        if supports:
            (a_lo, a_hi), (b_lo, b_hi) = (h.columns(start, stop, "support_lo", "support_hi") for h in (a, b))
            value[offset(a_lo[0], b_hi[0], d_chunk) >= 0] = 1.0
            value[offset(a_hi[0], b_lo[0], d_chunk) <= 0] = 0.0
        out[start:stop] = value
    np.clip(out, 0.0, 1.0, out=out)
    return out


#: Where :func:`p_geq_block`'s sum over edges would lose more than about 2**-36 (1.5e-11)
#: to cancellation: the jumps' absolute sum times the largest distance, beyond 2**16 (a
#: uniform interval narrower than 1/32,768 of the distances), goes bucket by bucket.
_CANCELLING = 2.0 ** 16


def _p_geq_buckets(a_edges: np.ndarray, a_probs: np.ndarray, b_edges: np.ndarray, b_probs: np.ndarray,
                   d: np.ndarray) -> np.ndarray:
    """``P(X_a + d >= X_b)`` per pair (columns), as ``sum_u p_au E[F_b(X_a + d) | bucket u]``:
    each conditional mean over bucket ``u`` of ``a`` taken per bucket ``v`` of ``b`` from
    the shares of ``u`` below, along and above ``v``'s ramp (each known to the distances'
    rounding, their sum 1 exactly) and the ramp's value at the middle of its share. Nothing
    is divided by a difference of distances, so a bucket narrower than their rounding keeps
    its weight exact (the whole of it along one piece of ``F_b``: the value there). Each
    ``e_au - e_bv + d`` is rounded once (:func:`offset`), so buckets narrower than the
    rounding of the edges' distances keep their place against each other."""
    w_a = np.diff(a_edges, axis=0)[None, :, :]                     # (1, Ka, r)
    w_b = np.diff(b_edges, axis=0)[:, None, :]                     # (Kb, 1, r)
    start = offset(a_edges[None, :-1, :], b_edges[:-1, None, :], d)    # e_au - e_bv + d
    end = start + w_a
    with np.errstate(divide="ignore", invalid="ignore"):
        below = np.where(w_a > 0, np.clip(-start, 0.0, w_a) / w_a, 0.0)
        above = np.where(w_a > 0, np.clip(end - w_b, 0.0, w_a) / w_a, 0.0)
        along = np.maximum(1.0 - below - above, 0.0)
        middle = np.where(w_b > 0, (np.minimum(end, w_b) + np.maximum(start, 0.0)) / (2.0 * w_b), 1.0)
    mean = above + along * np.clip(middle, 0.0, 1.0)
    out = np.einsum("ur,vr,vur->r", a_probs, b_probs, mean)
    return np.clip(out, 0.0, 1.0)


def p_within_block(a: HistogramBlock, b: HistogramBlock, d) -> np.ndarray:
    """``P(|X_a[r] - X_b[r]| <= d)`` for every row ``r``, exact for every ``d >= 0``."""
    if np.any(np.asarray(d) < 0):
        raise ValueError("the window d must be >= 0")
    out = p_geq_block(a, b, d) - p_geq_block(a, b, np.negative(d))
    np.maximum(out, 0.0, out=out)
    return out

