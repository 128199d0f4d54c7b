"""The probabilistic timing join operator (PTJoin; the interval paper's five strategies).

Pairs ``a`` from stream A and ``b`` from stream B are a match when
``P(|X_a - X_b| <= d) >= delta``. Every strategy returns exactly the pairs a brute-force
join of all non-late events would, with their exact probabilities; they differ in how
much work it takes:

``simple``       Algorithm 1: each event against every buffered partner, all probed; buffers unsorted.
``ssort``        Algorithm 1 on max-time sorted buffers (invalidation cuts a prefix).
``eager``        Algorithms 2-3: each event's partitions (void / certain / Theorem 2) on the
                 sorted buffer, only the probing ranges probed.
``lazy``         Algorithms 4-5: a whole block (micro-batch) against the buffers at once,
                 partitions and probes vectorised.
``lazy_lookup``  Algorithms 6-7 adapted: ``lazy`` plus a look-up table of probabilities
                 keyed by the pair's exact geometry (templates or lengths, and offset), so a
                 probe whose answer is known is not computed again.

Time is the data's: the watermark is the largest max time seen. An event whose max time
plus its stream's max delay D is below the watermark when it arrives is late: not joined,
returned with the reason. Buffers keep an event while some future, non-late partner could
still reach the threshold floor (Theorem 4 for template streams; the zero-probability
bound otherwise), so moving the threshold anywhere down to the floor loses no match.
"""

from __future__ import annotations

import math
import pickle
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Iterator, Sequence

import numpy as np

from ..errors import ValidationError
from ..events import Event, StreamParams, Streams, parse_streams
from ..operator import BlockResult, Late, Match, Operator, check_threshold
from ..probability import p_within, p_within_block
from ..query import JoinQuery
from ..query.ast import evaluate
from ..timestamps import Histogram
from .partitions import TemplateTables, certain_pairs, void_pairs
from .rows import Rows

__all__ = ["JoinMatches", "JoinOperator", "STRATEGIES"]

STRATEGIES = ("simple", "ssort", "eager", "lazy", "lazy_lookup")
DEFAULT_STRATEGY = "lazy"
DEFAULT_FLOOR = 0.05
NEAR_MISS_SAMPLES = 20
#: Near misses are counted by probability in bins of this width (a what-if is exact at
#: thresholds on this grid).
NEAR_MISS_BIN = 0.01
PARTITION_SAMPLES = 8
#: newly buffered events of each side an observation carries, as events (the inspector's markers)
BUFFERED_SAMPLES = 8
LOOKUP_CAPACITY = 1 << 20      # geometries remembered by lazy_lookup before it starts afresh
MAX_SHAPES = 1 << 11           # distinct shapes per side that lazy_lookup tells apart
_COUNTERS = ("events", "matches", "late", "rejected", "filtered", "unkeyed", "other_group", "ignored",
             "pairs", "void", "certain", "decided_by_templates", "probed", "lookup_hits",
             "near_misses", "evicted")


class JoinMatches(Sequence[Match]):
    """The matches of one block, kept as index arrays into the buffers' id arrays;
    ids are gathered and :class:`Match` objects made only when asked for."""

    def __init__(self, names: tuple[str, str], parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]]):
        self.names = names
        self._parts = parts          # (A ids, A rows, B ids, B rows, probabilities)
        self._length = sum(len(part[4]) for part in parts)

    def __len__(self) -> int:
        return self._length

    @cached_property
    def a_ids(self) -> np.ndarray:
        return self._gather(0)

    @cached_property
    def b_ids(self) -> np.ndarray:
        return self._gather(2)

    @cached_property
    def probs(self) -> np.ndarray:
        return np.concatenate([part[4] for part in self._parts]) if self._parts else np.empty(0)

    def _gather(self, k: int) -> np.ndarray:
        if not self._parts:
            return np.empty(0, dtype=object)
        return np.concatenate([part[k][part[k + 1]] for part in self._parts])

    def __getitem__(self, k):
        if isinstance(k, slice):
            return [self[i] for i in range(*k.indices(len(self)))]
        return Match({self.names[0]: self.a_ids[k], self.names[1]: self.b_ids[k]}, float(self.probs[k]))

    def __iter__(self) -> Iterator[Match]:
        a, b = self.names
        for a_id, b_id, prob in zip(self.a_ids.tolist(), self.b_ids.tolist(), self.probs.tolist()):
            yield Match({a: a_id, b: b_id}, prob)


