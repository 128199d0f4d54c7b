"""The interval paper's five join strategies: how arriving events meet their buffered
partners and how the pairs are decided.

``simple``       Algorithm 1: each event against every buffered partner, all probed; buffers unsorted.
``ssort``        Algorithm 1 on max-time sorted buffers (invalidation cuts a prefix).
``eager``        Algorithms 2-3: each event's partitions (void / certain / Theorem 2) on the
                 sorted buffer, only the probing ranges probed.
``lazy``         Algorithms 4-5: a whole block (micro-batch) against the buffers at once,
                 partitions and probes vectorised.
``lazy_lookup``  Algorithms 6-7 adapted: ``lazy`` plus a look-up table of probabilities
                 keyed by the pair's exact geometry (templates or lengths, and offset), so a
                 probe whose answer is known is not computed again.

:class:`Strategies`, mixed into :class:`~.operator.JoinOperator`, reads the operator's
buffers, tables and threshold, and adds to its totals, matches and near misses. The
look-up table of ``lazy_lookup`` is in :mod:`.lookup`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..probability import meets
from .matches import FoundPairs
from .partitions import certain_pairs, void_pairs
from .rows import Rows

__all__ = ["Strategies"]


@dataclass
class _Pairs:
    """Candidate pairs ``(A row, B row)`` of one partner computation."""

    a: Rows
    b: Rows
    ia: np.ndarray
    ib: np.ndarray


class Strategies:
    """Algorithms 1-5: a block's events against their partners, pairs decided and emitted."""

    def _join_keys(self, codes: np.ndarray, new: list[Rows], new_kid: list[np.ndarray], matches, near) -> list[Rows]:
        """Algorithm 5 for every key of the block at once: new A against all of B (old and
        new), new B against old A, each event only against partners of its own key.

        ``codes`` are the block's keys, ``new`` each side's arrived rows and ``new_kid``
        their keys' codes. The held rows of the block's keys are taken out sorted by (key,
        max time), so a key's partners are one contiguous slice and one binary search serves
        every key; they go back with the new rows at the end. Returns the new rows of A and of B."""
        old, old_kid = self.held.take_keys(codes)
        all_b, kid_b = _merged(old[1], old_kid[1], new[1], new_kid[1])
        for base, base_kid, target, target_kid, base_is_a in ((new[0], new_kid[0], all_b, kid_b, True),
                                                              (new[1], new_kid[1], old[0], old_kid[0], False)):
            certain, uncertain = self._window_pairs(base, target, base_is_a=base_is_a, kids=(base_kid, target_kid))
            self._emit_certain(certain, matches)
            self._probe(uncertain, matches, near)
        all_a, kid_a = _merged(old[0], old_kid[0], new[0], new_kid[0])
        self.held.put(0, all_a, kid_a)
        self.held.put(1, all_b, kid_b)
        return new

    def _join_per_key(self, codes: np.ndarray, per_key: list[tuple[list[Rows], list]], matches, near
                      ) -> list[list[Rows]]:
        """Algorithms 1 and 2 for each key of the block in turn (``per_key``: each key's new
        rows of A and of B and its arrival sequence; their buffers taken out together and
        put back together). Returns each key's new rows of A and of B."""
        old, old_kid = self.held.take_keys(codes, by_time=self.strategy != "simple")
        cuts = [(np.searchsorted(kid, codes, side="left").tolist(), np.searchsorted(kid, codes, side="right").tolist())
                for kid in old_kid]
        blocks, kept = [], ([], [])
        for i, (code, (rows, sequence)) in enumerate(zip(codes.tolist(), per_key)):
            buffers = [old[k].take(slice(cuts[k][0][i], cuts[k][1][i])) for k in (0, 1)]
            self._join_each(buffers, rows, sequence, matches, near)
            for k in (0, 1):
                kept[k].append((buffers[k], code))
            blocks.append(rows)
        for k in (0, 1):
            self.held.put(k, Rows.concat([rows for rows, _ in kept[k]]),
                          np.repeat(np.array([code for _, code in kept[k]], dtype=np.int64),
                                    [len(rows) for rows, _ in kept[k]]))
        return blocks

    def _join_each(self, buffers: list[Rows], new: list[Rows], sequence, matches, near) -> None:
        """Algorithms 1 and 2: one event at a time, in arrival order."""
        keep_sorted = self.strategy != "simple"
        for k, i in sequence:
            event = new[k].take(slice(i, i + 1))
            partner = buffers[1 - k]
            if self.strategy == "eager":
                certain, pairs = self._window_pairs(event, partner, base_is_a=(k == 0))
                self._emit_certain(certain, matches)
            else:
                everyone = np.arange(len(partner))
                zeros = np.zeros(len(partner), dtype=np.int64)
                pairs = _Pairs(event, partner, zeros, everyone) if k == 0 else _Pairs(partner, event, everyone, zeros)
            self._probe(pairs, matches, near, exhaustive=self.strategy != "eager")
            buffers[k] = buffers[k].append(event, keep_sorted=keep_sorted)

    def _window_pairs(self, base: Rows, target: Rows, *, base_is_a: bool,
                      kids: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[_Pairs, _Pairs]:
        """The (base, target) pairs whose probability can be above 0, split into those
        certain to be 1 and the rest. On the target's max time (sorted), with pi_T its
        longest timestamp: above 0 needs ``(min(H_base) - d, max(H_base) + d + pi_T)``
        (outside: the violation range); the satisfaction range of Eq. 6,
        ``[max(H_base) - d + pi_T, min(H_base) + d]``, is 1 for every pair; the two
        probing ranges between are left for :meth:`_probe`.

        ``kids``: the key of every base row and of every target row (the target sorted by
        key, then max time); each base row then pairs only with its key's slice, and pi_T
        is that slice's longest timestamp."""
        if kids is None:
            pi = target.longest()
        else:
            pi = _longest_per_key(target, kids[1], kids[0])
        # the bounds round at large times (epoch seconds): the ranges are widened by that
        # rounding, and the satisfaction range's pairs checked as the probability is, on
        # the differences of the times
        slack = 2 * np.spacing(np.abs(base.lo) + np.abs(base.hi) + self.d + pi)
        start, stop, sr_start, sr_stop = _searches(target.hi, kids, [
            (base.lo - self.d - slack, "right"), (base.hi + self.d + pi + slack, "left"),
            (base.hi - self.d + pi, "left"), (base.lo + self.d, "right")])
        stop = np.maximum(stop, start)
        sr_start = np.clip(sr_start, start, stop)
        sr_stop = np.clip(sr_stop, sr_start, stop)
        certain = _range_pairs(sr_start, sr_stop)
        sure = certain_pairs(base.lo[certain[0]], base.hi[certain[0]], target.lo[certain[1]], target.hi[certain[1]],
                             self.d)
        uncertain = [_range_pairs(start, sr_start), _range_pairs(sr_stop, stop),
                     (certain[0][~sure], certain[1][~sure])]
        certain = (certain[0][sure], certain[1][sure])
        base_index = np.concatenate([u[0] for u in uncertain])
        target_index = np.concatenate([u[1] for u in uncertain])
        if base_is_a:
            return _Pairs(base, target, *certain), _Pairs(base, target, base_index, target_index)
        return _Pairs(target, base, certain[1], certain[0]), _Pairs(target, base, target_index, base_index)

    def _emit_certain(self, pairs: _Pairs, matches) -> None:
        """Pairs of the satisfaction range: matches with probability exactly 1."""
        ia, ib = pairs.ia, pairs.ib
        if self.self_join:
            other = pairs.a.ids[ia] != pairs.b.ids[ib]
            ia, ib = ia[other], ib[other]
        if len(ia):
            self.totals["pairs"] += len(ia)
            self.totals["certain"] += len(ia)
            matches.append(FoundPairs(pairs.a, ia, pairs.b, ib, np.ones(len(ia))))

    def _probe(self, pairs: _Pairs, matches, near, *, exhaustive: bool = False) -> None:
        """Decide candidate pairs: void and certain pairs by their supports, template pairs by
        Theorem 2, the rest by the exact probability (Algorithm 3), optionally looked up."""
        n = len(pairs.ia)
        if not n:
            return
        a, b, ia, ib = pairs.a, pairs.b, pairs.ia, pairs.ib
        if self.self_join:
            # one stream on both sides: an event is not its own partner
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
                probed = self._templates_decide(a, b, ia, ib, probed, near)
        if len(probed):
            probs[probed] = self._probabilities(a, b, ia[probed], ib[probed])
            probs[certain] = 1.0
            probs[void] = 0.0
            self.totals["probed"] += len(probed)
            missed = probed[meets(probs[probed], self.floor) & ~meets(probs[probed], self.threshold)]
            self._near_misses(a, b, ia[missed], ib[missed], probs[missed], near)
        # (a pair of probability 0 is no match, also at a threshold within rounding of 0)
        hit = np.flatnonzero(meets(probs, self.threshold) & (probs > 0))
        if len(hit):
            matches.append(FoundPairs(a, ia[hit], b, ib[hit], probs[hit]))

    def _templates_decide(self, a: Rows, b: Rows, ia, ib, probed: np.ndarray, near) -> np.ndarray:
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
            self._near_misses(a, b, ia[missed], ib[missed], self._probabilities(a, b, ia[missed], ib[missed]), near)
        dropped = np.zeros(len(ia), dtype=bool)
        dropped[both[violated]] = True
        return probed[~dropped[probed]]


def _merged(old: Rows, old_kid: np.ndarray, new: Rows, new_kid: np.ndarray) -> tuple[Rows, np.ndarray]:
    """``old`` and ``new`` (each with the key of every row; ``old`` sorted by key, then max
    time) as one set of rows sorted the same way; ties keep old rows first and new ones in
    arrival order, as :meth:`Rows.append` does within a key."""
    if not len(new):
        return old, old_kid
    rows = Rows.concat([old, new])
    kid = np.concatenate([old_kid, new_kid])
    order = np.lexsort((rows.hi, kid))
    return rows.take(order), kid[order]


def _longest_per_key(rows: Rows, kid: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """For each key code of ``wanted``, the longest timestamp of its rows (0 for a key
    without any); ``kid`` (the key code of each row) sorted."""
    if not len(rows) or not len(wanted):
        return np.zeros(len(wanted))
    held, starts = np.unique(kid, return_index=True)
    longest = np.maximum.reduceat(rows.hi - rows.lo, starts)
    at = np.minimum(np.searchsorted(held, wanted), len(held) - 1)
    return np.where(held[at] == wanted, longest[at], 0.0)


def _searches(hi: np.ndarray, kids: tuple[np.ndarray, np.ndarray] | None,
              queries: list[tuple[np.ndarray, str]]) -> list[np.ndarray]:
    """``np.searchsorted(hi, values, side)`` for each query; with ``kids`` (the key of each
    query value, and of each ``hi``, sorted by key and then value) within the query's key.

    Values and keys are combined into one sortable integer: every value is replaced by
    its rank among all of them (equal values, equal rank), so ``key * width + rank``
    orders exactly like (key, value) and a search with either side lands where the
    search within the key's slice would."""
    if kids is None:
        return [np.searchsorted(hi, values, side=side) for values, side in queries]
    every = np.concatenate([hi] + [values for values, _ in queries])
    distinct, rank = np.unique(every, return_inverse=True)
    rank = rank.reshape(-1).astype(np.int64)
    width = len(distinct) + 1
    combined = kids[1] * width + rank[:len(hi)]
    out, at = [], len(hi)
    for values, side in queries:
        out.append(np.searchsorted(combined, kids[0] * width + rank[at:at + len(values)], side=side))
        at += len(values)
    return out


def _range_pairs(start: np.ndarray, stop: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For ranges ``[start_r, stop_r)`` of target rows, every (r, target row) pair."""
    counts = np.maximum(stop - start, 0)
    base_index = np.repeat(np.arange(len(start)), counts)
    offsets = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    return base_index, np.repeat(start, counts) + offsets
