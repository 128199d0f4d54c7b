"""Partitions of a max-time sorted partner buffer (PTJoin paper, section 3.1).

For an event ``a`` and a partner ``b`` (both histogram timestamps) the join condition is
``P(|X_a - X_b| <= d) >= delta``. Two kinds of partition decide pairs without computing it:

* threshold-free, per pair: ``b`` is *certain* (probability exactly 1, Eq. 6 per pair)
  when ``min(H_b) >= max(H_a) - d`` and ``max(H_b) <= min(H_a) + d``, and *void*
  (probability 0, the violation range) when ``max(H_b) <= min(H_a) - d`` or
  ``min(H_b) >= max(H_a) + d``;
* for template streams with ``d >= pi`` (Lemma 2), the satisfaction times of every
  template pair decide the rest in O(1) (Theorem 2, inequalities 8 and 9), and give the
  tight probing ranges LPR / RPR (Theorem 3) and buffer invalidation (Theorem 4).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..probability import offset, stime_table
from ..timestamps import Histogram

__all__ = ["TemplateTables", "certain_pairs", "void_pairs"]


def _spelling(templates: list[Histogram]) -> tuple:
    """The templates as a hashable value: equal spellings are equal histograms."""
    return tuple((h.edges.tobytes(), h.probs.tobytes()) for h in templates)


@lru_cache(maxsize=256)
def _built(spelling_a: tuple, spelling_b: tuple, delta: float) -> TemplateTables:
    templates_a = [Histogram._checked(np.frombuffer(e).copy(), np.frombuffer(p).copy()) for e, p in spelling_a]
    templates_b = [Histogram._checked(np.frombuffer(e).copy(), np.frombuffer(p).copy()) for e, p in spelling_b]
    right = stime_table(templates_a, templates_b, delta)
    left = stime_table(templates_a, templates_b, 1.0 - delta, earliest=True)
    tables = TemplateTables(delta, right, left, np.array([u.hi for u in templates_a]))
    for array in (tables.right, tables.left, tables.max_a):
        array.flags.writeable = False
    return tables


def certain_pairs(lo_a, hi_a, lo_b, hi_b, d: float) -> np.ndarray:
    """Pairs whose join probability is exactly 1: every outcome is within ``d``. (Each
    ``time - time + d`` is rounded once, :func:`~penumbra.probability.offset`, so its sign
    is exact: ``hi_a - d`` would round at epoch seconds, and ``(lo_b - hi_a) + d`` at the
    step of a difference of 1,000 s, either of which may call a pair certain that is not.)"""
    return (offset(lo_b, hi_a, d) >= 0) & (offset(hi_b, lo_a, -d) <= 0)


def void_pairs(lo_a, hi_a, lo_b, hi_b, d: float) -> np.ndarray:
    """Pairs whose join probability is exactly 0: the supports are at least ``d`` apart."""
    return (offset(hi_b, lo_a, d) <= 0) | (offset(lo_b, hi_a, -d) >= 0)


@dataclass
class TemplateTables:
    """Satisfaction times of every (A template, B template) pair at one threshold.

    ``right[u, v] = stime(phi_u, phi_v, delta)`` (inequality 8: a partner after ``a``) and
    ``left[u, v] = stime(phi_u, phi_v, 1 - delta)``, the earliest such time (inequality 9:
    a partner before ``a``), both for ``a |= phi_u`` in A and ``b |= phi_v`` in B.
    """

    delta: float
    right: np.ndarray
    left: np.ndarray
    max_a: np.ndarray          # max(phi_u) of every A template

    @classmethod
    def build(cls, templates_a: list[Histogram], templates_b: list[Histogram], delta: float) -> TemplateTables:
        """The tables of these templates at ``delta``; built once per process for the same
        templates and threshold (an operator restored every micro-batch finds them ready).
        The tables are shared, so their arrays are read-only."""
        return _built(_spelling(templates_a), _spelling(templates_b), float(delta))

    def decide(self, u: np.ndarray, v: np.ndarray, hi_a: np.ndarray, hi_b: np.ndarray, d: float):
        """Theorem 2 for pairs ``(a |= phi_u, b |= phi_v)``: ``(satisfied, violated)`` masks.

        Pairs within a rounding margin of their boundary are in neither mask: they are
        probed exactly, so a decision never differs from the exact probability.
        """
        shift = hi_a - self.max_a[u]
        after = hi_b >= hi_a
        bound = np.where(after, self.right[u, v] + d + shift, self.left[u, v] - d + shift)
        margin = 1e-9 * (np.abs(hi_a) + d + 1.0)
        satisfied = np.where(after, hi_b <= bound - margin, hi_b >= bound + margin)
        violated = np.where(after, hi_b > bound + margin, hi_b < bound - margin)
        return satisfied, violated

    def probing_ranges(self, u: int, hi_a: float, d: float) -> dict[str, list[float]]:
        """Theorem 3: LPR, SR and RPR (on the partner's max time) for ``a |= phi_u``."""
        g = hi_a - self.max_a[u]
        lpr = [float(self.left[u].min() + g - d), float(self.left[u].max() + g - d)]
        rpr = [float(self.right[u].min() + g + d), float(self.right[u].max() + g + d)]
        return {"lpr": lpr, "sr": [lpr[1], rpr[0]], "rpr": rpr}

    def t_min(self) -> float:
        """Theorem 4's offset: ``min over (u, v) of stime(phi_u, phi_v, 1 - delta) - max(phi_u)``."""
        return float((self.left - self.max_a[:, None]).min())
