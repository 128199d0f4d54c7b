"""The look-up table of ``lazy_lookup``: exact probabilities of pairs, keyed by their geometry.

The interval paper's look-up (Algorithms 6-7) reuses an earlier pair's answer to decide a
pair against the threshold (Corollary 2). Penumbra reports every match's probability, so
the table remembers probabilities instead: a pair's probability depends only on both
shapes (a template phi_u, or an interval's length) and the offset of the max times, so
each such geometry is computed once and later pairs with it are answered by a binary
search. The table is part of the operator's state (``lookup`` and ``shape_ids``).
"""

from __future__ import annotations

import numpy as np

from ..probability import p_within_block
from .rows import Rows

__all__ = ["LOOKUP_CAPACITY", "LookupTable", "MAX_SHAPES"]

LOOKUP_CAPACITY = 1 << 20      # geometries remembered by lazy_lookup before it starts afresh
MAX_SHAPES = 1 << 11           # distinct shapes per side that lazy_lookup tells apart


class LookupTable:
    """Probabilities by geometry: ``entries`` are the sorted int64 geometry keys and their
    probabilities; ``shape_ids`` per side, an interval length -> its shape id (after the
    side's ``template_counts`` template indices)."""

    def __init__(self, template_counts: tuple[int, int],
                 entries: tuple[np.ndarray, np.ndarray] | None = None,
                 shape_ids: tuple[dict[float, int], dict[float, int]] | None = None):
        self.template_counts = template_counts
        self.entries = (np.empty(0, dtype=np.int64), np.empty(0)) if entries is None else entries
        self.shape_ids = ({}, {}) if shape_ids is None else shape_ids

    def probabilities(self, a: Rows, b: Rows, ia: np.ndarray, ib: np.ndarray, d: float) -> tuple[np.ndarray, int]:
        """Exact ``P(|X_a - X_b| <= d)`` for the pairs, and how many were found in the table.
        A pair without a geometry (:meth:`_geometry_keys`) is computed and not remembered."""
        values = np.empty(len(ia))
        keys = self._geometry_keys(a, b, ia, ib)
        direct = np.flatnonzero(keys < 0)
        if len(direct):
            values[direct] = p_within_block(a.block.take(ia[direct]), b.block.take(ib[direct]), d)
        shared = np.flatnonzero(keys >= 0)
        unique, first, inverse = np.unique(keys[shared], return_index=True, return_inverse=True)
        table_keys, table_values = self.entries
        at = np.minimum(np.searchsorted(table_keys, unique), max(len(table_keys) - 1, 0))
        known = (table_keys[at] == unique) if len(table_keys) else np.zeros(len(unique), dtype=bool)
        results = np.where(known, table_values[at] if len(table_keys) else 0.0, 0.0)
        todo = np.flatnonzero(~known)
        if len(todo):
            rows = shared[first[todo]]
            results[todo] = p_within_block(a.block.take(ia[rows]), b.block.take(ib[rows]), d)
            if len(table_keys) + len(todo) > LOOKUP_CAPACITY:
                table_keys, table_values = table_keys[:0], table_values[:0]
            merged_keys = np.concatenate([table_keys, unique[todo]])
            order = np.argsort(merged_keys, kind="stable")
            self.entries = (merged_keys[order], np.concatenate([table_values, results[todo]])[order])
        values[shared] = results[inverse.reshape(-1)]
        return values, len(shared) - len(todo)

    def _geometry_keys(self, a: Rows, b: Rows, ia: np.ndarray, ib: np.ndarray) -> np.ndarray:
        """Per pair, an int64 naming its geometry (shape ids and an integral offset of the
        max times), or -1 where there is none (an explicit multi-bucket histogram, an
        offset off the integer grid, too many distinct lengths)."""
        shape_a = self._shape_ids(0, a, ia)
        shape_b = self._shape_ids(1, b, ib)
        offset = b.hi[ib] - a.hi[ia]
        usable = (shape_a >= 0) & (shape_b >= 0) & (offset == np.round(offset)) & (np.abs(offset) < 2.0 ** 40)
        keys = ((shape_a * MAX_SHAPES + shape_b) << 41) + (np.where(usable, offset, 0).astype(np.int64) + (1 << 40))
        return np.where(usable, keys, -1)

    def _shape_ids(self, k: int, rows: Rows, index: np.ndarray) -> np.ndarray:
        """Stable small ids of the shapes of ``rows[index]`` (side ``k``): a template's index,
        or an id per distinct interval length; -1 for anything else."""
        template = rows.template[index]
        ids = np.where(template >= 0, template, -1)
        if rows.block.buckets == 1:
            explicit = np.flatnonzero(template < 0)
            lengths = rows.hi[index[explicit]] - rows.lo[index[explicit]]
            distinct, where = np.unique(lengths, return_inverse=True)
            known = self.shape_ids[k]
            first_free = self.template_counts[k]
            for length in distinct.tolist():
                if length not in known and first_free + len(known) < MAX_SHAPES:
                    known[length] = first_free + len(known)
            ids[explicit] = np.array([known.get(length, -1) for length in distinct.tolist()],
                                     dtype=np.int64)[where.reshape(-1)] if len(distinct) else ids[explicit]
        return ids.astype(np.int64)
