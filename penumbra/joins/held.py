"""A join's stream buffers, every key at once: per side one :class:`Rows` of all the
buffered events of every key, with each row's key code.

A micro-batch takes out the rows of the keys it touches (sorted by key, then max time, as
the strategies want them), joins them, and puts them back; eviction is one mask over all
the rows. No step costs per key held: the work of a block is proportional to the events
and the rows of the keys it touches, plus one pass over the arrays, however many keys the
buffers hold (PTJoin's stream buffers, section 3.2, kept per key as one array each).

Within a key the rows keep the order the strategies give them (sorted by max time, ties in
arrival order; in arrival order for ``simple``); across keys the order is arbitrary.
"""

from __future__ import annotations

from typing import Any, Hashable, Sequence

import numpy as np

from ..timestamps import HistogramBlock
from .rows import Rows

__all__ = ["Held"]

#: Codes are renumbered once the keys ever coded outnumber the keys held by this factor
#: (and this many): a key that left the buffers does not keep its code forever.
_RENUMBER_FACTOR = 4
_RENUMBER_MIN = 4096


class Held:
    """Both sides' buffered rows (``rows``) with the key code of each row (``row_codes``),
    and the codes of the keys: key -> code (``codes``) and code -> key (``keys``)."""

    __slots__ = ("rows", "row_codes", "codes", "keys")

    def __init__(self) -> None:
        self.rows = [Rows.empty(), Rows.empty()]
        self.row_codes = [np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)]
        self.codes: dict[Hashable, int] = {}
        self.keys: list[Hashable] = []

    def code(self, key: Hashable) -> int:
        """The key's code (a new one for a key not held)."""
        code = self.codes.get(key)
        if code is None:
            code = self.codes[key] = len(self.keys)
            self.keys.append(key)
        return code

    def lengths(self) -> tuple[int, int]:
        return len(self.rows[0]), len(self.rows[1])

    def take_keys(self, codes: np.ndarray, *, by_time: bool = True) -> tuple[list[Rows], list[np.ndarray]]:
        """Takes out, per side, the rows of the keys ``codes``: sorted by key code, then
        by max time (stable) when ``by_time``, else in their order within each key."""
        taken_rows, taken_codes = [], []
        for k in (0, 1):
            row_codes = self.row_codes[k]
            inside = np.isin(row_codes, codes) if len(row_codes) else np.zeros(0, dtype=bool)
            chosen = np.flatnonzero(inside)
            if not len(chosen):
                taken_rows.append(Rows.empty())
                taken_codes.append(np.empty(0, dtype=np.int64))
                continue
            rows, chosen_codes = self.rows[k].take(chosen), row_codes[chosen]
            order = np.lexsort((rows.hi, chosen_codes)) if by_time else np.argsort(chosen_codes, kind="stable")
            taken_rows.append(rows.take(order))
            taken_codes.append(chosen_codes[order])
            if len(chosen) == len(row_codes):
                self.rows[k], self.row_codes[k] = Rows.empty(), np.empty(0, dtype=np.int64)
            else:
                rest = np.flatnonzero(~inside)
                self.rows[k], self.row_codes[k] = self.rows[k].take(rest), row_codes[rest]
        return taken_rows, taken_codes

    def put(self, k: int, rows: Rows, row_codes: np.ndarray) -> None:
        """Puts rows of side ``k`` (with their key codes) back among the held ones."""
        if not len(rows):
            return
        if not len(self.rows[k]):
            self.rows[k], self.row_codes[k] = rows, row_codes
            return
        self.rows[k] = Rows.concat([self.rows[k], rows])
        self.row_codes[k] = np.concatenate([self.row_codes[k], row_codes])

    def evict(self, bounds: Sequence[float]) -> int:
        """Drops the rows of side ``k`` whose max time is below ``bounds[k]``; how many."""
        evicted = 0
        for k in (0, 1):
            rows = self.rows[k]
            if not len(rows):
                continue
            keep = rows.hi >= bounds[k]
            kept = int(np.count_nonzero(keep))
            if kept < len(rows):
                index = np.flatnonzero(keep)
                self.rows[k], self.row_codes[k] = rows.take(index), self.row_codes[k][index]
                evicted += len(rows) - kept
        self._renumber()
        return evicted

    def _renumber(self) -> None:
        """Forgets the codes of keys no longer held, once they are many."""
        if len(self.keys) < _RENUMBER_MIN:
            return
        live = np.unique(np.concatenate(self.row_codes))
        if len(self.keys) < _RENUMBER_FACTOR * len(live):
            return
        self.keys = [self.keys[c] for c in live.tolist()]
        self.codes = {key: c for c, key in enumerate(self.keys)}
        self.row_codes = [np.searchsorted(live, side_codes).astype(np.int64) for side_codes in self.row_codes]

    # --- state ---------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """The buffers as plain arrays (``kid``: the saved name of ``row_codes``)."""
        return {"keys": self.keys, "kid": self.row_codes,
                "rows": [(r.hi, r.lo, r.block.edges, r.block.probs, r.template, r.ids, r.attrs) for r in self.rows]}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Held:
        held = cls()
        held.keys = list(state["keys"])
        held.codes = {key: c for c, key in enumerate(held.keys)}
        held.row_codes = [np.asarray(side_codes, dtype=np.int64) for side_codes in state["kid"]]
        held.rows = [Rows(hi, lo, HistogramBlock(edges, probs), template, ids, attrs)
                     for hi, lo, edges, probs, template, ids, attrs in state["rows"]]
        return held

    @classmethod
    def from_buffers(cls, buffers: dict[Hashable, Sequence[Rows]]) -> Held:
        """From per-key buffers (a state written before the buffers were held as one)."""
        held = cls()
        for key, sides in buffers.items():
            code = held.code(key)
            for k in (0, 1):
                held.put(k, sides[k], np.full(len(sides[k]), code, dtype=np.int64))
        return held
