"""A block's arrived events grouped by key: what the strategies join against the buffers.

The interval paper's lazy correlation (Algorithms 4-5) takes the unprocessed block of a
stream at once; here that block is the events of a micro-batch that some side admitted and
that were not late, with their key (:mod:`.keys`). Each key of the block is found and
decided once (has it a value? does this key group own it?), not once per event. The lazy
strategies take every key's new rows together (:attr:`Arrivals.new`); the per-event ones
(Algorithms 1-3) take each key's rows and its arrival sequence (:meth:`Arrivals.per_key`).
"""

from __future__ import annotations

import numpy as np

from ..events.columns import EventColumns
from ..keygroups import KeyGroup
from .held import Held
from .keys import key_codes, key_values
from .rows import Rows

__all__ = ["Arrivals"]


class Arrivals:
    """A block's arrived events with their keys (``keys``: each distinct key once, in order
    of first arrival): the new rows of each side grouped by key in that order (``new``),
    each new row's key rank (its key's place in ``keys``), and each key's arrival sequence.
    ``unkeyed`` and ``other_group`` count the arrivals left out: without a key, or of a key
    another key group owns."""

    def __init__(self, columns: EventColumns, entries: np.ndarray, order: np.ndarray, key_rank: np.ndarray,
                 keys: list[tuple], templates: list[np.ndarray], *, unkeyed: int = 0, other_group: int = 0):
        self.keys = keys
        self.unkeyed = unkeyed
        self.other_group = other_group
        self._codes: np.ndarray | None = None
        arrival = order[key_rank[order] >= 0]            # the kept (event, side) entries, in arrival order
        self._arrival = (entries[1, arrival], key_rank[arrival])
        offsets = (0, len(templates[0]))
        self.new: list[Rows] = []
        self.key_ranks: list[np.ndarray] = []
        block = columns.block
        for k in (0, 1):
            of_side = arrival[entries[1, arrival] == k]
            of_side = of_side[np.argsort(key_rank[of_side], kind="stable")]
            events = entries[0, of_side]
            self.new.append(Rows(block.hi[events], block.lo[events], block.take(events),
                                 templates[k][of_side - offsets[k]], columns.ids[events], columns.attrs[events])
                            if len(events) else Rows.empty())
            self.key_ranks.append(key_rank[of_side])

    @classmethod
    def by_key(cls, columns: EventColumns, admitted: list[tuple[np.ndarray, np.ndarray]],
               key_names: tuple[tuple[str, ...], tuple[str, ...]], key_group: KeyGroup | None) -> Arrivals:
        """The ``admitted`` events of each side (their rows in the block and template
        indices) with their keys, in arrival order (by event, then side); those without a
        key and those of keys ``key_group`` does not own are counted and left."""
        entries = np.concatenate([np.concatenate([rows, np.full(len(rows), k)]).reshape(2, -1)
                                  for k, (rows, _) in enumerate(admitted)], axis=1)    # (event, side) of every arrival
        order = np.lexsort((entries[1], entries[0]))
        attrs = columns.attrs[entries[0, order]].tolist()
        if key_names[0] == key_names[1]:
            found = key_values(attrs, key_names[0])
        else:
            found = [None] * len(attrs)
            sides = entries[1, order]
            for k in (0, 1):
                at = np.flatnonzero(sides == k).tolist()
                for i, value in zip(at, key_values([attrs[i] for i in at], key_names[k])):
                    found[i] = value
        codes, distinct = key_codes(found)
        counts = np.bincount(codes, minlength=len(distinct))
        ranked = np.full(len(distinct), -1, dtype=np.int64)     # each code's rank among the keys kept
        keys: list[tuple] = []
        unkeyed = other_group = 0
        owns = key_group.owns if key_group is not None else None
        for code, key in enumerate(distinct):
            if key is None:
                unkeyed += int(counts[code])
            elif owns is not None and not owns(tuple([value for _, value in key])):
                other_group += int(counts[code])
            else:
                ranked[code] = len(keys)
                keys.append(key)
        key_rank = np.empty(entries.shape[1], dtype=np.int64)
        key_rank[order] = ranked[codes]
        return cls(columns, entries, order, key_rank, keys, [template for _, template in admitted],
                   unkeyed=unkeyed, other_group=other_group)

    def codes(self, held: Held) -> np.ndarray:
        """The buffers' key code of each key (given once, then kept)."""
        if self._codes is None:
            self._codes = np.fromiter((held.code(key) for key in self.keys), dtype=np.int64, count=len(self.keys))
        return self._codes

    def new_codes(self, held: Held) -> list[np.ndarray]:
        """Per side, the buffers' key code of each new row."""
        codes = self.codes(held)
        return [codes[ranks] for ranks in self.key_ranks]

    def per_key(self) -> list[tuple[list[Rows], list[tuple[int, int]]]]:
        """For each key in order: its new rows of A and of B, and (side, row) in arrival order."""
        cuts = [np.searchsorted(ranks, np.arange(len(self.keys) + 1)) for ranks in self.key_ranks]
        out = [([self.new[k].take(slice(cuts[k][r], cuts[k][r + 1])) for k in (0, 1)], [])
               for r in range(len(self.keys))]
        seen = np.zeros((len(self.keys), 2), dtype=np.int64)
        for k, r in zip(*(part.tolist() for part in self._arrival)):
            out[r][1].append((k, int(seen[r, k])))
            seen[r, k] += 1
        return out

    def values_by_id(self) -> tuple[dict, dict]:
        """Per side, the id of each arrived event -> its key's values."""
        values = [tuple(v for _, v in key) for key in self.keys]
        return tuple({event_id: values[r] for event_id, r in zip(self.new[k].ids.tolist(), self.key_ranks[k].tolist())}
                     for k in (0, 1))
