"""Match confidence and time range (section 2.3, match collapsing), computed exactly.

Two computations, one per framework:

* :func:`dynamic_programme` -- the event-based framework (Algorithm 2): a dynamic
  programme over the points of the events' valid intervals. The state after component
  ``j`` is the matrix ``D[t_1, t_j]`` of the probability of all partial point matches
  starting at ``t_1`` and ending at ``t_j``, so the window ``t_l - t_1 < W`` is applied
  exactly at the end. For *skip till next match*, the step from ``t_{j-1}`` to ``t_j`` is
  weighted by ``P[Theta_j(m) = {}]`` (Eq. 3): each event that could match ``E_j`` must
  fall outside ``(t_{j-1}, t_j)``. An event that could match several components is
  conditioned on its point (Eq. 4).
* :func:`point_confidence` -- the point-based framework: ``C_any`` (Eq. 1) sums the
  point matches' probabilities; ``C_next`` (Eq. 2) multiplies each by
  ``P[Theta(m) = {}]``, memoising the factor of each gap (Algorithm 1).

:func:`chain_confidence` is what the operator calls per match: the same numbers as the
dynamic programme, which it runs only on the few pieces of a match that need it, once
per shape (see its docstring); :func:`confidences` weighs a block of matches at once.

All return ``(confidence, first, last)``: the time range is the tightest ``[t_1, t_l]``
over point matches of positive probability, ``None`` when there is none.
"""

from __future__ import annotations

import functools
import itertools
from typing import Sequence

import numpy as np

from .model import Found, GridEvent

__all__ = ["chain_confidence", "confidences", "dynamic_programme", "memo_counters", "point_confidence"]

Gaps = Sequence[Sequence[GridEvent]]
#: Shapes the memo of :func:`chain_confidence` keeps (least recently used go first).
MEMO_SIZE = 1 << 15

#: A component as the sweeps see it: its valid interval and its pmf over it (``None``: uniform).
Member = tuple[int, int, tuple[float, ...] | None]
#: A weight with the first and last point of positive mass (``None`` without any).
Weighed = tuple[float, int | None, int | None]
#: Per gap, the excluders that can fall in it (``None``: none in any gap, as for skip till any match).
Excluders = list[tuple[GridEvent, ...]] | None


def chain_confidence(events: Sequence[GridEvent], vlb: Sequence[int], vub: Sequence[int],
                     window: int, gaps: Gaps | None = None) -> tuple[float, int | None, int | None]:
    """Confidence and range of the signature ``events`` with valid intervals ``[vlb, vub]``:
    Algorithm 2's sum over point matches, or with ``gaps`` (``S-bar`` of Algorithm 1: the
    events that could match component ``g + 1`` after the match's component ``g``) ``C_next``
    of Eq. 3; :func:`dynamic_programme`'s numbers, up to rounding, at a fraction of its cost.

    The chain of points ``t_1 < ... < t_l`` comes apart where two valid intervals are
    disjoint (``vub_j < vlb_{j+1}``) and no excluder can fall between them: there the order
    holds in every world, so the *pieces* on either side are independent but for the
    window. When every point match fits the window (``vub_l - vlb_1 < W``) the confidence
    is the product of the pieces' weights (for disjoint uniform events, of
    ``(vub_j - vlb_j + 1) / |UI_j|``); otherwise the first and last pieces are weighed
    together under the window and the pieces between multiply.

    A uniform event's ``1 / |UI|`` is a common factor, so its points weigh 1 and a piece of
    uniform events is a count of point matches: in closed form for two events, else by a
    sweep over the points, one component at a time -- the mass of the partial point matches
    by their last point, extended by a prefix sum (the order ``t_j < t_{j+1}``). Under the
    window, the first piece's mass by first point meets the last piece's by last point in
    one more prefix sum. Excluders between two points (Eq. 3) weigh a step by
    ``P[no excluder in (t_j, t_{j+1})]``, still prefix sums (see :func:`_step`). What the
    sweeps do not cover -- a pmf with zeros inside, the window within one piece -- is a
    *shape*: positions relative to its first point, the pmf of each event that has one, the
    excluders. A shape is weighed by the dynamic programme once and remembered
    (:data:`MEMO_SIZE` shapes, the least recently used dropped first). An excluder that could
    fall in two gaps (Eq. 4) sends the match to the dynamic programme.
    """
    length = len(events)
    excluders = None
    if gaps:
        excluders = _gap_excluders(vlb, vub, gaps)
        if excluders is None:
            return dynamic_programme(events, vlb, vub, window, gaps)
        if not any(excluders):
            excluders = None
    if excluders is None and vub[-1] - vlb[0] < window:
        confidence = 1.0
        for j, event in enumerate(events):
            if not event.uniform or (j and vub[j - 1] >= vlb[j]):
                break
            confidence *= (vub[j] - vlb[j] + 1) / (event.hi - event.lo + 1)
        else:
            return confidence, vlb[0], vub[-1]
    scale = 1.0
    members: list[Member] = []
    for event, lo, hi in zip(events, vlb, vub):
        if event.uniform:
            scale /= event.hi - event.lo + 1
            members.append((lo, hi, None))
        else:
            members.append((lo, hi, tuple(event.probs[lo - event.lo: hi - event.lo + 1].tolist())))
    pieces = []
    start = 0
    for g in range(length - 1):
        if vub[g] < vlb[g + 1] and not (excluders and excluders[g]):
            pieces.append(range(start, g + 1))
            start = g + 1
    pieces.append(range(start, length))
    if length == 1 or vub[-1] - vlb[0] < window:
        weighed = [_weigh_piece(members, excluders, piece) for piece in pieces]
        first, last = weighed[0][1], weighed[-1][2]
    else:
        ends = _weigh_ends(members, excluders, pieces[0], pieces[-1], window)
        weighed = [ends] + [_weigh_piece(members, excluders, piece) for piece in pieces[1:-1]]
        first, last = ends[1], ends[2]
    confidence = scale
    for weight, _, _ in weighed:
        confidence *= weight
    if not confidence > 0:
        return 0.0, None, None
    return confidence, first, last