@dataclass
class _Side:
    """One source of the join: its stream, parameters, templates, filters and key."""

    var: str
    stream: str
    params: StreamParams
    filters: tuple = ()
    key: tuple[str, ...] = ()
    template_names: list[str] = field(default_factory=list)

    def __post_init__(self):
        self.template_names = list(self.params.templates)
        self.template_index = {name: k for k, name in enumerate(self.template_names)}
        self.templates = [self.params.templates[name] for name in self.template_names]


@dataclass
class _Pairs:
    """Candidate pairs ``(A row, B row)`` of one partner computation."""

    a: Rows
    b: Rows
    ia: np.ndarray
    ib: np.ndarray


def _range_of(x: float, ranges: dict[str, list[float]]) -> str | None:
    """The probing range (``lpr``, ``sr``, ``rpr``) holding a partner's max time ``x``."""
    for name in ("lpr", "sr", "rpr"):
        lo, hi = ranges[name]
        if lo <= x <= hi:
            return name
    return None


class JoinOperator(Operator):
    """``P(|X_A - X_B| <= d) >= delta`` over two streams; see the module docstring."""

    def __init__(self, query: JoinQuery, streams: Streams, *, floor: float = DEFAULT_FLOOR):
        self.query = query
        self.streams = streams
        self.d = query.window
        self.strategy = query.strategy or DEFAULT_STRATEGY
        if self.strategy not in STRATEGIES:
            raise ValidationError("strategy", f"unknown strategy {self.strategy!r}")
        keys_a = tuple(k for k, _ in query.keys)
        keys_b = tuple(k for _, k in query.keys)
        self.sides = (
            _Side(query.left.var, query.left.stream.casefold(), streams.get_or_default(query.left.stream),
                  query.filters.get(query.left.var, ()), keys_a),
            _Side(query.right.var, query.right.stream.casefold(), streams.get_or_default(query.right.stream),
                  query.filters.get(query.right.var, ()), keys_b))
        self.floor = check_threshold(floor, "floor")
        self.threshold = check_threshold(query.threshold)
        if self.threshold < self.floor:
            self.floor = self.threshold
        self.watermark = -math.inf
        self.buffers: dict[tuple, list[Rows]] = {}
        self.lookup = (np.empty(0, dtype=np.int64), np.empty(0))
        self.shape_ids: tuple[dict[float, int], dict[float, int]] = ({}, {})
        self.totals = dict.fromkeys(_COUNTERS, 0)
        self.self_join = self.sides[0].stream == self.sides[1].stream
        self._build_tables()

    # --- configuration -----------------------------------------------------------------

    @property
    def names(self) -> tuple[str, str]:
        return self.sides[0].var, self.sides[1].var

    def _pi(self, side: _Side) -> float | None:
        return side.params.longest

    def _build_tables(self) -> None:
        """Theorem 2 tables at the threshold and Theorem 4 offsets at the floor (template
        streams only, and only where Lemma 2 holds: ``d >= max(pi_A, pi_B)``)."""
        a, b = self.sides
        pis = [self._pi(a), self._pi(b)]
        self.templates_apply = bool(a.templates and b.templates and None not in pis and self.d >= max(pis))
        self._threshold_tables()
        self.floor_tables = TemplateTables.build(a.templates, b.templates, self.floor) \
            if self.templates_apply else None
        # Theorem 4, both ways: the offset for evicting B by future A events, and A by future B.
        self.t_min = (self.floor_tables.t_min(), TemplateTables.build(b.templates, a.templates, self.floor).t_min()) \
            if self.templates_apply and a.params.template_only and b.params.template_only else None

    def _threshold_tables(self) -> None:
        """Theorem 2 tables at the current threshold, for A events (``tables``) and, for
        B events' probing ranges, with the roles swapped (``tables_ba``)."""
        a, b = self.sides
        self.tables = TemplateTables.build(a.templates, b.templates, self.threshold) \
            if self.templates_apply else None
        self.tables_ba = TemplateTables.build(b.templates, a.templates, self.threshold) \
            if self.templates_apply else None

    def set_threshold(self, threshold: float) -> None:
        threshold = check_threshold(threshold)
        if threshold < self.floor:
            raise ValidationError("threshold", f"must be >= the buffer floor {self.floor!r}: events "
                                  f"that could only match below it are not kept")
        self.threshold = threshold
        self._threshold_tables()

    # --- admission ---------------------------------------------------------------------

    def _admit(self, side: _Side, event: Event) -> tuple[Histogram, int] | str:
        """The event's histogram and template index, or why it cannot be joined."""
        if event.template is not None:
            if event.template not in side.template_index:
                return f"ts.template: unknown template {event.template!r} for stream {side.params.name!r}"
            ts = event.ts
            return ts if type(ts) is Histogram else event.histogram, side.template_index[event.template]
        if side.params.template_only:
            return (f"ts: stream {side.params.name!r} declares templates and no pi, so a join reads "
                    f"only template timestamps from it")
        try:
            histogram = event.histogram
        except ValidationError as error:
            return str(error)
        if side.params.pi is not None and histogram.length > side.params.pi * (1 + 1e-12):
            return f"ts: length {histogram.length!r} exceeds the stream's pi {side.params.pi!r}"
        return histogram, -1

    def _key(self, side: _Side, event: Event) -> tuple | None:
        """The values of ``event``'s key attributes on ``side`` (``()`` for a join without
        equalities), or None when one is missing."""
        if len(side.key) == 1:
            value = event.attrs.get(side.key[0])
            return None if value is None else (value,)
        values = tuple([event.attrs.get(name) for name in side.key])
        if any(v is None for v in values):
            return None
        return values

    def _reading(self, stream: str, known: dict[str, list[int]]) -> list[int]:
        """The sides (0 for A, 1 for B) that read events of ``stream`` as spelled in them;
        ``known`` keeps the answer for the rest of a block."""
        sides = known.get(stream)
        if sides is None:
            folded = stream.casefold()
            sides = known[stream] = [k for k, side in enumerate(self.sides) if side.stream == folded]
        return sides

    # --- feeding -------------------------------------------------------------------------

    def feed(self, events: Sequence[Event]) -> BlockResult:
        before = dict(self.totals)
        late: list[Late] = []
        # per key: the new rows of A and of B, and (side, row) in arrival order
        arrivals: dict[tuple, tuple[list, list, list]] = {}
        # per block: the sides each stream name feeds, and the keys of other key groups
        reading: dict[str, list[int]] = {}
        foreign: set[tuple] = set()
        for event in events:
            self.totals["events"] += 1
            sides = self._reading(event.stream, reading)
            if not sides:
                self.totals["ignored"] += 1
                continue
            for k in sides:
                side = self.sides[k]
                admitted = self._admit(side, event)
                if isinstance(admitted, str):
                    self.totals["rejected"] += 1
                    late.append(Late(event, admitted))
                    continue
                histogram, template = admitted
                hi = histogram.hi
                if hi + side.params.max_delay < self.watermark:
                    self.totals["late"] += 1
                    late.append(Late(event, f"late: max time {hi!r} + max delay "
                                     f"{side.params.max_delay!r} is before the watermark {self.watermark!r}"))
                    continue
                if hi > self.watermark:
                    self.watermark = hi
                if side.filters:
                    bindings = {side.var: event.attrs}
                    if not all(evaluate(f, bindings) is True for f in side.filters):
                        self.totals["filtered"] += 1
                        continue
                values = self._key(side, event)
                if values is None:
                    self.totals["unkeyed"] += 1
                    continue
                # 1 and 1.0 are the same key; True is not 1.
                key = tuple([(type(v) is bool, v) for v in values])
                arrived = arrivals.get(key)
                if arrived is None:
                    # whether the key group owns a key is decided once per key and block
                    if key in foreign or self.key_group is not None and not self.key_group.owns(values):
                        foreign.add(key)
                        self.totals["other_group"] += 1
                        continue
                    arrived = arrivals[key] = ([], [], [])
                new_a, new_b, sequence = arrived
                mine = new_a if k == 0 else new_b
                sequence.append((k, len(mine)))
                mine.append((histogram, template, event.id))

        matches: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        near: list[dict] = []
        self._near_bins = np.zeros(round(1 / NEAR_MISS_BIN), dtype=np.int64)
        partitions: list[dict] = []
        buffered: list[list[dict]] = [[], []]
        if self.strategy in ("lazy", "lazy_lookup"):
            blocks = [self._join_keys(arrivals, matches, near)] if arrivals else []
        else:
            blocks = []
            for key, (new_a, new_b, sequence) in arrivals.items():
                rows = [Rows.build(*zip(*new)) if new else Rows.empty() for new in (new_a, new_b)]
                self._join_each(self.buffers.setdefault(key, [Rows.empty(), Rows.empty()]), rows, sequence,
                                matches, near)
                blocks.append(rows)
        for rows in blocks:
            if len(partitions) < PARTITION_SAMPLES:
                partitions.extend(self._partition_sample(rows, PARTITION_SAMPLES - len(partitions)))
            for k in (0, 1):
                if len(buffered[k]) < BUFFERED_SAMPLES:
                    buffered[k].extend(self._as_events(k, rows[k], BUFFERED_SAMPLES - len(buffered[k])))
        evicted = self.evict(self.watermark)
        result = JoinMatches(self.names, matches)
        self.totals["matches"] += len(result)
        observations = {
            "counters": {k: self.totals[k] - before[k] for k in _COUNTERS},
            "watermark": self.watermark,
            "buffers": self.buffer_lengths(),
            "buffer_bounds": self.buffer_bounds(),
            "evicted": evicted,
            "near_misses": near[:NEAR_MISS_SAMPLES],
            "near_miss_histogram": {f"{k * NEAR_MISS_BIN:.2f}": int(count)
                                    for k, count in enumerate(self._near_bins) if count},
            "partitions": partitions,
            "newly_buffered": buffered[0] + buffered[1],
            "threshold": self.threshold,
            "floor": self.floor,
        }
        return BlockResult(result, late, observations)

    # --- strategies --------------------------------------------------------------------

    def _join_keys(self, arrivals: dict[tuple, tuple[list, list, list]], matches, near) -> list[Rows]:
        """Algorithm 5 for every key of the block at once: new A against all of B (old and
        new), new B against old A, each event only against partners of its own key.

        The buffers of the block's keys are laid end to end, sorted by (key, max time), so a
        key's partners are one contiguous slice and one binary search serves every key; the
        per-key buffers are cut back out at the end. Returns the new rows of A and of B."""
        keys = list(arrivals)
        old: list[Rows] = []
        old_kid: list[np.ndarray] = []
        new: list[Rows] = []
        new_kid: list[np.ndarray] = []
        held = [self.buffers.get(key) or (Rows.empty(), Rows.empty()) for key in keys]
        for k in (0, 1):
            parts = [buffers[k] for buffers in held]
            old.append(Rows.concat(parts))
            old_kid.append(np.repeat(np.arange(len(keys)), [len(part) for part in parts]))
            items = [(item, kid) for kid, key in enumerate(keys) for item in arrivals[key][k]]
            new.append(Rows.build(*zip(*(item for item, _ in items))) if items else Rows.empty())
            new_kid.append(np.fromiter((kid for _, kid in items), dtype=np.int64, count=len(items)))
        all_b, kid_b = _merged(old[1], old_kid[1], new[1], new_kid[1])
        for base, base_kid, target, target_kid, base_is_a in ((new[0], new_kid[0], all_b, kid_b, True),
                                                              (new[1], new_kid[1], old[0], old_kid[0], False)):
            certain, uncertain = self._window_pairs(base, target, base_is_a=base_is_a, kids=(base_kid, target_kid))
            self._emit_certain(certain, matches)
            self._probe(uncertain, matches, near)
        all_a, kid_a = _merged(old[0], old_kid[0], new[0], new_kid[0])
        # each key's buffers as arrays of their own (a slice would keep the whole block alive)
        cuts = [np.searchsorted(kid, np.arange(len(keys) + 1)).tolist() for kid in (kid_a, kid_b)]
        for i, key in enumerate(keys):
            self.buffers[key] = [all_a.take(np.arange(cuts[0][i], cuts[0][i + 1])),
                                 all_b.take(np.arange(cuts[1][i], cuts[1][i + 1]))]
        return new

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
            pi = _longest_per_key(target, kids[1], len(base) and int(kids[0].max()) + 1)[kids[0]]
        start, stop, sr_start, sr_stop = _searches(target.hi, kids, [
            (base.lo - self.d, "right"), (base.hi + self.d + pi, "left"),
            (base.hi - self.d + pi, "left"), (base.lo + self.d, "right")])
        stop = np.maximum(stop, start)
        sr_start = np.clip(sr_start, start, stop)
        sr_stop = np.clip(sr_stop, sr_start, stop)
        certain = _range_pairs(sr_start, sr_stop)
        uncertain = [_range_pairs(start, sr_start), _range_pairs(sr_stop, stop)]
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
            matches.append((pairs.a.ids, ia, pairs.b.ids, ib, np.ones(len(ia))))

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
            missed = probed[(probs[probed] >= self.floor) & (probs[probed] < self.threshold)]
            self._near_misses(a, b, ia[missed], ib[missed], probs[missed], near)
        hit = np.flatnonzero(probs >= self.threshold)
        if len(hit):
            matches.append((a.ids, ia[hit], b.ids, ib[hit], probs[hit]))

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

    def _near_misses(self, a: Rows, b: Rows, ia: np.ndarray, ib: np.ndarray, probs: np.ndarray, near) -> None:
        """Pairs with ``floor <= P < threshold``: counted, binned by probability, the first
        few kept as samples."""
        self.totals["near_misses"] += len(ia)
        # a probability on a bin edge (0.57 is 56.99999... * 0.01) belongs to the bin above it
        bins = np.minimum((probs / NEAR_MISS_BIN + 1e-9).astype(np.int64), len(self._near_bins) - 1)
        self._near_bins += np.bincount(bins, minlength=len(self._near_bins))
        for m in range(min(len(ia), max(0, NEAR_MISS_SAMPLES - len(near)))):
            near.append({"events": {self.names[0]: a.ids[ia[m]], self.names[1]: b.ids[ib[m]]},
                         "prob": float(probs[m])})

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

    # --- eviction ------------------------------------------------------------------------

    def buffer_bounds(self) -> list[float]:
        """For each side, the max time below which a buffered event is obsolete: no future
        non-late event of the other side can reach the threshold floor with it."""
        bounds = []
        for k in (0, 1):
            other = self.sides[1 - k]
            horizon = self.watermark - other.params.max_delay - self.d
            if self.t_min is not None:
                # Theorem 4 (t_min[0] evicts B by future A events, t_min[1] evicts A by future B).
                bounds.append(horizon + self.t_min[1 - k])
            elif self._pi(other) is not None:
                bounds.append(horizon - self._pi(other))
            else:
                bounds.append(-math.inf)
        return bounds

    def evict(self, watermark: float) -> int:
        if watermark > self.watermark:
            self.watermark = watermark
        bounds = self.buffer_bounds()
        evicted = 0
        for key in list(self.buffers):
            buffers = self.buffers[key]
            for k in (0, 1):
                rows = buffers[k]
                if self.strategy == "simple":
                    keep = np.flatnonzero(rows.hi >= bounds[k])
                else:
                    keep = slice(int(np.searchsorted(rows.hi, bounds[k], side="left")), None)
                kept = rows.take(keep)
                evicted += len(rows) - len(kept)
                buffers[k] = kept
            if not len(buffers[0]) and not len(buffers[1]):
                del self.buffers[key]
        self.totals["evicted"] += evicted
        return evicted

    # --- key groups ---------------------------------------------------------------------

    def partition_keys(self) -> dict[str, list[tuple[str, ...]]]:
        roles: dict[str, list[tuple[str, ...]]] = {}
        for side in self.sides:
            roles.setdefault(side.stream, []).append(side.key)
        return roles

    def clock_of(self, events: Sequence[Event]) -> dict[str, float]:
        """The largest max time of the events either side admits (late ones lie below
        the watermark anyway, so the figure needs no state)."""
        watermark = -math.inf
        reading: dict[str, list[int]] = {}
        for event in events:
            for k in self._reading(event.stream, reading):
                admitted = self._admit(self.sides[k], event)
                if not isinstance(admitted, str) and admitted[0].hi > watermark:
                    watermark = admitted[0].hi
        return {"watermark": watermark} if watermark > -math.inf else {}

    def advance(self, clock: dict[str, float]) -> BlockResult:
        watermark = clock.get("watermark", -math.inf)
        if not watermark > self.watermark:
            return BlockResult()
        evicted = self.evict(watermark)
        return BlockResult(observations={
            "counters": {"evicted": evicted}, "watermark": self.watermark, "buffers": self.buffer_lengths(),
            "buffer_bounds": self.buffer_bounds()})

    def wake(self) -> dict[str, float]:
        """The watermark past which some buffered event falls behind its side's bound."""
        wake = math.inf
        bounds = self.buffer_bounds()
        for k in (0, 1):
            if bounds[k] == -math.inf:
                continue
            oldest = min((float(b[k].hi.min()) for b in self.buffers.values() if len(b[k])), default=math.inf)
            # the bound moves with the watermark; a little early is harmless, late is not
            reach = oldest - (bounds[k] - self.watermark)
            wake = min(wake, reach - 1e-9 * max(1.0, abs(reach), abs(self.watermark)))
        return {"watermark": wake} if wake < math.inf else {}

    def buffer_lengths(self) -> dict[str, int]:
        return {side.var: sum(len(b[k]) for b in self.buffers.values()) for k, side in enumerate(self.sides)}

    # --- the dashboard -------------------------------------------------------------------

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
        their timestamps as admitted: a template name and detection time, an interval, or
        a histogram."""
        side = self.sides[k]
        out = []
        for i in range(min(count, len(rows))):
            template = int(rows.template[i])
            if 0 <= template < len(side.template_names):
                ts: dict[str, Any] = {"detected": float(rows.hi[i]), "template": side.template_names[template]}
            else:
                probs = rows.block.probs[:, i]
                used = int(np.flatnonzero(probs > 0)[-1]) + 1 if np.any(probs > 0) else 1
                if used == 1:
                    ts = {"lo": float(rows.lo[i]), "hi": float(rows.hi[i])}
                else:
                    ts = {"edges": rows.block.edges[:used + 1, i].tolist(), "probs": probs[:used].tolist()}
            out.append({"stream": side.stream, "id": rows.ids[i], "ts": ts})
        return out

    def _ranges(self, k: int, lo: float, hi: float, template: int, partner: _Side) -> dict:
        """LPR / SR / RPR: Theorem 3 for a template event; otherwise Eqs. 4-6, with the
        partner stream's pi (or no bound when it has none)."""
        if template >= 0 and self.tables is not None:
            return (self.tables if k == 0 else self.tables_ba).probing_ranges(template, hi, self.d)
        pi = self._pi(partner)
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
        admitted = self._admit(side, event)
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
            got = self._admit(partner, other)
            if isinstance(got, str):
                raise ValidationError("partners", f"{other.id!r}: {got}")
            h = got[0]
            points_out.append({"id": other.id, "x": h.hi, "prob": p_within(histogram, h, self.d),
                               "partition": _range_of(h.hi, ranges)})
        return {"x": x.tolist(), "curves": curves, "threshold": self.threshold, "floor": self.floor,
                **ranges, "partners": points_out}

    @property
    def counters(self) -> dict[str, int | float]:
        return {**self.totals, "watermark": self.watermark, **{f"buffer_{k}": v for k, v in self.buffer_lengths().items()}}

    # --- state -----------------------------------------------------------------------------

    def snapshot(self) -> bytes:
        state = {
            "query": self.query, "streams": self.streams.to_json(), "floor": self.floor,
            "threshold": self.threshold, "watermark": self.watermark, "totals": self.totals,
            "lookup": self.lookup, "shape_ids": self.shape_ids, "key_group": self.key_group,
            "buffers": {key: [(r.hi, r.lo, r.block.edges, r.block.probs, r.template, r.ids) for r in rows]
                        for key, rows in self.buffers.items()},
        }
        return pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)

    @classmethod
    def restore(cls, data: bytes) -> JoinOperator:
        from ..timestamps import HistogramBlock

        state = pickle.loads(data)
        op = cls(state["query"], parse_streams(state["streams"]), floor=state["floor"])
        op.set_threshold(state["threshold"])
        op.watermark = state["watermark"]
        op.totals = state["totals"]
        op.key_group = state["key_group"]
        op.lookup = state["lookup"]
        op.shape_ids = state["shape_ids"]
        op.buffers = {key: [Rows(hi, lo, HistogramBlock(edges, probs), template, ids)
                            for hi, lo, edges, probs, template, ids in rows]
                      for key, rows in state["buffers"].items()}
        return op


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


def _longest_per_key(rows: Rows, kid: np.ndarray, keys: int) -> np.ndarray:
    """The longest timestamp of each key's rows (0 for a key without any); ``kid`` sorted."""
    longest = np.zeros(keys)
    if len(rows) and keys:
        starts = np.searchsorted(kid, np.arange(keys))
        stops = np.searchsorted(kid, np.arange(keys), side="right")
        held = np.flatnonzero(stops > starts)
        if len(held):
            longest[held] = np.maximum.reduceat(rows.hi - rows.lo, starts[held])
    return longest


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
