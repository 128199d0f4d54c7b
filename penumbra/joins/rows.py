"""Events of one join side as arrays: the unit every join strategy works on.

A stream buffer (PTJoin section 3.2) is a :class:`Rows` kept sorted by max time,
``max(H)``, so the partitions of section 3.1 are contiguous slices found by binary search.
A row goes back to the input's shape (:meth:`Rows.event`) only at the edges: a match's
records, the inspector's samples.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from ..timestamps import Histogram, HistogramBlock

__all__ = ["Rows"]


class Rows:
    """``n`` events: ``hi`` = max(H), ``lo`` = min(H), their histograms, template index
    (-1 for an explicit timestamp), ids and attributes (the events' own mappings, kept so
    a match can be explained with its events)."""

    __slots__ = ("hi", "lo", "block", "template", "ids", "attrs")

    def __init__(self, hi: np.ndarray, lo: np.ndarray, block: HistogramBlock,
                 template: np.ndarray, ids: np.ndarray, attrs: np.ndarray | None = None):
        self.hi = hi
        self.lo = lo
        self.block = block
        self.template = template
        self.ids = ids
        if attrs is None:            # rows restored from a state written without attributes
            attrs = np.empty(len(ids), dtype=object)
            attrs[:] = [{}] * len(ids)
        self.attrs = attrs

    @classmethod
    def empty(cls) -> Rows:
        return cls(np.empty(0), np.empty(0), HistogramBlock(np.empty((2, 0)), np.empty((1, 0))),
                   np.empty(0, dtype=np.int64), np.empty(0, dtype=object), np.empty(0, dtype=object))

    @classmethod
    def build(cls, histograms: Sequence[Histogram], templates: Sequence[int], ids: Sequence[str],
              attrs: Sequence[Mapping[str, Any]] | None = None) -> Rows:
        if not histograms:
            return cls.empty()
        block = HistogramBlock.from_histograms(histograms)
        id_array = np.empty(len(ids), dtype=object)
        id_array[:] = list(ids)
        attr_array = np.empty(len(ids), dtype=object)
        attr_array[:] = list(attrs) if attrs is not None else [{}] * len(ids)
        return cls(block.hi.copy(), block.lo.copy(), block, np.asarray(templates, dtype=np.int64), id_array,
                   attr_array)

    @classmethod
    def concat(cls, parts: Sequence[Rows]) -> Rows:
        """The rows of ``parts``, one after another."""
        parts = [part for part in parts if len(part)]
        if not parts:
            return cls.empty()
        if len(parts) == 1:
            return parts[0]
        return cls(np.concatenate([p.hi for p in parts]), np.concatenate([p.lo for p in parts]),
                   HistogramBlock.concat([p.block for p in parts]),
                   np.concatenate([p.template for p in parts]), np.concatenate([p.ids for p in parts]),
                   np.concatenate([p.attrs for p in parts]))

    def __len__(self) -> int:
        return len(self.hi)

    def take(self, index) -> Rows:
        return Rows(self.hi[index], self.lo[index], self.block.take(index), self.template[index], self.ids[index],
                    self.attrs[index])

    def append(self, other: Rows, *, keep_sorted: bool) -> Rows:
        """These rows and ``other``; sorted by max time (stable) when ``keep_sorted``."""
        if not len(other):
            return self
        if not len(self):
            joined = other
        else:
            joined = Rows(np.concatenate([self.hi, other.hi]), np.concatenate([self.lo, other.lo]),
                          HistogramBlock.concat([self.block, other.block]),
                          np.concatenate([self.template, other.template]),
                          np.concatenate([self.ids, other.ids]), np.concatenate([self.attrs, other.attrs]))
        if keep_sorted and len(joined) > 1 and np.any(np.diff(joined.hi) < 0):
            joined = joined.take(np.argsort(joined.hi, kind="stable"))
        return joined

    def longest(self) -> float:
        """The longest timestamp held (0 when empty)."""
        return float(np.max(self.hi - self.lo)) if len(self) else 0.0

    def timestamp(self, i: int, template_names: Sequence[str]) -> dict[str, Any]:
        """Row ``i``'s timestamp in the input's shape, as the join admitted it: a template name
        and detection time, an interval (a one-bucket histogram), or a histogram."""
        template = int(self.template[i])
        if 0 <= template < len(template_names):
            return {"detected": float(self.hi[i]), "template": template_names[template]}
        probs = self.block.probs[:, i]
        used = int(np.flatnonzero(probs > 0)[-1]) + 1 if np.any(probs > 0) else 1
        if used == 1:
            return {"lo": float(self.lo[i]), "hi": float(self.hi[i])}
        return {"edges": self.block.edges[:used + 1, i].tolist(), "probs": probs[:used].tolist()}

    def event(self, i: int, stream: str, template_names: Sequence[str]) -> dict[str, Any]:
        """Row ``i`` as an event in the input's shape, with its attributes (the row's own
        mapping, not a copy)."""
        return {"stream": stream, "id": self.ids[i], "ts": self.timestamp(i, template_names), "attrs": self.attrs[i]}
