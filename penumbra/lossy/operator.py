"""The AYAC operator: an NFA with probabilistic arrival queues over a lossy stream.

NFA (section 4, :class:`~.plan.NFA`): one state V_1..V_l per *positive* component, V_0
initial and V_{l+1} final. An edge V_i -> V_j skips the positives between them (missed
by their readers) and is labelled with the scoring function H_{i,j} of the run of
components between (:mod:`.tables`); negatives have no state. Edges whose
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
(section 4.2, :mod:`.generation`).

The first and last positive components must be observed (the case section 4.2 treats);
any run of components between observed positives may be missed. Negatives before the
first positive must be absent from (t_last - W, t_first) (the NFA enters V_0 at
t_last - W, footnote 2), negatives after the last from (t_last, t_first + W): such a
match waits until the stream passes t_first + W (or the end of input, :mod:`.waiting`).

Queues are hashed on the query's equality attributes (section 5.2, e.g. the RFID tag):
when one attribute of every positive component is tied by ``=`` in every clause, the
entries of each state are segmented by key value, and so are those of every negative
tied to that key (see :mod:`.plan` and :mod:`.queues`).

Input: timestamps ``{"lo": a, "hi": b[, "pmf": ...]}`` on the unit grid, processed in
increasing time. A block may come in any order: its events are held until they are
older than the largest stream max delay D (the external buffer of section 2.1,
:mod:`.held`). An imprecise timestamp (a < b) is read as its instants a..b, uniform or
weighted by its pmf, and a match it touches gets its probability over the possible
worlds (:mod:`.worlds`). An event whose first instant is older than one already
processed, or than the frontier (the largest first instant seen less D, rounded down
to the grid: an event before it arrived beyond the max delay), is reported as
``Late``, and so are histogram timestamps and off-grid times.

The gap densities the tables are computed from are fixed or learned online
(:mod:`.densities`); a reported match is made by :mod:`.matches`.
"""

from __future__ import annotations

import itertools
import math
from operator import attrgetter
from typing import Any, Mapping, Sequence

import numpy as np

from ..errors import ValidationError
from ..events import Event, Streams
from ..events.columns import EventColumns
from ..events.streams import gap_pmf
from ..operator import BlockResult, Late, Operator, check_threshold
from ..probability import meets
from ..query.errors import QueryError
from ..query.sequence import SequenceQuery
from ..state import unpickle
from .densities import GapDensities
from .generation import BackwardGeneration, Completed, Found, Pending
from .held import (FIRST_INSTANT, GRID_LIMIT, PRECISE, WIDE, HeldEvents, first_instant, grid_times, per_instant,
                   read_support, why_late)
from .matches import NFAPath, path_factors, run_factor, to_match, worlds_factor
from .model import GapHistogram
from .plan import NFA
from .queues import NO_KEY, HashKeys, Queue, Vague
from .tables import ScoringTables
from .waiting import Waiting
from .worlds import PossibleWorlds, TooManyWorlds, certain, support

__all__ = ["LEARN_CHECK_EVERY", "LEARN_EVERY", "LossyOperator"]

_STREAM, _TS = attrgetter("stream"), attrgetter("ts")

#: Gap samples gathered before the densities and scoring tables are updated: at least
#: this many, and at least W / 4 so the O(W) update costs amortised O(1) per sample.
LEARN_EVERY = 1024

#: Events processed between two points where the tables may move. Counted in event
#: order, so every event meets the same tables however the input is cut into blocks.
LEARN_CHECK_EVERY = 8192

#: Attributes that make up an operator's state (the rest derives from its configuration).
_STATE = ("threshold", "learned", "gap_samples", "sample_count", "paqs", "naqs", "pending", "held_times",
          "held_events", "held_streams", "anchors", "clock", "seen", "processed", "sequence", "totals", "key_codes",
          "next_code", "live_codes", "key_group", "held_parts", "vague", "vague_seen", "worlds")


#: What a state holds besides :data:`_STATE`: the configuration the scoring tables are
#: computed from again on restore.
_CONFIG = ("query", "miss_probs", "max_delay", "fixed_gaps", "learn")