def _gap_excluders(vlb: Sequence[int], vub: Sequence[int], gaps: Gaps) -> list[tuple[GridEvent, ...]] | None:
    """Per gap, the excluders that can fall strictly between ``t_g`` and ``t_{g+1}``; ``None``
    when one of them could fall in two gaps (its point must then be conditioned on, Eq. 4)."""
    seen = set()
    out = []
    for g, candidates in enumerate(gaps):
        first, last = vlb[g], vub[g + 1]
        inside = tuple(e for e in candidates if e.hi > first and e.lo < last)
        for e in inside:
            if e.key in seen:
                return None
            seen.add(e.key)
        out.append(inside)
    return out


def _sweepable(members: list[Member], piece: range) -> bool:
    """No zero inside a pmf of the piece's events (the sweeps read a piece's range off its ends)."""
    return not any(members[j][2] is not None and 0.0 in members[j][2] for j in piece)


def _ramp_sum(low: int, high: int, cap: int) -> int:
    """``sum over integers x in [low, high] of min(max(x, 0), cap)``."""
    rising_low, rising_high = max(low, 1), min(high, cap)
    rising = (rising_low + rising_high) * (rising_high - rising_low + 1) // 2 if rising_high >= rising_low else 0
    return rising + cap * max(0, high - max(low, cap + 1) + 1)


def _weigh_piece(members: list[Member], excluders: Excluders, piece: range) -> Weighed:
    """The weight of a piece (its points in order) with its first and last point."""
    if len(piece) == 1:
        lo, hi, weights = members[piece[0]]
        if weights is None:
            return float(hi - lo + 1), lo, hi
        positive = [k for k, w in enumerate(weights) if w > 0]
        if not positive:
            return 0.0, None, None
        return sum(weights), lo + positive[0], lo + positive[-1]
    if not _sweepable(members, piece):
        return _weigh_memoised(members, excluders, list(piece), None)
    first_lo, first_hi, first_weights = members[piece[0]]
    last_lo, last_hi, last_weights = members[piece[-1]]
    between = _between(excluders, piece)
    if not any(between):
        if len(piece) == 2 and first_weights is None and last_weights is None:
            # t_2 in [vlb_2, vub_2] after each t_1: min(vub_2 - t_1, |[vlb_2, vub_2]|) choices
            return float(_ramp_sum(last_hi - first_hi, last_hi - first_lo, last_hi - last_lo + 1)), first_lo, last_hi
        mass, _ = _sweep_forward(members, piece, between)
        return sum(mass), first_lo, last_hi
    ends, end_lo = _sweep_forward(members, piece, between)
    if not _may_empty(members, piece, between):
        return sum(ends), first_lo, last_hi
    # an excluder certain to fall between two points empties them: the range is read off the masses
    starts, start_lo = _sweep_backward(members, piece, between)
    first, last = _positive(starts), _positive(ends[::-1])
    if first is None:
        return 0.0, None, None
    return sum(ends), start_lo + first, end_lo + len(ends) - 1 - last


