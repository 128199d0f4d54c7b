"""What a join shows of its work, for the dashboard's inspector and the threshold tuner.

* :class:`NearMisses`: a block's pairs with ``floor <= P < threshold``, counted, binned by
  probability (exact what-ifs at thresholds on the bins' grid) and sampled;
* :class:`ProbingRanges`: an event's partitions on its partner's max time, LPR / SR / RPR
  (the PTJoin paper's Theorem 3 for a template event, from ``stime(phi_u, phi_v, delta)``;
  its Eqs. 4-6 otherwise), for a few arriving events and for every match
  (:attr:`~penumbra.operator.Match.partition`);
* :func:`newly_buffered`: a few buffered events in the input's shape (the inspector's markers);
* :func:`probability_curve`: the PTJoin paper's Figure 3 for one event.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from ..errors import ValidationError
from ..events import Event
from ..probability import p_within
from ..timestamps import Histogram
from ..tuning import NEAR_MISS_BIN
from .matches import FoundPairs
from .partitions import TemplateTables
from .rows import Rows
from .sides import Side

__all__ = ["BUFFERED_SAMPLES", "NEAR_MISS_SAMPLES", "NearMisses", "PARTITION_SAMPLES", "ProbingRanges",
           "near_miss_bins", "near_miss_histogram", "newly_buffered", "probability_curve"]

NEAR_MISS_SAMPLES = 20
PARTITION_SAMPLES = 8
#: newly buffered events of each side an observation carries, as events (the inspector's markers)
BUFFERED_SAMPLES = 8


def near_miss_bins(probs: np.ndarray) -> np.ndarray:
    """How many of ``probs`` fall in each bin of width :data:`NEAR_MISS_BIN`."""
    count = round(1 / NEAR_MISS_BIN)
    # a probability on a bin edge (0.57 is 56.99999... * 0.01) belongs to the bin above it
    return np.bincount(np.minimum((probs / NEAR_MISS_BIN + 1e-9).astype(np.int64), count - 1), minlength=count)


def near_miss_histogram(bins: np.ndarray) -> dict[str, int]:
    """The count of each bin that has any, by its lower edge (``{"0.55": 3, ...}``)."""
    return {f"{k * NEAR_MISS_BIN:.2f}": int(count) for k, count in enumerate(bins) if count}


class NearMisses:
    """A block's near misses: pairs with ``floor <= P < threshold``, counted in ``totals``
    (the operator's counters), binned by probability (:func:`near_miss_bins`), kept as
    parts (what a shared plan splits) and the first few as samples with their events' ids
    (``names``: the query's variables)."""

    def __init__(self, names: tuple[str, str], totals: dict[str, int]):
        self.names = names
        self.totals = totals
        self.parts: list[FoundPairs] = []
        self.bins = np.zeros(round(1 / NEAR_MISS_BIN), dtype=np.int64)
        self.samples: list[dict] = []

    def add(self, a: Rows, b: Rows, ia: np.ndarray, ib: np.ndarray, probs: np.ndarray) -> None:
        """The pairs ``(a[ia], b[ib])``, of probabilities ``probs``."""
        self.totals["near_misses"] += len(ia)
        self.parts.append(FoundPairs(a, ia, b, ib, probs))
        self.bins += near_miss_bins(probs)
        for m in range(min(len(ia), max(0, NEAR_MISS_SAMPLES - len(self.samples)))):
            self.samples.append({"events": {self.names[0]: a.ids[ia[m]], self.names[1]: b.ids[ib[m]]},
                                 "prob": float(probs[m])})

    def histogram(self) -> dict[str, int]:
        """:func:`near_miss_histogram` of the block."""
        return near_miss_histogram(self.bins)


class ProbingRanges:
    """The partitions of an event of side ``k`` on the partner side's max time at one
    threshold: LPR / SR / RPR by Theorem 3 for a template event (``tables``: Theorem 2's
    tables for A events, ``tables_ba`` the same with the roles swapped; None: no template
    shortcut), else by Eqs. 4-6 with the partner stream's pi (no bound when it has none)."""

    def __init__(self, d: float, sides: tuple[Side, Side], tables: TemplateTables | None,
                 tables_ba: TemplateTables | None):
        self.d = d
        self.sides = sides
        self.tables = tables
        self.tables_ba = tables_ba

    def of_event(self, k: int, lo: float, hi: float, template: int) -> dict[str, list[float]]:
        """LPR / SR / RPR of an event of side ``k`` (support ``lo``..``hi``, ``template``
        index or -1)."""
        if template >= 0 and self.tables is not None:
            return (self.tables if k == 0 else self.tables_ba).probing_ranges(template, hi, self.d)
        pi = self.sides[1 - k].longest_timestamp
        pi = math.inf if pi is None else pi
        return {"lpr": [lo - self.d, hi - self.d + pi], "sr": [hi - self.d + pi, lo + self.d],
                "rpr": [lo + self.d, hi + self.d + pi]}

    def of_pairs(self, lo: np.ndarray, hi: np.ndarray, template: np.ndarray,
                 partner_hi: np.ndarray) -> list[str | None]:
        """For pairs of an A event (support ``lo``..``hi``, ``template`` index or -1) and a B
        event (max time ``partner_hi``): the probing range of the A event holding the B
        event's max time, as :meth:`of_event` and the inspector place a partner: ``lpr``,
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

    def samples(self, new: list[Rows], count: int) -> list[dict]:
        """The partitions of up to ``count`` arriving events (``new``: rows of A and of B)."""
        out = []
        for k in (0, 1):
            for i in range(min(count - len(out), len(new[k]))):
                out.append({"stream": self.sides[k].var, "id": new[k].ids[i],
                            **self.of_event(k, new[k].lo[i], new[k].hi[i], int(new[k].template[i]))})
        return out


def newly_buffered(side: Side, rows: Rows, count: int) -> list[dict]:
    """The first ``count`` of ``rows`` (of ``side``) as events in the input's shape, with
    their timestamps as admitted (:meth:`Rows.timestamp`)."""
    return [{"stream": side.stream, "id": rows.ids[i], "ts": rows.timestamp(i, side.template_names)}
            for i in range(min(count, len(rows)))]


def probability_curve(event: Event, ranges: ProbingRanges, threshold: float, floor: float, points: int = 200,
                      partners: Sequence[Event] = ()) -> dict[str, Any]:
    """Figure 3 of the PTJoin paper (Figure 1 of the interval paper for intervals):
    ``P(|X_e - X_partner| <= d)`` as the partner's max time ``x`` moves, one curve per
    partner template (or for the partner stream's shortest and longest interval), with
    the threshold and the probing ranges. ``partners`` (events of the other stream,
    e.g. an observation's ``buffered`` sample) come back as points: each one's max time,
    its probability with ``event``, and the probing range its max time falls in (None:
    outside them all). ``ranges`` gives the join's sides, window and probing ranges."""
    sides, d = ranges.sides, ranges.d
    k = next((k for k, s in enumerate(sides) if s.stream == event.stream.casefold()), None)
    if k is None:
        raise ValidationError("stream", f"{event.stream!r} is not a source of this join")
    side, partner = sides[k], sides[1 - k]
    admitted = side.admit(event)
    if isinstance(admitted, str):
        raise ValidationError("ts", admitted)
    histogram, template = admitted
    shapes = dict(partner.params.templates)
    if not shapes:
        lengths = {partner.params.shortest, partner.params.longest} - {None} or {histogram.length}
        shapes = {f"length {length:g}": Histogram.uniform(-length, 0.0) for length in sorted(lengths) if length > 0}
    reach = max((h.length for h in shapes.values()), default=0.0)
    x = np.linspace(histogram.lo - d - reach, histogram.hi + d + reach, points)
    curves = {}
    for name, shape in shapes.items():
        moved = [shape.shift(t - shape.hi) for t in x]
        curves[name] = [p_within(histogram, h, d) for h in moved]
    event_ranges = ranges.of_event(k, histogram.lo, histogram.hi, template)
    points_out = []
    for other in partners:
        if other.stream.casefold() != partner.stream:
            raise ValidationError("partners", f"{other.id!r} is of stream {other.stream!r}, not of the partner "
                                              f"stream {partner.stream!r}")
        got = partner.admit(other)
        if isinstance(got, str):
            raise ValidationError("partners", f"{other.id!r}: {got}")
        h = got[0]
        points_out.append({"id": other.id, "x": h.hi, "prob": p_within(histogram, h, d),
                           "partition": _range_of(h.hi, event_ranges)})
    return {"x": x.tolist(), "curves": curves, "threshold": threshold, "floor": floor,
            **event_ranges, "partners": points_out}


def _range_of(x: float, ranges: dict[str, list[float]]) -> str | None:
    """The probing range (``lpr``, ``sr``, ``rpr``) holding a partner's max time ``x``."""
    for name in ("lpr", "sr", "rpr"):
        lo, hi = ranges[name]
        if lo <= x <= hi:
            return name
    return None
