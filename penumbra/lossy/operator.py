"""The AYAC operator: an NFA with probabilistic arrival queues over a lossy stream.

NFA (section 4): one state V_1..V_l per *positive* component, V_0 initial and V_{l+1}
final. An edge V_i -> V_j skips the positives between them (missed by their readers)
and is labelled with the scoring function H_{i,j} of the run of components between
(:func:`~penumbra.lossy.model.run_score`); negatives have no state. Edges whose
G_{i,j}(W) = max_{T <= W} H_{i,j}(T) is below the threshold are removed.

A block of events (in increasing time) goes through the NFA state by state, each step
vectorised over the block: the events of negative components join their NAQs; the
arrivals at V_1 join its PAQ with u = G_{0,1}(W); then, for each later state in order,
its arrivals get the bound of section 5.1,

    v_new = max_i (max_k u_{i,k}) G_{i,j}(t_new - t_{i,0})

over V_i's queue (same hash key, earlier times, from this block too; t_{i,0} the
oldest entry inside the window, max_k u_{i,k} a max over the key's last two epochs of
W, see :mod:`.queues`), and are enqueued only if v_new reaches the threshold
(threshold pruning). Arrivals at the last state start backward match generation
(section 4.2, :mod:`.matches`).

The first and last positive components must be observed (the case section 4.2 treats);
any run of components between observed positives may be missed. Negatives before the
first positive must be absent from (t_last - W, t_first) (the NFA enters V_0 at
t_last - W, footnote 2), negatives after the last from (t_last, t_first + W): such a
match waits until the stream passes t_first + W (or the end of input).

Queues are hashed on the query's equality attributes (section 5.2, e.g. the RFID tag):
when one attribute of every positive component is tied by ``=`` in every clause, the
entries of each state are segmented by key value, and so are those of every negative
tied to that key (see :mod:`.plan` and :mod:`.queues`).

Input: timestamps ``{"lo": a, "hi": b[, "pmf": ...]}`` on the unit grid, processed in
increasing time. A block may come in any order: it is sorted, and events are held
until they are older than the largest stream max delay D (the external buffer of
section 2.1). An imprecise timestamp (a < b) is read as its instants a..b, uniform or
weighted by its pmf, and a match it touches gets its probability over the possible
worlds (:mod:`.worlds`). An event whose first instant is older than one already
processed, or than the frontier (the largest first instant seen less D, rounded down
to the grid: an event before it arrived beyond the max delay), is reported as
``Late``, and so are histogram timestamps and off-grid times.
"""

from __future__ import annotations

import itertools
import math
from bisect import bisect_right
from operator import attrgetter
from typing import Any, Mapping, Sequence

import numpy as np

from ..errors import ValidationError
from ..events import Event, Streams
from ..events.streams import gap_pmf
from ..events.columns import EventColumns
from ..operator import BlockResult, Late, Operator, check_threshold
from ..probability import meets
from ..query.ast import evaluate
from ..query.errors import QueryError
from ..query.sequence import SequenceQuery
from ..state import unpickle
from ..timestamps import Interval
from .model import GapHistogram, RunComponent, run_score
from .matches import MatchGeneration
from .plan import check_defaults, clause_plan, key_attributes, run_negatives
from .queues import NO_KEY, Queue
from .worlds import PossibleWorlds, Vague, reading

__all__ = ["LEARN_CHECK_EVERY", "LEARN_EVERY", "LossyOperator"]

_STREAM, _TS, _LO, _HI = attrgetter("stream"), attrgetter("ts"), attrgetter("lo"), attrgetter("hi")

#: Gap samples gathered before the densities and scoring tables are updated: at least
#: this many, and at least W / 4 so the O(W) update costs amortised O(1) per sample.
LEARN_EVERY = 1024

#: Events processed between two points where the tables may move. Counted in event
#: order, so every event meets the same tables however the input is cut into blocks.
LEARN_CHECK_EVERY = 8192

#: The largest time on the grid: beyond it a float no longer holds every integer (nor, from
#: 2**63, does the int64 the queues keep).
_GRID_LIMIT = 2.0 ** 53

#: An imprecise event of more instants than this is taken once by a path (standing for
#: every instant: :mod:`.matches`); one of fewer, once per instant, where a path's exact
#: score and negatives prune more.
SPREAD_PATHS = 8

#: Attributes that make up an operator's state (the rest derives from its configuration).
_STATE = ("threshold", "learned", "gap_samples", "sample_count", "paqs", "naqs", "pending", "held_times",
          "held_events", "held_streams", "anchors", "clock", "seen", "processed", "sequence", "totals", "key_codes",
          "next_code", "live_codes", "key_group", "held_parts", "vague", "vague_seen", "worlds")


