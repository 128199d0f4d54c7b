"""Valid intervals and the Next Event's Latest Time.

* valid lower bound (vlb), revised upper bound (rub) and valid upper bound (vub) of the
  events of a (partial) match, section 4.1: ``e.vlb = max(e_{m_j}.vlb + 1, e.lower)``
  forwards, ``e_{m_j}.rub = min(e_{m_{j+1}}.rub - 1, e_{m_j}.upper)`` backwards, and the
  window pass from ``T_m = e_{m_1}.rub + W - 1`` (:func:`close_window`).
* for runs that bind any subset of the components (section 4.2, C.2), bounds propagate
  across unbound components by their count: ``t_k >= t_j + (k - j)``.
* NELT (section 3, B.3): among the events that could match ``E_{j+1}`` and start after
  ``e_{m_j}`` ends, the smallest upper bound; no point after it can be next to ``e_{m_j}``.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

from .model import CompiledPattern, GridEvent

__all__ = ["close_window", "next_event_latest_time", "run_bounds"]


def close_window(vlb: Sequence[int], vub: Sequence[int], window: int) -> tuple[int, ...] | None:
    """The third pass of section 4.1 on a complete match: ``e_{m_l}.vub = min(rub, T_m)``
    and backwards ``e_{m_j}.vub = min(e_{m_{j+1}}.vub - 1, e_{m_j}.rub)``; ``None`` if an
    interval empties (the match is pruned)."""
    bounds = list(vub)
    bound = bounds[-1] = min(bounds[-1], bounds[0] + window - 1)
    if bound < vlb[-1]:
        return None
    for k in range(len(bounds) - 2, -1, -1):
        bound = bounds[k] = min(bounds[k], bound - 1)
        if bound < vlb[k]:
            return None
    return tuple(bounds)


def run_bounds(bound: Mapping[int, GridEvent], window: int
               ) -> tuple[dict[int, int], dict[int, int]] | None:
    """vlb and vub of the events of a run binding the components in ``bound`` (C.2),
    or ``None`` if an interval empties or the run's two ends cannot fit in the window."""
    order = sorted(bound)
    vlb: dict[int, int] = {}
    vub: dict[int, int] = {}
    previous = None
    for k in order:
        lo = bound[k].lo
        vlb[k] = lo if previous is None else max(lo, vlb[previous] + k - previous)
        previous = k
    following = None
    for k in reversed(order):
        hi = bound[k].hi
        vub[k] = hi if following is None else min(hi, vub[following] - (following - k))
        if vub[k] < vlb[k]:
            return None
        following = k
    first, last = order[0], order[-1]
    if vlb[last] - vub[first] >= window:
        return None
    return vlb, vub


def next_event_latest_time(pattern: CompiledPattern, candidates: Sequence[GridEvent],
                           bound: Mapping[int, GridEvent], j: int) -> float:
    """NELT of ``bound[j]``: the least ``upper`` of the ``candidates`` for ``E_{j+1}``
    (given the other bound components) that start after ``bound[j]`` ends."""
    end = bound[j].hi
    keys = {e.key for e in bound.values()}
    latest = math.inf
    for e in candidates:
        if e.lo > end and e.hi < latest and e.key not in keys and pattern.admits(bound, j + 1, e):
            latest = e.hi
    return latest