def _may_empty(members: list[Member], piece: range, between: list[tuple[Member, ...]]) -> bool:
    """Whether an excluder can be certain to fall between two points of the piece: all of
    its mass after the earliest point before the gap and before the latest point after it."""
    for left, right, excluders in zip(piece, piece[1:], between):
        earliest, latest = members[left][0], members[right][1]
        for e_lo, _, weights in excluders:
            positive = [k for k, w in enumerate(weights) if w > 0]
            if positive and e_lo + positive[0] > earliest and e_lo + positive[-1] < latest:
                return True
    return False


def _positive(mass: list[float]) -> int | None:
    return next((k for k, m in enumerate(mass) if m > 0), None)


def _between(excluders: Excluders, piece: Sequence[int]) -> list[tuple[Member, ...]]:
    """The excluders in each gap of a piece, as the sweeps read them: support and pmf."""
    return [tuple((e.lo, e.hi, tuple(e.probs.tolist())) for e in excluders[g]) if excluders else ()
            for g in piece[:-1]]


def _weigh_ends(members: list[Member], excluders: Excluders, head: range, tail: range, window: int) -> Weighed:
    """The first piece and the last weighed together under the window ``t_l - t_1 < W``:
    ``sum over t_1 of F(t_1) * (sum over t_l <= t_1 + W - 1 of L(t_l))``, with ``F`` the first
    piece's mass by first point and ``L`` the last piece's by last point."""
    if head == tail or not _sweepable(members, head) or not _sweepable(members, tail):
        joined = list(head) if head == tail else [*head, *tail]
        return _weigh_memoised(members, excluders, joined, window)
    if len(head) == 1 and len(tail) == 1 and members[head[0]][2] is None and members[tail[0]][2] is None:
        first_lo, first_hi, _ = members[head[0]]
        last_lo, last_hi, _ = members[tail[0]]
        # t_l in [vlb_l, min(vub_l, t_1 + W - 1)] after each t_1
        count = _ramp_sum(first_lo + window - last_lo, first_hi + window - last_lo, last_hi - last_lo + 1)
        if not count:
            return 0.0, None, None
        return float(count), max(first_lo, last_lo - window + 1), min(last_hi, first_hi + window - 1)
    starts, start_lo = _sweep_backward(members, head, _between(excluders, head))
    ends, end_lo = _sweep_forward(members, tail, _between(excluders, tail))
    before = list(itertools.accumulate(ends, initial=0.0))
    reach = window + start_lo - end_lo
    count = len(ends)
    total = 0.0
    first = latest_start = None
    for k, mass in enumerate(starts):
        within = before[min(max(reach + k, 0), count)]
        if mass > 0 and within > 0:
            total += mass * within
            first = start_lo + k if first is None else first
            latest_start = start_lo + k
    if first is None:
        return 0.0, None, None
    reachable = ends[: latest_start + window - end_lo]
    return total, first, end_lo + max(k for k, mass in enumerate(reachable) if mass > 0)


def _sweep_forward(members: list[Member], piece: Sequence[int], between: list[tuple[Member, ...]]
                   ) -> tuple[list[float], int]:
    """Mass of the piece's point matches by their last point, and that point's first instant:
    ``m_{j+1}(u) = p_{j+1}(u) * sum over t < u of m_j(t) * P[no excluder in (t, u)]``
    (Algorithm 2, the start points summed; Eq. 3), ``between[k]`` the excluders between the
    piece's ``k``-th point and the next (each can fall in that gap only)."""
    lo, hi, weights = members[piece[0]]
    mass = [1.0] * (hi - lo + 1) if weights is None else list(weights)
    for j, excluders in zip(piece[1:], between):
        following_lo, following_hi, weights = members[j]
        instants = range(following_lo, following_hi + 1)
        mass = _step(mass, lo, instants, excluders)
        if weights is not None:
            mass = [m * w for m, w in zip(mass, weights)]
        lo = following_lo
    return mass, lo


