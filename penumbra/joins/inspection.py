"""What a join shows of its work: near misses, partition samples, newly buffered
events, and the probability curve of one event (the dashboard's inspector)."""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from ..errors import ValidationError
from ..events import Event
from ..probability import p_within
from ..timestamps import Histogram
from .matches import FoundPairs
from .rows import Rows
from .sides import Side

__all__ = ["BUFFERED_SAMPLES", "Inspection", "NEAR_MISS_BIN", "NEAR_MISS_SAMPLES", "PARTITION_SAMPLES"]

NEAR_MISS_SAMPLES = 20
#: Near misses are counted by probability in bins of this width (a what-if is exact at
#: thresholds on this grid).
NEAR_MISS_BIN = 0.01
PARTITION_SAMPLES = 8
#: newly buffered events of each side an observation carries, as events (the inspector's markers)
BUFFERED_SAMPLES = 8


def _range_of(x: float, ranges: dict[str, list[float]]) -> str | None:
    """The probing range (``lpr``, ``sr``, ``rpr``) holding a partner's max time ``x``."""
    for name in ("lpr", "sr", "rpr"):
        lo, hi = ranges[name]
        if lo <= x <= hi:
            return name
    return None


class Inspection:
    """Observations of the join's work, mixed into :class:`~.operator.JoinOperator`."""

    def _near_misses(self, a: Rows, b: Rows, ia: np.ndarray, ib: np.ndarray, probs: np.ndarray, near) -> None:
        """Pairs with ``floor <= P < threshold``: counted, binned by probability, the first
        few kept as samples."""
        self.totals["near_misses"] += len(ia)
        self._near_parts.append(FoundPairs(a, ia, b, ib, probs))
        # a probability on a bin edge (0.57 is 56.99999... * 0.01) belongs to the bin above it
        bins = np.minimum((probs / NEAR_MISS_BIN + 1e-9).astype(np.int64), len(self._near_bins) - 1)
        self._near_bins += np.bincount(bins, minlength=len(self._near_bins))
        for m in range(min(len(ia), max(0, NEAR_MISS_SAMPLES - len(near)))):
            near.append({"events": {self.names[0]: a.ids[ia[m]], self.names[1]: b.ids[ib[m]]},
                         "prob": float(probs[m])})

    def _pair_partitions(self, lo: np.ndarray, hi: np.ndarray, template: np.ndarray,
                         partner_hi: np.ndarray) -> list[str | None]:
        """For pairs of an A event (support ``lo``..``hi``, ``template`` index or -1) and a B
        event (max time ``partner_hi``): the probing range of the A event holding the B
        event's max time, as :meth:`_ranges` and the inspector place a partner: ``lpr``,
        ``sr`` or ``rpr`` (the first that holds it, bounds included), None outside them all."""
        d = self.d
        pi = self.sides[1].longest_timestamp
        pi = math.inf if pi is None else pi
        lpr_lo, lpr_hi = lo - d, hi - d + pi
        sr_lo, sr_hi = hi - d + pi, lo + d
        rpr_lo, rpr_hi = lo + d, hi + d + pi
        tables = self.tables
        if tables is not None:
            templated = (template >= 0) & (template < len(tables.max_a))
            if templated.any():
                u = template[templated]
                shift = hi[templated] - tables.max_a[u]
                lpr_lo, lpr_hi, sr_lo, sr_hi, rpr_lo, rpr_hi = (np.array(x, dtype=float, copy=True) for x in (
                    lpr_lo, lpr_hi, sr_lo, sr_hi, rpr_lo, rpr_hi))
                lpr_lo[templated] = tables.left.min(axis=1)[u] + shift - d
                lpr_hi[templated] = tables.left.max(axis=1)[u] + shift - d
                rpr_lo[templated] = tables.right.min(axis=1)[u] + shift + d
                rpr_hi[templated] = tables.right.max(axis=1)[u] + shift + d
                sr_lo[templated] = lpr_hi[templated]
                sr_hi[templated] = rpr_lo[templated]
        x = partner_hi
        place = np.select([(x >= lpr_lo) & (x <= lpr_hi), (x >= sr_lo) & (x <= sr_hi), (x >= rpr_lo) & (x <= rpr_hi)],
                          [0, 1, 2], 3)
        names = ("lpr", "sr", "rpr", None)
        return [names[k] for k in place.tolist()]

    def _partition_sample(self, new: list[Rows], count: int) -> list[dict]:
        """Partition bounds (on the partner's max time) of a few arriving events."""
        out = []
        for k in (0, 1):
            partner = self.sides[1 - k]
            for i in range(min(count - len(out), len(new[k]))):
                out.append({"stream": self.sides[k].var, "id": new[k].ids[i],
                            **self._ranges(k, new[k].lo[i], new[k].hi[i], int(new[k].template[i]), partner)})
        return out

    def _as_events(self, k: int, rows: Rows, count: int) -> list[dict]:
        """The first ``count`` of ``rows`` (side ``k``) as events in the input's shape, with
        their timestamps as admitted (:meth:`Rows.timestamp`)."""
        side = self.sides[k]
        return [{"stream": side.stream, "id": rows.ids[i], "ts": rows.timestamp(i, side.template_names)}
                for i in range(min(count, len(rows)))]

    def _ranges(self, k: int, lo: float, hi: float, template: int, partner: Side) -> dict:
        """LPR / SR / RPR: Theorem 3 for a template event; otherwise Eqs. 4-6, with the
        partner stream's pi (or no bound when it has none)."""
        if template >= 0 and self.tables is not None:
            return (self.tables if k == 0 else self.tables_ba).probing_ranges(template, hi, self.d)
        pi = partner.longest_timestamp
        pi = math.inf if pi is None else pi
        return {"lpr": [lo - self.d, hi - self.d + pi], "sr": [hi - self.d + pi, lo + self.d],
                "rpr": [lo + self.d, hi + self.d + pi]}

    def probability_curve(self, event: Event, points: int = 200,
                          partners: Sequence[Event] = ()) -> dict[str, Any]:
        """Figure 3 of the PTJoin paper (Figure 1 of the interval paper for intervals):
        ``P(|X_e - X_partner| <= d)`` as the partner's max time ``x`` moves, one curve per
        partner template (or for the partner stream's shortest and longest interval), with
        the threshold and the probing ranges. ``partners`` (events of the other stream,
        e.g. an observation's ``buffered`` sample) come back as points: each one's max time,
        its probability with ``event``, and the probing range its max time falls in (None:
        outside them all)."""
        k = next((k for k, s in enumerate(self.sides) if s.stream == event.stream.casefold()), None)
        if k is None:
            raise ValidationError("stream", f"{event.stream!r} is not a source of this join")
        side, partner = self.sides[k], self.sides[1 - k]
        admitted = side.admit(event)
        if isinstance(admitted, str):
            raise ValidationError("ts", admitted)
        histogram, template = admitted
        shapes = dict(partner.params.templates)
        if not shapes:
            lengths = {partner.params.shortest, partner.params.longest} - {None} or {histogram.length}
            shapes = {f"length {length:g}": Histogram.uniform(-length, 0.0) for length in sorted(lengths) if length > 0}
        reach = max((h.length for h in shapes.values()), default=0.0)
        x = np.linspace(histogram.lo - self.d - reach, histogram.hi + self.d + reach, points)
        curves = {}
        for name, shape in shapes.items():
            moved = [shape.shift(t - shape.hi) for t in x]
            curves[name] = [p_within(histogram, h, self.d) for h in moved]
        ranges = self._ranges(k, histogram.lo, histogram.hi, template, partner)
        points_out = []
        for other in partners:
            if other.stream.casefold() != partner.stream:
                raise ValidationError("partners", f"{other.id!r} is of stream {other.stream!r}, not of the partner "
                                                  f"stream {partner.stream!r}")
            got = partner.admit(other)
            if isinstance(got, str):
                raise ValidationError("partners", f"{other.id!r}: {got}")
            h = got[0]
            points_out.append({"id": other.id, "x": h.hi, "prob": p_within(histogram, h, self.d),
                               "partition": _range_of(h.hi, ranges)})
        return {"x": x.tolist(), "curves": curves, "threshold": self.threshold, "floor": self.floor,
                **ranges, "partners": points_out}