def _unversioned(fields: dict[str, Any]) -> dict[str, Any]:
    """A lossy query's state from before the versioned format: its configuration and
    state, pickled. A state older still is brought up to what the operator keeps now:
    one from before imprecise timestamps holds no parts of its held events (all
    precise), no imprecise negative events, no match waiting for worlds, and queues
    without ``wide`` (no entry is an instant of an imprecise event); one from before
    factors were kept holds waiting matches without them (they are computed from the
    tables its densities give)."""
    config, saved = unpickle(fields["snapshot"])
    fields = {**dict(zip(_CONFIG, config)), **saved}
    if len(fields.get("held_parts", ())) != len(fields["held_times"]):
        fields["held_parts"] = [PRECISE] * len(fields["held_times"])
    if "vague" not in fields:
        negatives = [k for k, c in enumerate(fields["query"].components) if c.negated]
        fields.update(vague={k: Vague() for k in negatives}, vague_seen=False, worlds=[])
    for queue in [*fields["paqs"], *(q for queues in fields["naqs"].values() for q in queues),
                  *fields["anchors"].values()]:
        if not hasattr(queue, "wide"):
            queue.wide = None if queue.window is None else np.zeros(len(queue.t), bool)
    if any(len(item) < 8 for item in fields["pending"]):
        nfa = NFA(fields["query"], fields["miss_probs"], fields["fixed_gaps"], fields["learn"])
        densities = GapDensities(nfa.window, nfa.fixed_gaps, fields["learned"], fields["gap_samples"],
                                 fields["sample_count"])
        tables = ScoringTables(nfa, densities.pmfs(nfa.query.components))
        # the heap's order stands: only (deadline, sequence) are compared
        fields["pending"] = [item if len(item) == 8 else (*item, path_factors(nfa, tables, item[5]))
                             for item in fields["pending"]]
    return fields


