"""Match confidence and time range (section 2.3, match collapsing), computed exactly.

Two computations, one per framework:

* :func:`chain_confidence` -- the event-based framework (Algorithm 2): a memoised
  dynamic programme over the points of the events' valid intervals. The state after
  component ``j`` is the matrix ``D[t_1, t_j]`` of the probability of all partial point
  matches starting at ``t_1`` and ending at ``t_j``, so the window ``t_l - t_1 < W`` is
  applied exactly at the end. For *skip till next match*, the step from ``t_{j-1}`` to
  ``t_j`` is weighted by ``P[Theta_j(m) = {}]`` (Eq. 3): each event that could match
  ``E_j`` must fall outside ``(t_{j-1}, t_j)``. An event that could match several
  components is conditioned on its point (Eq. 4).
* :func:`point_confidence` -- the point-based framework: ``C_any`` (Eq. 1) sums the
  point matches' probabilities; ``C_next`` (Eq. 2) multiplies each by
  ``P[Theta(m) = {}]``, memoising the factor of each gap (Algorithm 1).

Both return ``(confidence, first, last)``: the time range is the tightest ``[t_1, t_l]``
over point matches of positive probability, ``None`` when there is none.
"""

from __future__ import annotations

import itertools
from typing import Sequence

import numpy as np

from .model import GridEvent

__all__ = ["chain_confidence", "point_confidence"]

Gaps = Sequence[Sequence[GridEvent]]


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


def chain_confidence(events: Sequence[GridEvent], vlb: Sequence[int], vub: Sequence[int],
                     window: int, gaps: Gaps | None = None) -> tuple[float, int | None, int | None]:
    """Confidence and range of the signature ``events`` with valid intervals ``[vlb, vub]``.

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