def _step(mass: list[float], lo: int, instants: range, excluders: tuple[Member, ...]) -> list[float]:
    """``sum over t < u of mass(t) * prod over excluders e of P[e not in (t, u)]`` for each
    ``u`` of ``instants``, ``mass`` given from ``lo``. An excluder avoids ``(t, u)`` when it
    falls at or before ``t`` or at or after ``u``: ``A_e(t) + B_e(u)``. The product over the
    excluders, expanded by which fall before and which after, is a sum of terms
    ``prod A_e(t) * prod B_e(u)``, each one prefix sum over ``t``."""
    count = len(mass)
    if not excluders:
        before = list(itertools.accumulate(mass, initial=0.0))
        return [before[min(max(u - lo, 0), count)] for u in instants]
    at_or_before, at_or_after = [], []
    for e_lo, e_hi, weights in excluders:
        below = list(itertools.accumulate(weights))
        above = list(itertools.accumulate(weights[::-1]))[::-1]
        at_or_before.append([below[min(t - e_lo, len(below) - 1)] if t >= e_lo else 0.0
                             for t in range(lo, lo + count)])
        at_or_after.append([above[max(u - e_lo, 0)] if u <= e_hi else 0.0 for u in instants])
    reach = [min(max(u - lo, 0), count) for u in instants]
    total = [0.0] * len(instants)
    for falls_before in itertools.product((True, False), repeat=len(excluders)):
        weighted = mass
        for factors, before in zip(at_or_before, falls_before):
            if before:
                weighted = [m * a for m, a in zip(weighted, factors)]
        prefix = list(itertools.accumulate(weighted, initial=0.0))
        terms = [prefix[k] for k in reach]
        for factors, before in zip(at_or_after, falls_before):
            if not before:
                terms = [t * b for t, b in zip(terms, factors)]
        total = [x + t for x, t in zip(total, terms)]
    return total


def _sweep_backward(members: list[Member], piece: Sequence[int], between: list[tuple[Member, ...]]
                    ) -> tuple[list[float], int]:
    """Mass of the piece's point matches by their first point, and that point's first instant:
    the forward sweep of the mirrored piece (``t -> -t``, components and gaps in reverse order)."""
    def mirror(lo: int, hi: int, weights: tuple[float, ...] | None) -> Member:
        return -hi, -lo, None if weights is None else weights[::-1]

    mirrored = [mirror(*members[j]) for j in reversed(piece)]
    gaps = [tuple(mirror(*e) for e in excluders) for excluders in reversed(between)]
    mass, lo = _sweep_forward(mirrored, range(len(mirrored)), gaps)
    return mass[::-1], -(lo + len(mass) - 1)


def _weigh_memoised(members: list[Member], excluders: Excluders, piece: list[int],
                    window: int | None) -> Weighed:
    """The weight and range of the components ``piece`` (consecutive, but for one jump from
    the first piece to the last) by their shape, looked up or weighed by the dynamic programme."""
    base = members[piece[0]][0]
    shape = tuple((lo - base, hi - base, weights) for lo, hi, weights in (members[j] for j in piece))
    between = tuple(_excluder_shape(excluders[j], base) if excluders and following == j + 1 else ()
                    for j, following in zip(piece, piece[1:]))
    weight, first, last = _weigh_shape(shape, between, window)
    if first is None:
        return 0.0, None, None
    return weight, first + base, last + base


def _excluder_shape(excluders: tuple[GridEvent, ...], base: int) -> tuple:
    return tuple(sorted(((e.lo - base, e.hi - base, None if e.uniform else tuple(e.probs.tolist()))
                         for e in excluders), key=lambda item: item[:2]))


@functools.lru_cache(maxsize=MEMO_SIZE)
def _weigh_shape(shape: tuple, between: tuple, window: int | None) -> Weighed:
    """:func:`dynamic_programme` on a shape: events of weights 1 (uniform) or their pmf over
    their valid interval, and per gap its excluders with their own pmf."""
    events = [GridEvent("", str(j), {}, lo, hi, np.ones(hi - lo + 1) if weights is None else np.array(weights))
              for j, (lo, hi, weights) in enumerate(shape)]
    gaps = [[GridEvent("excluder", f"{g}.{k}", {}, lo, hi, None if weights is None else np.array(weights))
             for k, (lo, hi, weights) in enumerate(excluders)] for g, excluders in enumerate(between)]
    reach = shape[-1][1] - shape[0][0] + 1 if window is None else window
    return dynamic_programme(events, [lo for lo, _, _ in shape], [hi for _, hi, _ in shape], reach, gaps)