class LossyOperator(Operator):
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

    The operator holds the NFA (``nfa``), its queues (``paqs`` per state but the last,
    ``naqs`` and ``vague`` per negative component, ``anchors`` for the arrivals negatives'
    gaps are measured from), the held events (``held``), the waiting matches
    (``waiting``), the densities (``densities``) and the tables computed from them
    (``tables``); match generation and the evaluation over worlds are given what they
    read at each use.

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
        nfa = NFA(query, [p.miss_prob for p in params], fixed, learn)
        self._start(nfa, max((p.max_delay for p in params), default=0.0), self._fresh_state(nfa))

    @staticmethod
    def _checked_pmf(var: str, pmf, window: int) -> np.ndarray:
        pmf = np.asarray(pmf, dtype=float)
        if pmf.shape != (window + 1,) or pmf[0] != 0 or (pmf < 0).any() or abs(pmf.sum() - 1) > 1e-9:
            raise ValidationError(f"gaps.{var}", f"must be a pmf over gaps 0..{window} with pmf[0] = 0")
        return pmf

    # --- construction -----------------------------------------------------------------

    @staticmethod
    def _fresh_state(nfa: NFA) -> dict[str, Any]:
        """The state fields of an operator over ``nfa`` that has seen nothing."""
        learned = {var: GapHistogram(nfa.window) for var in nfa.learned_vars}
        paqs = [Queue(nfa.window) for _ in nfa.positives[:-1]]
        return {
            "threshold": nfa.query.threshold, "learned": learned, "gap_samples": {var: [] for var in learned},
            "sample_count": 0,
            # a PAQ per state but the last (whose arrivals start match generation)
            "paqs": paqs,
            # a NAQ per negative component and clause
            "naqs": {k: [Queue() for _ in nfa.query.clauses] for k, c in enumerate(nfa.query.components)
                     if c.negated},
            "pending": [], "held_times": [], "held_events": [], "held_streams": [],
            # every arrival at a state that anchors a negative's gaps (V_1's PAQ holds them all:
            # their bound G_{0,1}(W) is 1, as S(1) = 1 for any run of negatives alone)
            "anchors": {state: Queue() for state in set(nfa.anchor_state.values()) if state > 0 or not paqs},
            "clock": -math.inf, "seen": -math.inf, "processed": 0, "sequence": 0,
            "totals": {"events": 0, "matches": 0, "late": 0, "arrivals": 0, "pruned_arrivals": 0,
                       "pruned_paths": 0, "negated_paths": 0, "ignored": 0},
            "key_codes": {}, "next_code": NO_KEY + 1, "live_codes": 0, "key_group": None, "held_parts": [],
            "vague": {k: Vague() for k, c in enumerate(nfa.query.components) if c.negated}, "vague_seen": False,
            "worlds": [],
        }

    def _start(self, nfa: NFA, max_delay: float, saved: Mapping[str, Any]) -> None:
        """Run ``nfa`` from the state fields ``saved`` (:data:`_STATE`)."""
        self.nfa = nfa
        self.max_delay = max_delay
        self.threshold = saved["threshold"]
        self.densities = GapDensities(nfa.window, nfa.fixed_gaps, saved["learned"], saved["gap_samples"],
                                      saved["sample_count"])
        self.paqs: list[Queue] = saved["paqs"]
        self.naqs: dict[int, list[Queue]] = saved["naqs"]
        self.anchors: dict[int, Queue] = saved["anchors"]
        self.vague: dict[int, Vague] = saved["vague"]
        self.held = HeldEvents(saved["held_times"], saved["held_events"], saved["held_streams"], saved["held_parts"])
        self.waiting = Waiting(saved["pending"], saved["worlds"], saved["sequence"])
        self.clock = saved["clock"]             # time processed: the last event's, or the frontier
        self.seen = saved["seen"]               # largest time seen
        self.processed = saved["processed"]     # events run through the NFA
        self.totals = saved["totals"]
        self.hash_keys = HashKeys(saved["key_codes"], saved["next_code"], saved["live_codes"])
        self.key_group = saved["key_group"]
        self.vague_seen = saved["vague_seen"]   # whether an imprecise event was ever processed
        self.stream_of: dict[str, int] = {}     # event stream name as written -> index, -1 if not read
        self._refresh_tables()

    def _refresh_tables(self) -> None:
        """Scoring tables for the densities as they stand (section 4)."""
        self.tables = ScoringTables(self.nfa, self.densities.pmfs(self.nfa.query.components))

    def _generation(self) -> BackwardGeneration:
        """Backward match generation over the queues as they stand; the paths imprecise
        timestamps touch go to their evaluation over worlds once one was processed."""
        return BackwardGeneration(self.nfa, self.tables, self.threshold, self.paqs, self.naqs, self.totals,
                                  self._worlds() if self.vague_seen else None)

    def _worlds(self) -> PossibleWorlds:
        return PossibleWorlds(self.nfa, self.tables, self.naqs, self.vague)

    # --- the query, as an explanation reads it (penumbra.explain) ----------------------

    @property
    def query(self) -> SequenceQuery:
        return self.nfa.query

    @property
    def window(self) -> int:
        return self.nfa.window

    @property
    def state_vars(self) -> list[str]:
        """The variable of each state, the positive components in query order."""
        return self.nfa.state_vars

    @property
    def miss_probs(self) -> Sequence[float]:
        """Each component's epsilon, the probability its reader misses an event."""
        return self.nfa.miss_probs

    # --- Operator interface -------------------------------------------------------------

    def set_threshold(self, threshold: float) -> None:
        """Takes effect for the next block. Arrivals pruned under a higher threshold stay
        pruned; the bounds of queued ones hold at any threshold."""
        self.threshold = check_threshold(threshold)

    @property
    def counters(self) -> dict[str, int | float]:
        return {**self.totals, "paq_entries": sum(len(q) for q in self.paqs),
                "naq_entries": sum(len(q) for qs in self.naqs.values() for q in qs),
                "pending": len(self.waiting), "held": len(self.held)}

    def feed(self, events: Sequence[Event], prior: np.ndarray | None = None) -> BlockResult:
        out = BlockResult()
        self._admit(events, out)
        self._move_on(out)
        return out

    def flush(self) -> BlockResult:
        """End of input: process the held events and emit every match still waiting for
        the window of its trailing negatives to pass."""
        out = BlockResult()
        self._process(len(self.held), out)
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
        for k, component in enumerate(self.nfa.query.components):
            name = self.nfa.key_attribute(k)
            role = (name,) if name is not None and not self.densities.learned else ()
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
                     and (first := first_instant(e.ts)) is not None]
        return {"seen": float(max(times))} if times else {}

    def _first_instants(self, columns: EventColumns) -> list[int]:
        """:func:`~.held.first_instant` of the events of the query's streams in ``columns``:
        an instant's from its bounds, all at once; a wider interval's from its event."""
        rows = np.concatenate([columns.rows_of(stream) for stream in self.nfa.stream_index])
        lo, hi = columns.bounds()[:, rows]
        with np.errstate(invalid="ignore"):     # NaN: not an interval
            instants = lo[(lo == hi) & (lo % 1 == 0) & (np.abs(lo) <= GRID_LIMIT)]
        times = [int(instants.max())] if len(instants) else []
        wider = (first_instant(columns.event(i).ts) for i in rows[lo < hi].tolist())
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
            self._process(self.held.ready(frontier), out)
            if math.floor(frontier) > self.clock:
                self.clock = math.floor(frontier)
                self._release(self.clock, out)
                self._compact()
        self._finish_block(out)

    def wake(self) -> dict[str, float]:
        """The time seen at which a held event is released, or a waiting match's window closes."""
        due = min(self.held.times[:1] + self.waiting.deadlines(), default=math.inf)
        return {"seen": due + self.max_delay - 0.5} if due < math.inf else {}

    def state_fields(self) -> dict[str, Any]:
        """Configuration and state (queues, waiting matches, learned densities); the
        scoring tables are computed again on restore."""
        nfa, densities, held, waiting = self.nfa, self.densities, self.held, self.waiting
        fields = {
            "query": nfa.query, "miss_probs": nfa.miss_probs, "max_delay": self.max_delay,
            "fixed_gaps": nfa.fixed_gaps, "learn": nfa.learn, "threshold": self.threshold,
            "learned": densities.learned, "gap_samples": densities.gap_samples,
            "sample_count": densities.sample_count, "paqs": self.paqs, "naqs": self.naqs, "pending": waiting.pending,
            "held_times": held.times, "held_events": held.events, "held_streams": held.streams,
            "anchors": self.anchors, "clock": self.clock, "seen": self.seen, "processed": self.processed,
            "sequence": waiting.sequence, "totals": self.totals, "key_codes": self.hash_keys.codes,
            "next_code": self.hash_keys.next_code, "live_codes": self.hash_keys.live, "key_group": self.key_group,
            "held_parts": held.parts, "vague": self.vague, "vague_seen": self.vague_seen, "worlds": waiting.worlds,
        }
        return {name: fields[name] for name in self.STATE_FIELDS}

    @classmethod
    def from_state(cls, fields: dict[str, Any]) -> LossyOperator:
        operator = cls.__new__(cls)
        operator._start(NFA(fields["query"], fields["miss_probs"], fields["fixed_gaps"], fields["learn"]),
                        fields["max_delay"], fields)
        return operator

    def queue_count(self) -> int:
        """Hashed queues holding entries, over every state and negative component."""
        return sum(len(queue.keys()) for queue in self._queues())

    def _queues(self) -> list[Queue | Vague]:
        return [*self.paqs, *(queue for queues in self.naqs.values() for queue in queues), *self.anchors.values(),
                *self.vague.values()]

    # --- input ------------------------------------------------------------------------------

    def _stream(self, name: str) -> int:
        index = self.stream_of.get(name)
        if index is None:
            index = self.stream_of[name] = self.nfa.stream_index.get(name.casefold(), -1)
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
        times = grid_times(stamps)
        bad = ~(times % 1 == 0) | (times < self.clock) | (np.abs(times) > GRID_LIMIT)
        spread: dict[int, np.ndarray] = {}          # row -> the instants of an imprecise timestamp
        if bad.any():
            for n in np.flatnonzero(bad).tolist():
                read = why_late(times[n], self.clock) if not math.isnan(times[n]) else \
                    read_support(stamps[n], self.clock)
                if isinstance(read, str):
                    self._late(events[n], read, out)
                else:
                    spread[n] = read
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
        parts = [PRECISE] * len(times)
        if spread:
            events, streams, times, parts = per_instant(events, streams, times, spread)
        self.held.hold(events, streams, times, parts)

    def _late(self, event: Event, reason: str, out: BlockResult) -> None:
        self.totals["late"] += 1
        out.late.append(Late(event, reason))

    def _finish_block(self, out: BlockResult) -> None:
        """Observations for the dashboard: the totals and the size of the state (queued
        entries, waiting matches, held events)."""
        out.observations.update(self.totals, queue_entries=sum(len(queue) for queue in self._queues()),
                                pending=len(self.waiting), held=len(self.held),
                                clock=self.clock if math.isfinite(self.clock) else None)

    # --- blocks -------------------------------------------------------------------------------

    def _process(self, count: int, out: BlockResult) -> None:
        """Run the first ``count`` held events through the NFA, in chunks that end where
        learned tables may move (every LEARN_CHECK_EVERY events processed)."""
        if not count:
            return
        times, events, streams, parts = self.held.take(count)
        learning = bool(self.densities.learned)
        start = 0
        while start < count:
            stop = min(count, start + LEARN_CHECK_EVERY - self.processed % LEARN_CHECK_EVERY) if learning else count
            self._chunk(times[start:stop], events[start:stop], streams[start:stop], parts[start:stop], out)
            self.processed += stop - start
            if learning and self.processed % LEARN_CHECK_EVERY == 0 \
                    and self.densities.sample_count >= max(LEARN_EVERY, self.nfa.window // 4):
                self.densities.learn()
                self._refresh_tables()
            start = stop

    def _chunk(self, times: np.ndarray, events: np.ndarray, streams: np.ndarray, parts: np.ndarray,
               out: BlockResult) -> None:
        """One chunk through the NFA: NAQ pushes, then each state's arrivals in order
        (bounds, threshold pruning, PAQ pushes; match generation at the last state);
        then the waiting matches whose window closed, and queue compaction. An imprecise
        event comes once per instant (``parts``, :mod:`.held`): a negative component keeps
        it whole, from its first instant."""
        nfa = self.nfa
        vague = bool(parts.any())
        self.vague_seen |= vague
        codes: dict[str, np.ndarray] = {}
        selected = []
        for k in range(len(nfa.query.components)):
            rows = np.flatnonzero(streams == nfa.component_stream[k])
            name = nfa.key_attribute(k)
            if name is None:
                key = np.full(len(rows), NO_KEY, np.int64)
            else:
                if name not in codes:
                    codes[name] = self.hash_keys.of(events, name, self.key_group)
                key = codes[name][rows]
            if nfa.unconditional[k]:
                mask = np.full(len(rows), nfa.unconditional[k], np.int64)
            else:
                mask = np.fromiter((nfa.clause_mask(k, event.attrs) for event in events[rows]),
                                   dtype=np.int64, count=len(rows))
            usable = (mask != 0) & (key >= 0)      # key -1: an equality on an absent attribute never holds
            selected.append((rows[usable], key[usable], mask[usable]))
        for k, queues in self.naqs.items():
            rows, key, mask = selected[k]
            if vague and len(rows):
                part = parts[rows]
                for n in np.flatnonzero((part == FIRST_INSTANT) | (part == FIRST_INSTANT + WIDE)).tolist():
                    event = events[rows[n]]
                    instants = support(event.ts)[0]
                    self.vague[k].push(int(instants[0]), int(instants[-1]), int(key[n]), int(mask[n]), event)
                precise = part == PRECISE
                rows, key, mask = rows[precise], key[precise], mask[precise]
            for bit, queue in enumerate(queues if len(rows) else ()):
                has = (mask >> bit & 1).astype(bool)
                queue.push(times[rows[has]], key[has], events[rows[has]])
        last = len(nfa.positives) - 1
        for state, k in enumerate(nfa.positives):
            rows, key, mask = selected[k]
            if not len(rows):
                continue
            t = times[rows]
            if state in self.anchors:
                precise = parts[rows] == PRECISE if vague else slice(None)
                self.anchors[state].push(t[precise], key[precise], events[rows[precise]])
            bound = self.tables.bounds(self.paqs, state, t, key)
            keep = meets(bound, self.threshold)
            self.totals["arrivals"] += len(rows)
            self.totals["pruned_arrivals"] += len(rows) - int(np.count_nonzero(keep))
            wide = parts[rows[keep]] >= FIRST_INSTANT + WIDE      # instants of imprecise events of many instants
            if state < last:
                self.paqs[state].push(t[keep], key[keep], events[rows[keep]], mask[keep], bound[keep], wide)
            else:
                for found in self._generation().generate(t[keep], key[keep], mask[keep], events[rows[keep]], wide):
                    self._settle(found, out)
        for k, state in nfa.anchor_state.items():
            rows, key, _ = selected[k]
            if vague:       # an imprecise negative's gap is not known
                rows, key = rows[parts[rows] == PRECISE], key[parts[rows] == PRECISE]
            if not len(rows):
                continue
            anchors = self.anchors[state] if state in self.anchors else self.paqs[0]
            t = times[rows]
            start, stop = anchors.find(key, t - nfa.window, t)
            found = start < stop
            newest = anchors.order[stop[found] - 1]
            gaps = t[found] - anchors.t[newest]
            if self.vague_seen:     # the newest anchor imprecise: the gap is not known
                gaps = gaps[np.fromiter((e.ts.lo == e.ts.hi for e in anchors.event[newest]), bool, len(newest))]
            self.densities.sample(nfa.query.components[k].var, gaps)
        if len(times):
            self.clock = int(times[-1])
            self._release(self.clock, out)
            self._compact()

    # --- matches ------------------------------------------------------------------------------

    def _settle(self, found: Found, out: BlockResult) -> None:
        """What match generation found: a match to report now, one to wait for the window
        of its trailing negatives, or one to evaluate over its worlds."""
        if isinstance(found, Completed):
            self._report(found.path, found.score, out, path_factors(self.nfa, self.tables, found.path))
        elif isinstance(found, Pending):
            self.waiting.hold(found, path_factors(self.nfa, self.tables, found.path), self.nfa.window)
        else:
            self.waiting.schedule(found.events, found.key, self.nfa.window, bool(self.nfa.trailing_negatives))

    def _release(self, until: float, out: BlockResult) -> None:
        """Report the waiting matches whose window ended by ``until``: no trailing negative
        in (t_last, t_first + W) under one of the clauses that accepted the path, scored
        by the trailing run (over the worlds of the imprecise negative events that may lie
        there); then the matches due for their evaluation over worlds."""
        nfa = self.nfa
        worlds = self._worlds() if self.vague_seen else None
        generation = None
        for deadline, _, key, t_last, score, path, clauses, factors in self.waiting.pending_due(until):
            trailing = float(self.tables.trailing[deadline - t_last])
            score *= trailing
            if not meets(score, self.threshold):
                continue
            if worlds is not None and worlds.trailing_touched(key, path[max(path)][0], deadline):
                try:    # an imprecise negative may lie in the window: the share of worlds it is clear
                    held = worlds.trailing(key, t_last, deadline, clauses)
                except TooManyWorlds as error:
                    self._too_many({s: event for s, (_, event) in path.items()}, error, out)
                    continue
            else:
                generation = generation or self._generation()
                held = float(generation.trailing_clear(key, t_last, deadline, clauses))
            if held and meets(score * held, self.threshold):
                self._report(path, score * held, out, factors + [run_factor(
                    nfa, nfa.state_vars[-1], None, nfa.trailing_negatives, deadline - t_last, trailing * held)])
        for key, events in self.waiting.worlds_due(until):
            worlds = worlds or self._worlds()
            self._evaluate(worlds, events, key, out)

    def _evaluate(self, worlds: PossibleWorlds, events: dict[int, Event], key: int, out: BlockResult) -> None:
        """Report a match over its possible worlds, if it is one that reaches the threshold."""
        try:
            prob, combinations = worlds.probability(events, key)
        except TooManyWorlds as error:
            self._too_many(events, error, out)
            return
        if prob is None or not meets(prob, self.threshold):
            return
        path = {s: (int(support(e.ts)[0][0]), e) for s, e in events.items()}
        self._report(path, prob, out, [worlds_factor(self.nfa, prob, combinations)],
                     learn=all(map(certain, events.values())))

    def _too_many(self, events: dict[int, Event], error: TooManyWorlds, out: BlockResult) -> None:
        """Report a match beyond the evaluation's bounds in ``late``, with its last event."""
        self.totals["late"] += 1
        out.late.append(Late(events[max(events)], f"the match {', '.join(e.id for _, e in sorted(events.items()))} "
                                                  f"over imprecise timestamps needs {error} to evaluate, more than "
                                                  f"this operator computes for one match"))

    def _report(self, path: NFAPath, score: float, out: BlockResult, factors: list[dict[str, Any]],
                learn: bool = True) -> None:
        """Report a match and learn its gaps (``learn``: they are known)."""
        out.matches.append(to_match(self.nfa, path, score, factors))
        self.totals["matches"] += 1
        if learn:
            self.densities.observe(path, self.nfa.state_vars)

    # --- memory -------------------------------------------------------------------------------

    def _safe_horizon(self, now: float) -> int:
        """Entries at or before this time serve no match ending at ``now`` or later, nor
        a waiting match's trailing negatives."""
        return self.waiting.horizon(math.floor(now) - self.nfa.window)

    def _compact(self) -> None:
        """Dequeue by window the queues that doubled since their last compaction (amortised
        O(1) per entry), and forget hash keys no entry uses any more."""
        horizon = None
        for queue in self._queues():
            if queue.due():
                horizon = self._safe_horizon(self.clock) if horizon is None else horizon
                queue.expire(horizon)
        if self.hash_keys.crowded():
            self._forget_keys()

    def _forget_keys(self) -> None:
        """Drop the codes of hash-key values with no queued entry and no waiting match."""
        live = self.waiting.keys()
        for queue in self._queues():
            live.update(queue.keys().tolist())
        self.hash_keys.keep(live)
