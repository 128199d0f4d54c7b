"""The interval paper's five join strategies: how arriving events meet their buffered
partners, every key of a block at once.

``simple``       Algorithm 1: each event against every buffered partner, all probed; buffers unsorted.
``ssort``        Algorithm 1 on max-time sorted buffers (invalidation cuts a prefix).
``eager``        Algorithms 2-3: each event's partitions (void / certain / Theorem 2) on the
                 sorted buffer, only the probing ranges probed.
``lazy``         Algorithms 4-5: a whole block (micro-batch) against the buffers at once,
                 partitions and probes vectorised.
``lazy_lookup``  Algorithms 6-7 adapted: ``lazy`` plus a look-up table of probabilities
                 keyed by the pair's exact geometry (templates or lengths, and offset), so a
                 probe whose answer is known is not computed again (:mod:`.lookup`).

On a max-time sorted partner buffer the partitions of an event (the interval paper's LH,
LL, RL, RH; the PTJoin paper's Eqs. 4-6) are slices found by binary search
(:func:`window_pairs`): the violation range outside, the satisfaction range SR (every pair
certain) and the probing ranges LPR and RPR between. A strategy takes the block's
arrivals (:class:`~.arrivals.Arrivals`) and their keys' buffered rows out of the buffers
(:class:`~.held.Held`), hands the candidate pairs to a :class:`~.probe.Probe` that decides
them, and puts the rows back with the new ones.
"""

from __future__ import annotations

import numpy as np

from .arrivals import Arrivals
from .held import Held
from .partitions import certain_pairs
from .probe import Pairs, Probe
from .rows import Rows

__all__ = ["DEFAULT_STRATEGY", "STRATEGIES", "join_block", "window_pairs"]

STRATEGIES = ("simple", "ssort", "eager", "lazy", "lazy_lookup")
DEFAULT_STRATEGY = "lazy"


def join_block(strategy: str, held: Held, arrivals: Arrivals, probe: Probe) -> list[list[Rows]]:
    """The block's ``arrivals`` against their keys' partners in ``held`` by ``strategy``,
    the pairs decided by ``probe``, the new rows put into the buffers. Returns the new rows
    of A and of B: of the whole block for the lazy strategies, of each key for the others."""
    if not arrivals.keys:
        return []
    codes = arrivals.codes(held)
    if strategy in ("lazy", "lazy_lookup"):
        return [_join_keys(held, probe, codes, arrivals.new, arrivals.new_codes(held))]
    return _join_per_key(held, probe, strategy, codes, arrivals.per_key())


def _join_keys(held: Held, probe: Probe, codes: np.ndarray, new: list[Rows], new_codes: list[np.ndarray]
               ) -> list[Rows]:
    """Algorithm 5 for every key of the block at once: new A against all of B (old and
    new), new B against old A, each event only against partners of its own key.

    ``codes`` are the block's keys, ``new`` each side's arrived rows and ``new_codes``
    their keys' codes. The held rows of the block's keys are taken out sorted by (key,
    max time), so a key's partners are one contiguous slice and one binary search serves
    every key; they go back with the new rows at the end. Returns the new rows of A and of B."""
    old, old_codes = held.take_keys(codes)
    all_b, all_b_codes = _merged(old[1], old_codes[1], new[1], new_codes[1])
    for base, base_codes, target, target_codes, base_is_a in (
            (new[0], new_codes[0], all_b, all_b_codes, True), (new[1], new_codes[1], old[0], old_codes[0], False)):
        certain, uncertain = window_pairs(base, target, probe.d, base_is_a=base_is_a,
                                          key_codes=(base_codes, target_codes))
        probe.emit_certain(certain)
        probe.decide(uncertain)
    all_a, all_a_codes = _merged(old[0], old_codes[0], new[0], new_codes[0])
    held.put(0, all_a, all_a_codes)
    held.put(1, all_b, all_b_codes)
    return new


def _join_per_key(held: Held, probe: Probe, strategy: str, codes: np.ndarray,
                  per_key: list[tuple[list[Rows], list[tuple[int, int]]]]) -> list[list[Rows]]:
    """Algorithms 1 and 2 for each key of the block in turn (``per_key``: each key's new
    rows of A and of B and its arrival sequence; their buffers taken out together and
    put back together). Returns each key's new rows of A and of B."""
    old, old_codes = held.take_keys(codes, by_time=strategy != "simple")
    cuts = [(np.searchsorted(side_codes, codes, side="left").tolist(),
             np.searchsorted(side_codes, codes, side="right").tolist()) for side_codes in old_codes]
    blocks, kept = [], ([], [])
    for i, (code, (rows, sequence)) in enumerate(zip(codes.tolist(), per_key)):
        buffers = [old[k].take(slice(cuts[k][0][i], cuts[k][1][i])) for k in (0, 1)]
        _join_each(strategy, buffers, rows, sequence, probe)
        for k in (0, 1):
            kept[k].append((buffers[k], code))
        blocks.append(rows)
    for k in (0, 1):
        held.put(k, Rows.concat([rows for rows, _ in kept[k]]),
                 np.repeat(np.array([code for _, code in kept[k]], dtype=np.int64),
                           [len(rows) for rows, _ in kept[k]]))
    return blocks