#: What a state holds besides :data:`_STATE`: the configuration the scoring tables are
#: computed from again on restore.
_CONFIG = ("query", "miss_probs", "max_delay", "fixed_gaps", "learn")


def _unversioned(fields: dict[str, Any]) -> dict[str, Any]:
    """A lossy query's state from before the versioned format: its configuration and state, pickled."""
    config, state = unpickle(fields["snapshot"])
    if len(state.get("held_parts", ())) != len(state["held_times"]):   # a state from before imprecise times
        state["held_parts"] = [0] * len(state["held_times"])
    return {**dict(zip(_CONFIG, config)), **state}


class LossyOperator(PossibleWorlds, MatchGeneration, Operator):
    """Evaluates one ``SEQUENCE`` query (AYAC) over a lossy stream.

    ``gaps`` optionally fixes gap densities f_i (a pmf over gaps 0..W, ``pmf[0] = 0``)
    by component variable; the query's ``GAP`` clause takes precedence, then ``gaps``,
    then the ``gap`` of the component's stream parameters, and every other component
    learns its density online (``learn=True``), but the first positive and the negatives
    before it (no positive precedes them; their f stays uniform unless given). A
    positive component's gaps are learned from the emitted matches that observed it and
    the positive before it; a negative component's from each of its events: the time
    since the newest earlier event of the positive before it with the same hash key
    (within W), so what is learned does not depend on which paths the threshold prunes
    (a negative not tied to the hash key is not learned). The tables move after every
    LEARN_CHECK_EVERY events processed, once max(LEARN_EVERY, W / 4) new gaps wait, so
    results do not depend on how the input is cut into blocks. Bounds u are computed
    at arrival (section 4.1) with the tables then in force, so for up to W after a move
    a path the new tables score just above the threshold may have been pruned; with
    fixed densities (``GAP``, ``gaps``, stream ``gap``, ``learn=False``) pruning loses
    nothing.

    >>> from penumbra.query import parse
    >>> from penumbra.events import Streams, parse_event
    >>> q = parse("SEQUENCE(A x, !B y, C z) WHERE x.tag = z.tag AND y.tag = x.tag WITHIN 10 THRESHOLD 0.5")
    >>> op = LossyOperator(q, Streams())
    >>> ev = lambda s, i, t: parse_event({"stream": s, "id": i, "ts": {"lo": t, "hi": t}, "attrs": {"tag": 7}})
    >>> [m.to_json() for m in op.feed([ev("A", "a1", 1), ev("C", "c1", 5)]).matches]
    [{'events': {'x': 'a1', 'z': 'c1'}, 'prob': 1.0}]
    """

    kind = "sequence"
    STATE_VERSION = 1
    STATE_FIELDS = _CONFIG + _STATE
    STATE_MIGRATIONS = {0: _unversioned}

    def __init__(self, query: SequenceQuery, streams: Streams | Mapping, gaps: Mapping[str, np.ndarray] | None = None,
                 *, learn: bool = True):
        if not isinstance(streams, Streams):
            streams = Streams(streams.values())
        params = [streams.get_or_default(c.stream) for c in query.components]
        fixed = {}
        # a stream's gap serves the components whose density nothing else gives; the first
        # positive has no gap (nothing comes before it)
        given = set(query.gaps) | set(gaps or {}) | {query.components[query.positives[0]].var}
        for component, p in zip(query.components, params):
            if p.gap is not None and component.var not in given:
                try:
                    fixed[component.var] = gap_pmf(*p.gap, query.window)
                except ValueError as error:
                    raise ValidationError(f"{p.name}.gap", str(error)) from None
        fixed.update({var: self._checked_pmf(var, pmf, query.window) for var, pmf in (gaps or {}).items()})
        for var, spec in query.gaps.items():
            try:
                fixed[var] = gap_pmf(spec.family, spec.params, query.window)
            except ValueError as error:
                raise QueryError(f"GAP {var}: {error}") from None
        self._setup(query, [p.miss_prob for p in params], max((p.max_delay for p in params), default=0.0),
                    fixed, learn)

    @staticmethod
    def _checked_pmf(var: str, pmf, window: int) -> np.ndarray:
        pmf = np.asarray(pmf, dtype=float)
        if pmf.shape != (window + 1,) or pmf[0] != 0 or (pmf < 0).any() or abs(pmf.sum() - 1) > 1e-9:
            raise ValidationError(f"gaps.{var}", f"must be a pmf over gaps 0..{window} with pmf[0] = 0")
        return pmf

    # --- construction -----------------------------------------------------------------

    def _setup(self, query: SequenceQuery, miss_probs: list[float], max_delay: float,
               fixed: dict[str, np.ndarray], learn: bool) -> None:
        self.query = query
        self.window = query.window
        self.threshold = query.threshold
        self.miss_probs = miss_probs
        self.max_delay = max_delay
        self.fixed_gaps = fixed
        self.learn = learn
        components = query.components
        self.positives = query.positives
        self.state_of = {k: s for s, k in enumerate(self.positives)}
        self.state_vars = [components[k].var for k in self.positives]
        unknown = set(fixed) - set(query.variables)
        if unknown:
            raise ValidationError("gaps", f"unknown component variable {sorted(unknown)[0]!r}")
        self.key_attr = key_attributes(query, {components[k].var for k in self.positives
                                               if not self._may_miss(k)})
        self.key_of = [self.key_attr.get(c.var) for c in components]
        # a negative's f is learned from its own events: the time since the newest arrival
        # at the positive before it with the same key (none before the first positive)
        self.anchor_of = {k: self.state_of[max(p for p in self.positives if p < k)]
                          for k, c in enumerate(components) if c.negated and k > self.positives[0]
                          and (self.key_of[k] is not None or not self.key_attr) and c.var not in fixed}
        learnable = [c.var for k, c in enumerate(components) if not c.negated and k != self.positives[0]
                     and c.var not in fixed] + [components[k].var for k in self.anchor_of]
        self.learned = {var: GapHistogram(self.window) for var in learnable} if learn else {}
        if not learn:
            self.anchor_of = {}
        streams = list(dict.fromkeys(c.stream.casefold() for c in components))
        self.stream_index = {name: n for n, name in enumerate(streams)}
        self.component_stream = [self.stream_index[c.stream.casefold()] for c in components]
        self.stream_of: dict[str, int] = {}          # event stream name as written -> index, -1 if not read
        self.trivial = [[clause.trivial.get(c.var, ()) for clause in query.clauses] for c in components]
        everything = (1 << len(query.clauses)) - 1
        # components with no trivial predicate in any clause accept every event of their stream
        self.unconditional = [everything if not any(literals) else 0 for literals in self.trivial]
        check_defaults(query, {components[k].var for k in self.positives if self._may_miss(k)})
        self.plans = [clause_plan(query, self.key_attr, bit, clause) for bit, clause in enumerate(query.clauses)]
        self.run_negatives = {(i, j): run_negatives(query, i, j)
                              for i, j in itertools.combinations(range(len(self.positives)), 2)}
        self.leading_negatives = range(self.positives[0])
        self.trailing_negatives = range(self.positives[-1] + 1, len(components))
        # a PAQ per state but the last (whose arrivals start match generation), a NAQ per
        # negative component and clause
        self.paqs = [Queue(self.window) for _ in self.positives[:-1]]
        # every arrival at a state that anchors a negative's gaps (V_1's PAQ holds them all:
        # their bound G_{0,1}(W) is 1, as S(1) = 1 for any run of negatives alone)
        self.anchors = {state: Queue() for state in set(self.anchor_of.values())
                        if state > 0 or not self.paqs}
        self.naqs = {k: [Queue() for _ in query.clauses] for k, c in enumerate(components) if c.negated}
        self.key_codes: dict[Any, int] = {}
        self.next_code = NO_KEY + 1
        self.live_codes = 0                 # codes kept by the last clean-up of key_codes
        self.pending: list = []
        self.held_times: list[int] = []     # the reorder buffer: held events in time order
        self.held_events: list[Event] = []
        self.held_streams: list[int] = []
        # 0: a precise event; an imprecise one is held once per instant of its support,
        # 1 at its first instant (where it joins its negatives' kept events), 2 after
        self.held_parts: list[int] = []
        self.vague = {k: Vague() for k, c in enumerate(components) if c.negated}
        self.vague_seen = False             # whether an imprecise event was ever processed
        self.worlds: list = []              # matches waiting to be evaluated over worlds (a heap)
        self.worlds_due: set = set()
        self.clock = -math.inf              # time processed: the last event's, or the frontier
        self.seen = -math.inf               # largest time seen
        self.processed = 0                  # events run through the NFA
        self.sequence = 0                   # arrival order, to break ties in heaps
        self.totals = {"events": 0, "matches": 0, "late": 0, "arrivals": 0, "pruned_arrivals": 0,
                       "pruned_paths": 0, "negated_paths": 0, "ignored": 0}
        self.gap_samples: dict[str, list[int]] = {var: [] for var in self.learned}   # not yet learned
        self.sample_count = 0
        self._refresh_tables()

    def _may_miss(self, k: int) -> bool:
        return k not in (self.positives[0], self.positives[-1]) and self.miss_probs[k] > 0

    def _pmf(self, k: int) -> np.ndarray:
        var = self.query.components[k].var
        if var in self.fixed_gaps:
            return self.fixed_gaps[var]
        if var in self.learned:
            return self.learned[var].pmf()
        return GapHistogram(self.window).pmf()

    def _refresh_tables(self) -> None:
        """Scoring tables H and G = running max of H for every edge (section 4), and the
        edges kept because G(W) reaches the threshold."""
        components = self.query.components
        run = [RunComponent(not c.negated, self._pmf(k), self.miss_probs[k]) for k, c in enumerate(components)]
        states = self.positives
        self.score = {(i, j): run_score(run[states[i] + 1:states[j]], self.window)
                      for i, j in itertools.combinations(range(len(states)), 2)}
        self.leading = run_score(run[:states[0]], self.window)
        self.trailing = run_score(run[states[-1] + 1:], self.window)
        self.reach = {edge: np.maximum.accumulate(table) for edge, table in self.score.items()}
        self.monotone = {edge: bool(np.all(np.diff(table[1:]) <= 0)) for edge, table in self.score.items()}
        self.initial_bound = float(self.leading.max())
        self._prune_edges()

    def _prune_edges(self) -> None:
        self.incoming = [[i for i in range(j) if meets(self.reach[i, j][self.window], self.threshold)]
                         for j in range(len(self.positives))]

    # --- Operator interface -------------------------------------------------------------

    def set_threshold(self, threshold: float) -> None:
        """Takes effect for the next block. Arrivals pruned under a higher threshold stay
        pruned; the bounds of queued ones hold at any threshold."""
        self.threshold = check_threshold(threshold)
        self._prune_edges()

    @property
    def counters(self) -> dict[str, int | float]:
        return {**self.totals, "paq_entries": sum(len(q) for q in self.paqs),
                "naq_entries": sum(len(q) for qs in self.naqs.values() for q in qs),
                "pending": len(self.pending) + len(self.worlds), "held": len(self.held_times)}

    def feed(self, events: Sequence[Event], prior: np.ndarray | None = None) -> BlockResult:
        out = BlockResult()
        self._admit(events, out)
        self._move_on(out)
        return out

    def flush(self) -> BlockResult:
        """End of input: process the held events and emit every match still waiting for
        the window of its trailing negatives to pass."""
        out = BlockResult()
        self._process(len(self.held_times), out)
        self._release(math.inf, out)
        self._finish_block(out)
        return out

    def evict(self, watermark: float) -> int:
        """Drop queue entries no match ending at or after ``watermark`` can use."""
        horizon = self._safe_horizon(watermark)
        gone = sum(queue.expire(horizon) for queue in self._queues())
        self._forget_keys()
        return gone

    def partition_keys(self) -> dict[str, list[tuple[str, ...]]]:
        """The hash attribute of each component (a role not keyed for a negative not
        tied to it); nothing keyed while densities are learned, since what is learned
        comes from every key."""
        roles: dict[str, list[tuple[str, ...]]] = {}
        for component, name in zip(self.query.components, self.key_of):
            role = (name,) if name is not None and not self.learned else ()
            attrs = roles.setdefault(component.stream.casefold(), [])
            if role not in attrs:
                attrs.append(role)
        return roles

    def clock_of(self, events: Sequence[Event] | EventColumns) -> dict[str, float]:
        """The largest first instant on the grid among the events of the query's streams, as
        :meth:`_admit` takes the time seen (late ones lie behind the time already processed,
        so the figure needs no state). A block's columns are read without making their
        events, but for an interval wider than an instant."""
        if isinstance(events, EventColumns):
            times = self._first_instants(events)
        else:
            times = [first for e in events if self._stream(e.stream) >= 0
                     and (first := self._first_instant(e.ts)) is not None]
        return {"seen": float(max(times))} if times else {}

    def _first_instants(self, columns: EventColumns) -> list[int]:
        """:meth:`_first_instant` of the events of the query's streams in ``columns``: an
        instant's from its bounds, all at once; a wider interval's from its event."""
        rows = np.concatenate([columns.rows_of(stream) for stream in self.stream_index])
        lo, hi = columns.bounds()[:, rows]
        with np.errstate(invalid="ignore"):     # NaN: not an interval
            instants = lo[(lo == hi) & (lo % 1 == 0) & (np.abs(lo) <= _GRID_LIMIT)]
        times = [int(instants.max())] if len(instants) else []
        wider = (self._first_instant(columns.event(i).ts) for i in rows[lo < hi].tolist())
        return times + [first for first in wider if first is not None]

    def advance(self, clock: dict[str, float]) -> BlockResult:
        """Take the time other key groups have seen: release the held events it makes
        safe, and the waiting matches whose window it closes. Times before the
        released frontier are processed from here on, as after an event at the frontier."""
        out = BlockResult()
        if clock.get("seen", -math.inf) > self.seen:
            self.seen = int(clock["seen"])
        self._move_on(out)
        return out

    def _move_on(self, out: BlockResult) -> None:
        """Process the held events the time seen makes safe (older than it by the max delay
        D), and take its frontier as processed: a later event before it arrived beyond D
        and is late, whichever key group it goes to, so one operator and the key groups of
        a host (:meth:`advance`) judge alike."""
        if self.seen > -math.inf:
            frontier = self.seen - self.max_delay
            self._process(bisect_right(self.held_times, frontier), out)
            if math.floor(frontier) > self.clock:
                self.clock = math.floor(frontier)
                self._release(self.clock, out)
                self._compact()
        self._finish_block(out)

    def wake(self) -> dict[str, float]:
        """The time seen at which a held event is released, or a waiting match's window closes."""
        due = min(self.held_times[:1] + [item[0] for item in self.pending[:1]] + [item[0] for item in self.worlds[:1]],
                  default=math.inf)
        return {"seen": due + self.max_delay - 0.5} if due < math.inf else {}

    def state_fields(self) -> dict[str, Any]:
        """Configuration and state (queues, waiting matches, learned densities); the
        scoring tables are computed again on restore."""
        return {name: getattr(self, name) for name in self.STATE_FIELDS}

    @classmethod
    def from_state(cls, fields: dict[str, Any]) -> LossyOperator:
        operator = cls.__new__(cls)
        operator._setup(*(fields[name] for name in _CONFIG))
        operator.__dict__.update({name: fields[name] for name in _STATE})
        operator.worlds_due = {item[4] for item in operator.worlds}
        operator._refresh_tables()
        return operator

    def queue_count(self) -> int:
        """Hashed queues holding entries, over every state and negative component."""
        return sum(len(queue.keys()) for queue in self._queues())

    def _queues(self) -> list[Queue]:
        return [*self.paqs, *(queue for queues in self.naqs.values() for queue in queues), *self.anchors.values(),
                *self.vague.values()]

    # --- input ------------------------------------------------------------------------------

    def _stream(self, name: str) -> int:
        index = self.stream_of.get(name)
        if index is None:
            index = self.stream_of[name] = self.stream_index.get(name.casefold(), -1)
        return index

    def _admit(self, events: Sequence[Event], out: BlockResult) -> None:
        """Hold, in time order, the events of the query's streams whose timestamp is on the
        grid and not older than the last time processed (the external buffer of section
        2.1, released after the streams' max delay D); an imprecise one once per instant."""
        self.totals["events"] += len(events)
        names = list(map(_STREAM, events))
        streams = list(map(self.stream_of.get, names))
        if None in streams:
            streams = list(map(self._stream, names))
        if -1 in streams:
            read = [index >= 0 for index in streams]
            events = list(itertools.compress(events, read))
            self.totals["ignored"] += len(streams) - len(events)
            streams = [index for index in streams if index >= 0]
        stamps = list(map(_TS, events))
        if all(type(ts) is Interval for ts in stamps):
            times = np.array(list(map(_LO, stamps)), dtype=float)
            times[times != np.array(list(map(_HI, stamps)), dtype=float)] = math.nan
        else:
            times = np.array([ts.lo if type(ts) is Interval and ts.lo == ts.hi else math.nan for ts in stamps],
                             dtype=float)
        bad = ~(times % 1 == 0) | (times < self.clock) | (np.abs(times) > _GRID_LIMIT)
        spread: dict[int, np.ndarray] = {}          # row -> the instants of an imprecise timestamp
        if bad.any():
            for n in np.flatnonzero(bad).tolist():
                reason = self._why_late(times[n]) if not math.isnan(times[n]) else self._spread(stamps[n], spread, n)
                if reason:
                    self._late(events[n], reason, out)
                else:
                    bad[n] = False
            keep = (~bad).tolist()
            if spread:
                rows = np.cumsum(keep) - 1
                spread = {int(rows[n]): instants for n, instants in spread.items()}
            events = list(itertools.compress(events, keep))
            streams = list(itertools.compress(streams, keep))
            times = times[~bad]
        if not events:
            return
        for n, instants in spread.items():
            times[n] = instants[0]
        times = times.astype(np.int64)
        self.seen = max(self.seen, int(times.max()))
        parts = [0] * len(times)
        if spread:
            events, streams, times, parts = self._expand(events, streams, times, spread)
        if len(times) > 1 and not (np.diff(times) >= 0).all() or (self.held_times and self.held_times[-1] > times[0]):
            times = np.concatenate((np.asarray(self.held_times, dtype=np.int64), times))
            order = np.argsort(times, kind="stable").tolist()
            events, streams = self.held_events + list(events), self.held_streams + streams
            parts = self.held_parts + parts
            self.held_events = [events[n] for n in order]
            self.held_streams = [streams[n] for n in order]
            self.held_parts = [parts[n] for n in order]
            self.held_times = times[order].tolist()
        else:
            self.held_times += times.tolist()
            self.held_events += events
            self.held_streams += streams
            self.held_parts += parts

    @staticmethod
    def _expand(events: list, streams: list[int], times: np.ndarray,
                spread: dict[int, np.ndarray]) -> tuple[list, list[int], np.ndarray, list[int]]:
        """One entry per instant of each imprecise event (row -> instants in ``spread``):
        the events, streams, times and parts (0 precise, 1 an imprecise event's first
        instant, 2 its later ones; 3 and 4 for an event of more than :data:`SPREAD_PATHS`
        instants, which a path takes once)."""
        counts = np.ones(len(events), np.int64)
        for n, instants in spread.items():
            counts[n] = len(instants)
        rows = np.repeat(np.arange(len(events)), counts).tolist()
        starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
        times = np.repeat(times, counts)
        parts = np.zeros(len(rows), np.int64)
        for n, instants in spread.items():
            times[starts[n]:starts[n] + len(instants)] = instants
            wide = 2 if len(instants) > SPREAD_PATHS else 0
            parts[starts[n]] = 1 + wide
            parts[starts[n] + 1:starts[n] + len(instants)] = 2 + wide
        return [events[n] for n in rows], [streams[n] for n in rows], times, parts.tolist()

    def _spread(self, ts, spread: dict[int, np.ndarray], n: int) -> str | None:
        """Read an imprecise timestamp on the grid into ``spread[n]``, or say why it cannot be."""
        if type(ts) is not Interval:
            return "lossy CEP reads an interval {\"lo\": a, \"hi\": b[, \"pmf\": ...]} on its grid, " \
                   "not a histogram timestamp"
        for bound in (ts.lo, ts.hi):
            if bound % 1:
                return f"time {bound:g} is not on the unit grid of the query (integer times)"
            if abs(bound) > _GRID_LIMIT:
                return f"time {bound:g} is beyond the grid's exact range (|t| <= 2**53)"
        try:
            instants, _ = reading(ts)
        except ValidationError as error:
            return str(error)
        if instants[0] < self.clock:
            return f"out of order: its first instant {int(instants[0])} is before {self.clock:g}, already processed"
        spread[n] = instants
        return None

    @staticmethod
    def _first_instant(ts) -> int | None:
        """The first instant of a timestamp the operator reads (None for one it reports late,
        as :meth:`_spread` would)."""
        if type(ts) is not Interval or ts.lo % 1 or ts.hi % 1 or max(abs(ts.lo), abs(ts.hi)) > _GRID_LIMIT:
            return None
        if ts.lo == ts.hi:
            return int(ts.lo)
        try:
            return int(reading(ts)[0][0])
        except ValidationError:
            return None

    def _why_late(self, t: float) -> str:
        if t % 1:
            return f"time {t:g} is not on the unit grid of the query (integer times)"
        if abs(t) > _GRID_LIMIT:
            return f"time {t:g} is beyond the grid's exact range (|t| <= 2**53)"
        return f"out of order: time {t:g} is before {self.clock:g}, already processed"

    def _late(self, event: Event, reason: str, out: BlockResult) -> None:
        self.totals["late"] += 1
        out.late.append(Late(event, reason))

    def _finish_block(self, out: BlockResult) -> None:
        """Observations for the dashboard: the totals and the size of the state (queued
        entries, waiting matches, held events)."""
        out.observations.update(self.totals, queue_entries=sum(len(queue) for queue in self._queues()),
                                pending=len(self.pending) + len(self.worlds),
                                held=len(self.held_times),
                                clock=self.clock if math.isfinite(self.clock) else None)

    # --- blocks -------------------------------------------------------------------------------

    def _process(self, count: int, out: BlockResult) -> None:
        """Run the first ``count`` held events through the NFA, in chunks that end where
        learned tables may move (every LEARN_CHECK_EVERY events processed)."""
        if not count:
            return
        times = np.asarray(self.held_times[:count], dtype=np.int64)
        events = np.empty(count, object)
        events[:] = self.held_events[:count]
        streams = np.asarray(self.held_streams[:count], dtype=np.int64)
        parts = np.asarray(self.held_parts[:count], dtype=np.int64)
        del self.held_times[:count], self.held_events[:count], self.held_streams[:count], self.held_parts[:count]
        start = 0
        while start < count:
            stop = min(count, start + LEARN_CHECK_EVERY - self.processed % LEARN_CHECK_EVERY) \
                if self.learned else count
            self._chunk(times[start:stop], events[start:stop], streams[start:stop], parts[start:stop], out)
            self.processed += stop - start
            if self.learned and self.processed % LEARN_CHECK_EVERY == 0 \
                    and self.sample_count >= max(LEARN_EVERY, self.window // 4):
                self._learn()
            start = stop

    def _chunk(self, times: np.ndarray, events: np.ndarray, streams: np.ndarray, parts: np.ndarray,
               out: BlockResult) -> None:
        """One chunk through the NFA: NAQ pushes, then each state's arrivals in order
        (bounds, threshold pruning, PAQ pushes; match generation at the last state);
        then the waiting matches whose window closed, and queue compaction. An imprecise
        event comes once per instant (``parts`` 1 at its first, 2 after, 3 and 4 for a wide
        one; 0 for a precise one): a negative component keeps it whole, from its first
        instant."""
        vague = bool(parts.any())
        self.vague_seen |= vague
        codes: dict[str, np.ndarray] = {}
        selected = []
        for k, component in enumerate(self.query.components):
            rows = np.flatnonzero(streams == self.component_stream[k])
            name = self.key_of[k]
            if name is None:
                key = np.full(len(rows), NO_KEY, np.int64)
            else:
                if name not in codes:
                    codes[name] = self._key_codes(events, name)
                key = codes[name][rows]
            if self.unconditional[k]:
                mask = np.full(len(rows), self.unconditional[k], np.int64)
            else:
                mask = np.fromiter((self._clause_mask(k, event.attrs) for event in events[rows]),
                                   dtype=np.int64, count=len(rows))
            usable = (mask != 0) & (key >= 0)      # key -1: an equality on an absent attribute never holds
            selected.append((rows[usable], key[usable], mask[usable]))
        for k, queues in self.naqs.items():
            rows, key, mask = selected[k]
            if vague and len(rows):
                kind = parts[rows]
                for n in np.flatnonzero(kind % 2 == 1).tolist():      # an event's first instant
                    event = events[rows[n]]
                    instants = reading(event.ts)[0]
                    self.vague[k].push(int(instants[0]), int(instants[-1]), int(key[n]), int(mask[n]), event)
                rows, key, mask = rows[kind == 0], key[kind == 0], mask[kind == 0]
            for bit, queue in enumerate(queues if len(rows) else ()):
                has = (mask >> bit & 1).astype(bool)
                queue.push(times[rows[has]], key[has], events[rows[has]])
        last = len(self.positives) - 1
        for state, k in enumerate(self.positives):
            rows, key, mask = selected[k]
            if not len(rows):
                continue
            t = times[rows]
            if state in self.anchors:
                precise = parts[rows] == 0 if vague else slice(None)
                self.anchors[state].push(t[precise], key[precise], events[rows[precise]])
            bound = self._bounds(state, t, key)
            keep = meets(bound, self.threshold)
            self.totals["arrivals"] += len(rows)
            self.totals["pruned_arrivals"] += len(rows) - int(np.count_nonzero(keep))
            wide = parts[rows[keep]] >= 3      # instants of imprecise events of many instants
            if state < last:
                self.paqs[state].push(t[keep], key[keep], events[rows[keep]], mask[keep], bound[keep], wide)
            else:
                self._generate(t[keep], key[keep], mask[keep], events[rows[keep]], wide, out)
        for k, state in self.anchor_of.items():
            rows, key, _ = selected[k]
            if vague:       # an imprecise negative's gap is not known
                rows, key = rows[parts[rows] == 0], key[parts[rows] == 0]
            if not len(rows):
                continue
            anchors = self.anchors[state] if state in self.anchors else self.paqs[0]
            t = times[rows]
            start, stop = anchors.find(key, t - self.window, t)
            found = start < stop
            newest = anchors.order[stop[found] - 1]
            gaps = t[found] - anchors.t[newest]
            if self.vague_seen:     # the newest anchor imprecise: the gap is not known
                gaps = gaps[np.fromiter((e.ts.lo == e.ts.hi for e in anchors.event[newest]), bool, len(newest))]
            self._sample(self.query.components[k].var, gaps)
        if len(times):
            self.clock = int(times[-1])
            self._release(self.clock, out)
            self._compact()

    def _key_codes(self, events: np.ndarray, name: str) -> np.ndarray:
        """Integer code of each event's hash-key value (attribute ``name``; -1 when absent).
        Codes are unique, not dense: each call reserves one per event for new values."""
        values = [event.attrs.get(name) for event in events]
        first = self.next_code
        self.next_code += len(values)
        # true is not 1 (JSON's kinds, as conditions compare them), while 1 and 1.0 are one key
        coded = [(bool, value) if type(value) is bool else value for value in values]
        codes = np.fromiter(map(self.key_codes.setdefault, coded, range(first, self.next_code)),
                            dtype=np.int64, count=len(values))
        absent = self.key_codes.pop(None, None)
        if absent is not None:
            codes[codes == absent] = -1
        if self.key_group is not None and self.key_group.count > 1:
            # another group's keys: as if the attribute were absent
            foreign = [n for n, value in enumerate(values) if value is not None and not self.key_group.owns((value,))]
            codes[foreign] = -1
        return codes

    def _clause_mask(self, k: int, attrs) -> int:
        """Bit c set when the event satisfies clause c's trivial predicates on component k."""
        var = self.query.components[k].var
        mask = 0
        for bit, literals in enumerate(self.trivial[k]):
            if all(evaluate(literal, {var: attrs}) is True for literal in literals):
                mask |= 1 << bit
        return mask

    def _bounds(self, state: int, t: np.ndarray, key: np.ndarray) -> np.ndarray:
        """u for arrivals at V_state (section 4.1 and 5.1): G_{0,1}(W) at the first state;
        else v_new = max_i (max_k u_{i,k}) G_{i,j}(t - t_{i,0}), with t_{i,0} V_i's oldest
        entry in (t - W, t) with the same key and max_k u_{i,k} over the key's entries of
        t's epoch of W so far and of the epoch before. When H_{i,j} is non-increasing
        (runs of negatives, S^N), the tighter H_{i,j}(t - t_{i,newest}) bounds every
        H_{i,j}(t - t_{i,k}) (the monotonic improvement of section 5.1)."""
        if state == 0:
            return np.full(len(t), self.initial_bound)
        bound = np.zeros(len(t))
        # every edge that can score, not only those kept at this threshold: u stays an upper
        # bound if the threshold is lowered later
        for i in (i for i in range(state) if self.reach[i, state][self.window] > 0):
            queue = self.paqs[i]
            start, stop = queue.find(key, t - self.window, t)
            inside = start < stop
            if self.monotone[i, state]:
                gap = t - queue.t[queue.order[np.maximum(stop - 1, 0)]] if len(queue) else np.zeros_like(t)
                factor = self.score[i, state][np.where(inside, gap, 0)]
            else:
                gap = t - queue.t[queue.order[np.minimum(start, len(queue) - 1)]] if len(queue) else np.zeros_like(t)
                factor = self.reach[i, state][np.where(inside, gap, 0)]
            peak = queue.peak(queue.order[np.maximum(stop - 1, 0)]) if len(queue) else np.zeros(len(t))
            bound = np.maximum(bound, np.where(inside, peak * factor, 0.0))
        return bound

    # --- learning and memory ------------------------------------------------------------------

    def _sample(self, var: str, gaps: np.ndarray) -> None:
        self.gap_samples[var] += gaps.tolist()
        self.sample_count += len(gaps)

    def _learn(self) -> None:
        """Add the gaps gathered since the last update to the estimates of f (section 3)
        and recompute the scoring tables."""
        for var, gaps in self.gap_samples.items():
            if gaps:
                self.learned[var].add(np.asarray(gaps))
                gaps.clear()
        self.sample_count = 0
        self._refresh_tables()

    def _safe_horizon(self, now: float) -> int:
        """Entries at or before this time serve no match ending at ``now`` or later, nor
        a waiting match's trailing negatives."""
        horizon = math.floor(now) - self.window
        if self.pending:
            horizon = min(horizon, min(item[3] for item in self.pending))
        if self.worlds:
            horizon = min(horizon, min(item[3] for item in self.worlds))
        return horizon

    def _compact(self) -> None:
        """Dequeue by window the queues that doubled since their last compaction (amortised
        O(1) per entry), and forget hash keys no entry uses any more."""
        horizon = None
        for queue in self._queues():
            if queue.due():
                horizon = self._safe_horizon(self.clock) if horizon is None else horizon
                queue.expire(horizon)
        if len(self.key_codes) > 4 * max(self.live_codes, 4096):
            self._forget_keys()

    def _forget_keys(self) -> None:
        """Drop the codes of hash-key values with no queued entry and no waiting match."""
        live = {item[2] for item in self.pending} | {item[2] for item in self.worlds}
        for queue in self._queues():
            live.update(queue.keys().tolist())
        self.key_codes = {value: code for value, code in self.key_codes.items() if code in live}
        self.live_codes = len(self.key_codes)
