"""How a block's candidate pairs are decided: the interval paper's probe (Algorithm 3),
with PTJoin's shortcuts before it.

A candidate pair ``(a, b)`` is decided by the first of:

* its supports: *certain* (probability exactly 1, the satisfaction range SR of Eq. 6 per
  pair) or *void* (probability 0, the violation range);
* Theorem 2 for template pairs (``a |= phi_u``, ``b |= phi_v``, ``d >= pi`` by Lemma 2):
  inequalities 8 and 9 on ``stime(phi_u, phi_v, delta)`` drop a violated pair without its
  probability (a satisfied one is still probed for the probability it is reported with);
* the exact ``P(|X_a - X_b| <= d)``, looked up by the pair's geometry for ``lazy_lookup``
  (:mod:`.lookup`).

A :class:`Probe` is made for one block with what it reads (window, threshold, floor,
tables, counters) and keeps what it finds: the matches (:attr:`Probe.found`) and the near
misses between the floor and the threshold (:class:`~.inspection.NearMisses`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..probability import meets, p_within_block
from .inspection import NearMisses
from .lookup import LookupTable
from .matches import FoundPairs
from .partitions import TemplateTables, certain_pairs, void_pairs
from .rows import Rows

__all__ = ["Pairs", "Probe"]


@dataclass
class Pairs:
    """Candidate pairs of one partner search: rows of A and of B, and per pair the index of
    its A event (``ia``) and of its B event (``ib``) in them."""

    a: Rows
    b: Rows
    ia: np.ndarray
    ib: np.ndarray


class Probe:
    """Decides candidate pairs at one threshold and keeps the block's matches.

    ``tables`` and ``floor_tables`` are Theorem 2's at the threshold and at the floor
    (None: no template shortcut); ``lookup`` the look-up table of ``lazy_lookup`` (None:
    every probability computed); ``self_join``: one stream on both sides, so an event is
    not its own partner. Counts go to ``totals`` (the operator's counters), near misses to
    ``near``."""

    def __init__(self, *, d: float, threshold: float, floor: float, tables: TemplateTables | None,
                 floor_tables: TemplateTables | None, self_join: bool, lookup: LookupTable | None,
                 near: NearMisses, totals: dict[str, int]):
        self.d = d
        self.threshold = threshold
        self.floor = floor
        self.tables = tables
        self.floor_tables = floor_tables
        self.self_join = self_join
        self.lookup = lookup
        self.near = near
        self.totals = totals
        self.found: list[FoundPairs] = []

    def emit_certain(self, pairs: Pairs) -> None:
        """Pairs of the satisfaction range: matches with probability exactly 1."""
        ia, ib = pairs.ia, pairs.ib
        if self.self_join:
            other = pairs.a.ids[ia] != pairs.b.ids[ib]
            ia, ib = ia[other], ib[other]
        if len(ia):
            self.totals["pairs"] += len(ia)
            self.totals["certain"] += len(ia)
            self.found.append(FoundPairs(pairs.a, ia, pairs.b, ib, np.ones(len(ia))))

    def decide(self, pairs: Pairs, *, exhaustive: bool = False) -> None:
        """Decide candidate pairs: void and certain pairs by their supports, template pairs by
        Theorem 2, the rest by the exact probability (Algorithm 3), optionally looked up.
        ``exhaustive`` (Algorithm 1): every probability computed, no shortcut counted."""
        n = len(pairs.ia)
        if not n:
            return
        a, b, ia, ib = pairs.a, pairs.b, pairs.ia, pairs.ib
        if self.self_join:
            other = a.ids[ia] != b.ids[ib]
            ia, ib, n = ia[other], ib[other], int(other.sum())
        self.totals["pairs"] += n
        lo_a, hi_a, lo_b, hi_b = a.lo[ia], a.hi[ia], b.lo[ib], b.hi[ib]
        certain = certain_pairs(lo_a, hi_a, lo_b, hi_b, self.d)
        void = void_pairs(lo_a, hi_a, lo_b, hi_b, self.d)
        probs = np.where(certain, 1.0, 0.0)
        undecided = ~(certain | void)
        if exhaustive:
            # Algorithm 1 computes every probability (the supports then make 0 and 1 exact).
            probed = np.arange(n)
        else:
            self.totals["certain"] += int(certain.sum())
            self.totals["void"] += int(void.sum())
            probed = np.flatnonzero(undecided)
            if self.tables is not None and len(probed):
                probed = self._templates_decide(a, b, ia, ib, probed)
        if len(probed):
            probs[probed] = self.probabilities(a, b, ia[probed], ib[probed])
            probs[certain] = 1.0
            probs[void] = 0.0
            self.totals["probed"] += len(probed)
            missed = probed[meets(probs[probed], self.floor) & ~meets(probs[probed], self.threshold)]
            self.near.add(a, b, ia[missed], ib[missed], probs[missed])
        # (a pair of probability 0 is no match, also at a threshold within rounding of 0)
        hit = np.flatnonzero(meets(probs, self.threshold) & (probs > 0))
        if len(hit):
            self.found.append(FoundPairs(a, ia[hit], b, ib[hit], probs[hit]))

    def probabilities(self, a: Rows, b: Rows, ia: np.ndarray, ib: np.ndarray) -> np.ndarray:
        """Exact ``P(|X_a - X_b| <= d)`` for the pairs, from the look-up table when there is one."""
        if self.lookup is None:
            return p_within_block(a.block.take(ia), b.block.take(ib), self.d)
        values, hits = self.lookup.probabilities(a, b, ia, ib, self.d)
        self.totals["lookup_hits"] += hits
        return values

    def _templates_decide(self, a: Rows, b: Rows, ia: np.ndarray, ib: np.ndarray, probed: np.ndarray) -> np.ndarray:
        """Theorem 2 for template pairs: drop the violated ones (counting near misses with
        the floor's tables); the satisfied ones still need their exact probability."""
        both = probed[(a.template[ia[probed]] >= 0) & (b.template[ib[probed]] >= 0)]
        if not len(both):
            return probed
        u, v = a.template[ia[both]], b.template[ib[both]]
        hi_a, hi_b = a.hi[ia[both]], b.hi[ib[both]]
        _, violated = self.tables.decide(u, v, hi_a, hi_b, self.d)
        self.totals["decided_by_templates"] += int(violated.sum())
        floor_ok, _ = self.floor_tables.decide(u, v, hi_a, hi_b, self.d)
        missed = both[violated & floor_ok]
        if len(missed):
            # below the threshold but not the floor: weighed for the near-miss histogram
            self.near.add(a, b, ia[missed], ib[missed], self.probabilities(a, b, ia[missed], ib[missed]))
        dropped = np.zeros(len(ia), dtype=bool)
        dropped[both[violated]] = True
        return probed[~dropped[probed]]