def _join_each(strategy: str, buffers: list[Rows], new: list[Rows], sequence: list[tuple[int, int]],
               probe: Probe) -> None:
    """Algorithms 1 and 2: one event at a time, in arrival order (``sequence``: side and
    row of each), each against the other side's ``buffers`` and then added to its own."""
    keep_sorted = strategy != "simple"
    for k, i in sequence:
        event = new[k].take(slice(i, i + 1))
        partner = buffers[1 - k]
        if strategy == "eager":
            certain, pairs = window_pairs(event, partner, probe.d, base_is_a=(k == 0))
            probe.emit_certain(certain)
        else:
            everyone = np.arange(len(partner))
            zeros = np.zeros(len(partner), dtype=np.int64)
            pairs = Pairs(event, partner, zeros, everyone) if k == 0 else Pairs(partner, event, everyone, zeros)
        probe.decide(pairs, exhaustive=strategy != "eager")
        buffers[k] = buffers[k].append(event, keep_sorted=keep_sorted)


def window_pairs(base: Rows, target: Rows, d: float, *, base_is_a: bool,
                 key_codes: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[Pairs, Pairs]:
    """The (base, target) pairs whose probability can be above 0, split into those
    certain to be 1 and the rest. On the target's max time (sorted), with pi_T its
    longest timestamp: above 0 needs ``(min(H_base) - d, max(H_base) + d + pi_T)``
    (outside: the violation range); the satisfaction range of Eq. 6,
    ``[max(H_base) - d + pi_T, min(H_base) + d]``, is 1 for every pair; the two
    probing ranges between are left for :meth:`Probe.decide`.

    ``key_codes``: the key code of every base row and of every target row (the target
    sorted by key, then max time); each base row then pairs only with its key's slice, and
    pi_T is that slice's longest timestamp."""
    if key_codes is None:
        pi_target = target.longest()
    else:
        pi_target = _longest_per_key(target, key_codes[1], key_codes[0])
    # the bounds round at large times (epoch seconds): the ranges are widened by that
    # rounding, and the satisfaction range's pairs checked as the probability is, on
    # the differences of the times
    slack = 2 * np.spacing(np.abs(base.lo) + np.abs(base.hi) + d + pi_target)
    start, stop, sr_start, sr_stop = _searches(target.hi, key_codes, [
        (base.lo - d - slack, "right"), (base.hi + d + pi_target + slack, "left"),
        (base.hi - d + pi_target, "left"), (base.lo + d, "right")])
    stop = np.maximum(stop, start)
    sr_start = np.clip(sr_start, start, stop)
    sr_stop = np.clip(sr_stop, sr_start, stop)
    certain = _range_pairs(sr_start, sr_stop)
    sure = certain_pairs(base.lo[certain[0]], base.hi[certain[0]], target.lo[certain[1]], target.hi[certain[1]], d)
    uncertain = [_range_pairs(start, sr_start), _range_pairs(sr_stop, stop),
                 (certain[0][~sure], certain[1][~sure])]
    certain = (certain[0][sure], certain[1][sure])
    base_index = np.concatenate([u[0] for u in uncertain])
    target_index = np.concatenate([u[1] for u in uncertain])
    if base_is_a:
        return Pairs(base, target, *certain), Pairs(base, target, base_index, target_index)
    return Pairs(target, base, certain[1], certain[0]), Pairs(target, base, target_index, base_index)


def _merged(old: Rows, old_codes: np.ndarray, new: Rows, new_codes: np.ndarray) -> tuple[Rows, np.ndarray]:
    """``old`` and ``new`` (each with the key code of every row; ``old`` sorted by key, then
    max time) as one set of rows sorted the same way; ties keep old rows first and new ones
    in arrival order, as :meth:`Rows.append` does within a key."""
    if not len(new):
        return old, old_codes
    rows = Rows.concat([old, new])
    codes = np.concatenate([old_codes, new_codes])
    order = np.lexsort((rows.hi, codes))
    return rows.take(order), codes[order]


def _longest_per_key(rows: Rows, row_codes: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """For each key code of ``wanted``, the longest timestamp of its rows (0 for a key
    without any); ``row_codes`` (the key code of each row) sorted."""
    if not len(rows) or not len(wanted):
        return np.zeros(len(wanted))
    present, starts = np.unique(row_codes, return_index=True)
    longest = np.maximum.reduceat(rows.hi - rows.lo, starts)
    at = np.minimum(np.searchsorted(present, wanted), len(present) - 1)
    return np.where(present[at] == wanted, longest[at], 0.0)


def _searches(hi: np.ndarray, key_codes: tuple[np.ndarray, np.ndarray] | None,
              queries: list[tuple[np.ndarray, str]]) -> list[np.ndarray]:
    """``np.searchsorted(hi, values, side)`` for each query; with ``key_codes`` (the key code
    of each query value, and of each ``hi``, sorted by key and then value) within the query's key.

    Values and keys are combined into one sortable integer: every value is replaced by
    its rank among all of them (equal values, equal rank), so ``key * width + rank``
    orders exactly like (key, value) and a search with either side lands where the
    search within the key's slice would."""
    if key_codes is None:
        return [np.searchsorted(hi, values, side=side) for values, side in queries]
    every = np.concatenate([hi] + [values for values, _ in queries])
    distinct, rank = np.unique(every, return_inverse=True)
    rank = rank.reshape(-1).astype(np.int64)
    width = len(distinct) + 1
    combined = key_codes[1] * width + rank[:len(hi)]
    out, at = [], len(hi)
    for values, side in queries:
        out.append(np.searchsorted(combined, key_codes[0] * width + rank[at:at + len(values)], side=side))
        at += len(values)
    return out


def _range_pairs(start: np.ndarray, stop: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For ranges ``[start_r, stop_r)`` of target rows, every (r, target row) pair."""
    counts = np.maximum(stop - start, 0)
    base_index = np.repeat(np.arange(len(start)), counts)
    offsets = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    return base_index, np.repeat(start, counts) + offsets