def memo_counters() -> dict[str, int]:
    """Lookups of the shape memo of :func:`chain_confidence` that hit and missed, and its size."""
    info = _weigh_shape.cache_info()
    return {"confidence_memo_hits": info.hits, "confidence_memo_misses": info.misses,
            "confidence_memo_shapes": info.currsize}


def confidences(found: Sequence[Found], window: int, gaps: Sequence[Gaps | None] | None = None
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Confidence, first and last point of every match of a block: ``C_any``/``C_next`` of the
    point matches when the engine found them (point-based framework), else
    :func:`chain_confidence`; ``gaps[i]`` are match ``i``'s excluders (skip till next match).
    The range of a match of confidence 0 reads ``(0, 0)``."""
    count = len(found)
    confidence = np.zeros(count)
    ends = np.zeros((2, count), dtype=np.int64)
    for i, match in enumerate(found):
        excluders = gaps[i] if gaps is not None else None
        if match.points is not None:
            value, first, last = point_confidence(match.events, match.points, excluders)
        else:
            value, first, last = chain_confidence(match.events, match.vlb, match.vub, window, excluders)
        if value > 0:
            confidence[i], ends[0, i], ends[1, i] = value, first, last
    return confidence, ends[0], ends[1]


def _at_or_before(event: GridEvent, t: np.ndarray) -> np.ndarray:
    """``P[event occurs at or before t]``, exactly 0 where no mass lies at or before ``t``."""
    cumulative = np.cumsum(event.probs)
    index = t - event.lo
    return np.where(index < 0, 0.0, cumulative[np.clip(index, 0, len(cumulative) - 1)])


def _at_or_after(event: GridEvent, t: np.ndarray) -> np.ndarray:
    """``P[event occurs at or after t]``, exactly 0 where no mass lies at or after ``t``."""
    survival = np.cumsum(event.probs[::-1])[::-1]
    index = t - event.lo
    return np.where(index >= len(survival), 0.0, survival[np.clip(index, 0, len(survival) - 1)])


def dynamic_programme(events: Sequence[GridEvent], vlb: Sequence[int], vub: Sequence[int],
                      window: int, gaps: Gaps | None = None) -> tuple[float, int | None, int | None]:
    """Confidence and range of the signature ``events`` with valid intervals ``[vlb, vub]``,
    over every point of every valid interval at once (Algorithm 2; Eq. 3 and 4 with ``gaps``).

    ``gaps[g]`` lists the events (not in the signature) that could match component
    ``g + 1`` after the match's component ``g`` (``S-bar`` of Algorithm 1); ``None`` for
    *skip till any match*.
    """
    instants = [np.arange(lo, hi + 1) for lo, hi in zip(vlb, vub)]
    probs = [e.probs[lo - e.lo: hi - e.lo + 1] for e, lo, hi in zip(events, vlb, vub)]
    factors: list[np.ndarray | None] = [None] * (len(events) - 1)
    conditioned: dict[tuple[str, str], tuple[GridEvent, list[int]]] = {}
    for g, candidates in enumerate(gaps or ()):
        first, last = vlb[g], vub[g + 1]
        for e in candidates:
            if e.hi <= first or e.lo >= last:
                continue  # cannot fall strictly between t_g and t_{g+1}
            conditioned.setdefault(e.key, (e, []))[1].append(g)
    for e, where in conditioned.values():
        if len(where) == 1:
            g = where[0]
            avoids = _at_or_before(e, instants[g])[:, None] + _at_or_after(e, instants[g + 1])[None, :]
            factors[g] = avoids if factors[g] is None else factors[g] * avoids
    several = [(e, where) for e, where in conditioned.values() if len(where) > 1]
    mass = np.zeros((len(instants[0]), len(instants[-1])))
    for weight, indicators in _conditionings(several, instants):
        steps = [f if i is None else (i if f is None else f * i) for f, i in zip(factors, indicators)]
        mass += weight * _forward(instants, probs, steps)
    mass *= (instants[-1][None, :] - instants[0][:, None]) < window
    total = float(mass.sum())
    if not total > 0:
        return 0.0, None, None
    starts = np.flatnonzero(mass.sum(axis=1) > 0)
    ends = np.flatnonzero(mass.sum(axis=0) > 0)
    return total, int(instants[0][starts[0]]), int(instants[-1][ends[-1]])


def _forward(instants: list[np.ndarray], probs: list[np.ndarray],
             steps: list[np.ndarray | None]) -> np.ndarray:
    """``D[t_1, t_l]``: Algorithm 2's recurrence, all start points at once.

    ``D'[t_1, t_{j+1}] = sum over t_j < t_{j+1} of D[t_1, t_j] * step[t_j, t_{j+1}] * p(t_{j+1})``;
    a step that only orders the points (``None``) is a prefix sum over ``t_j``."""
    mass = np.diag(probs[0])
    for j, (step, p) in enumerate(zip(steps, probs[1:])):
        before, after = instants[j], instants[j + 1]
        if step is None:
            prefix = np.concatenate((np.zeros((mass.shape[0], 1)), np.cumsum(mass, axis=1)), axis=1)
            mass = prefix[:, np.minimum(np.maximum(after - before[0], 0), len(before))] * p[None, :]
        else:
            order = before[:, None] < after[None, :]
            mass = (mass @ (step * order)) * p[None, :]
    return mass


def _conditionings(several, instants):
    """Eq. 4: for each joint point of the events that could match several components,
    its probability and the gap indicators ``[s not in (t_g, t_{g+1})]`` it imposes.

    Points outside every gap they could fall in are lumped into one outcome."""
    if not several:
        yield 1.0, [None] * (len(instants) - 1)
        return
    outcomes = []
    for e, where in several:
        inside = {}
        outside = 0.0
        for s, p in zip(range(e.lo, e.hi + 1), e.probs):
            if p == 0:
                continue
            if any(instants[g][0] < s < instants[g + 1][-1] for g in where):
                inside[s] = p
            else:
                outside += p
        options = [(p, s, where) for s, p in inside.items()]
        if outside > 0:
            options.append((outside, None, where))
        outcomes.append(options)
    for joint in itertools.product(*outcomes):
        weight = 1.0
        indicators: list[np.ndarray | None] = [None] * (len(instants) - 1)
        for p, s, where in joint:
            weight *= p
            if s is None:
                continue
            for g in where:
                avoids = ((instants[g][:, None] >= s) | (instants[g + 1][None, :] <= s)).astype(np.float64)
                indicators[g] = avoids if indicators[g] is None else indicators[g] * avoids
        yield weight, indicators


def point_confidence(events: Sequence[GridEvent], points: Sequence[tuple[int, ...]],
                     gaps: Gaps | None = None) -> tuple[float, int | None, int | None]:
    """``C_any`` (Eq. 1) or, with ``gaps``, ``C_next`` (Eq. 2) of the point matches ``points``.

    The factor ``P[no event of gaps[g] in (t_g, t_{g+1})]`` of events that could match one
    component only is memoised per gap (Algorithm 1); an event that could match several
    components must avoid all of its gaps at once, which is exact per point match (Eq. 4).
    """
    owners: dict[tuple[str, str], tuple[GridEvent, list[int]]] = {}
    for g, candidates in enumerate(gaps or ()):
        for e in candidates:
            owners.setdefault(e.key, (e, []))[1].append(g)
    single: list[list[GridEvent]] = [[] for _ in range(len(events) - 1)]
    several = []
    for e, where in owners.values():
        if len(where) == 1:
            single[where[0]].append(e)
        else:
            several.append((e, where))
    memo: dict[tuple[int, int, int], float] = {}

    def gap_factor(g: int, before: int, after: int) -> float:
        key = (g, before, after)
        if key not in memo:
            factor = 1.0
            for e in single[g]:
                factor *= _mass_outside(e, [(before, after)])
            memo[key] = factor
        return memo[key]

    total = 0.0
    first = last = None
    for times in points:
        p = 1.0
        for e, t in zip(events, times):
            p *= e.probs[t - e.lo]
        for g in range(len(events) - 1):
            p *= gap_factor(g, times[g], times[g + 1])
        for e, where in several:
            p *= _mass_outside(e, [(times[g], times[g + 1]) for g in where])
        if p > 0:
            total += p
            first = times[0] if first is None else min(first, times[0])
            last = times[-1] if last is None else max(last, times[-1])
    return total, first, last


def _mass_outside(event: GridEvent, gaps: list[tuple[int, int]]) -> float:
    """``P[event occurs in none of the open gaps (before, after)]``."""
    instants = np.arange(event.lo, event.hi + 1)
    inside = np.zeros(len(instants), dtype=bool)
    for before, after in gaps:
        inside |= (instants > before) & (instants < after)
    return float(event.probs[~inside].sum())
