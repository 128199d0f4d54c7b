"""The look-up table of ``lazy_lookup``: probabilities of pairs keyed by their geometry."""

from __future__ import annotations

import numpy as np

from ..probability import p_within_block
from .rows import Rows

__all__ = ["LOOKUP_CAPACITY", "LookupTable", "MAX_SHAPES"]

LOOKUP_CAPACITY = 1 << 20      # geometries remembered by lazy_lookup before it starts afresh
MAX_SHAPES = 1 << 11           # distinct shapes per side that lazy_lookup tells apart


class LookupTable:
    """Exact probabilities of candidate pairs, mixed into :class:`~.operator.JoinOperator`:
    its ``lookup`` and ``shape_ids`` are the table and the shape ids it keys on."""

    def _probabilities(self, a: Rows, b: Rows, ia: np.ndarray, ib: np.ndarray) -> np.ndarray:
        """Exact ``P(|X_a - X_b| <= d)`` for the pairs.

        ``lazy_lookup`` keeps a look-up table of probabilities keyed by the pair's exact
        geometry -- both shapes (template, or interval length) and the offset of the max
        times -- as sorted int64 keys: each geometry is computed once, later pairs with
        the same geometry are answered by a binary search.
        """
        if self.strategy != "lazy_lookup":
            return p_within_block(a.block.take(ia), b.block.take(ib), self.d)
        values = np.empty(len(ia))
        keys = self._geometry_keys(a, b, ia, ib)
        direct = np.flatnonzero(keys < 0)
        if len(direct):
            values[direct] = p_within_block(a.block.take(ia[direct]), b.block.take(ib[direct]), self.d)
        shared = np.flatnonzero(keys >= 0)
        unique, first, inverse = np.unique(keys[shared], return_index=True, return_inverse=True)
        table_keys, table_values = self.lookup
        at = np.minimum(np.searchsorted(table_keys, unique), max(len(table_keys) - 1, 0))
        known = (table_keys[at] == unique) if len(table_keys) else np.zeros(len(unique), dtype=bool)
        results = np.where(known, table_values[at] if len(table_keys) else 0.0, 0.0)
        todo = np.flatnonzero(~known)
        if len(todo):
            rows = shared[first[todo]]
            results[todo] = p_within_block(a.block.take(ia[rows]), b.block.take(ib[rows]), self.d)
            if len(table_keys) + len(todo) > LOOKUP_CAPACITY:
                table_keys, table_values = table_keys[:0], table_values[:0]
            merged_keys = np.concatenate([table_keys, unique[todo]])
            order = np.argsort(merged_keys, kind="stable")
            self.lookup = (merged_keys[order], np.concatenate([table_values, results[todo]])[order])
        values[shared] = results[inverse.reshape(-1)]
        self.totals["lookup_hits"] += len(shared) - len(todo)
        return values

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
        """Stable small ids of the shapes of ``rows[index]``: a template's index, or an id per
        distinct interval length; -1 for anything else."""
        template = rows.template[index]
        ids = np.where(template >= 0, template, -1)
        if rows.block.buckets == 1:
            explicit = np.flatnonzero(template < 0)
            lengths = rows.hi[index[explicit]] - rows.lo[index[explicit]]
            distinct, where = np.unique(lengths, return_inverse=True)
            known = self.shape_ids[k]
            first_free = len(self.sides[k].templates)
            for length in distinct.tolist():
                if length not in known and first_free + len(known) < MAX_SHAPES:
                    known[length] = first_free + len(known)
            ids[explicit] = np.array([known.get(length, -1) for length in distinct.tolist()],
                                     dtype=np.int64)[where.reshape(-1)] if len(distinct) else ids[explicit]
        return ids.astype(np.int64)
