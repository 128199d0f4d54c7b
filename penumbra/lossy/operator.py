"""The AYAC operator: an NFA with probabilistic arrival queues over a lossy stream.

NFA (section 4): one state V_1..V_l per *positive* component, V_0 initial and V_{l+1}
final. An edge V_i -> V_j skips the positives between them (missed by their readers)
and is labelled with the scoring function H_{i,j} of the run of components between
(:func:`~penumbra.lossy.model.run_score`); negatives have no state. Edges whose
G_{i,j}(W) = max_{T <= W} H_{i,j}(T) is below the threshold are removed.

Per event (in increasing time; an event may serve several components):

* a negative component's event joins that component's NAQ;
* a positive component's event arrives at its state with the bound of section 5.1,
  v_new = max_i (max_k u_{i,k}) G_{i,j}(t_new - t_{i,0}), or G_{0,1}(W) at the first
  state, and is enqueued only if v_new reaches the threshold (threshold pruning);
* an arrival at the last state starts backward match generation (section 4.2): paths
  are extended from V_l back to V_1 through the PAQs by binary search, keeping a path
  only while its score times the bound u of its next arrival reaches the threshold,
  searching each negative component's NAQ in its interval as soon as the predicates on
  it can be evaluated, and applying each non-trivial predicate as soon as its
  components are bound. Predicates on a missed component use its DEFAULT values.

The first and last positive components must be observed (the case section 4.2 treats);
any run of components between observed positives may be missed. Negatives before the
first positive must be absent from (t_last - W, t_first) (the NFA enters V_0 at
t_new - W, footnote 2), negatives after the last from (t_last, t_first + W): such a
match waits until the stream passes t_first + W (or the end of input).

Queues are hashed on the query's equality attributes (section 5.2, e.g. the RFID tag):
when one attribute of every positive component is tied by ``=`` in every clause, each
state keeps one PAQ per key value, and so does every negative tied to that key. Queues
dequeue by window as they are read; queues no event reads any more are dropped by
passes paced with the input, so memory stays O(W).

Input: precise timestamps ``{"lo": t, "hi": t}`` on the unit grid, processed in
increasing time. A block may come in any order: it is sorted, and events are held
until they are older than the largest stream max delay D (the external buffer of
section 2.1). An event older than one already processed is reported as ``Late``, and
so is an imprecise timestamp.
"""

from __future__ import annotations

import heapq
import io
import itertools
import math
import pickle
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping, Sequence

import numpy as np

from ..errors import ValidationError
from ..events import Event, Streams
from ..operator import BlockResult, Late, Match, Operator, check_threshold
from ..query.ast import Attr, Compare, Expr, attrs_of, equality_classes, evaluate, variables_of
from ..query.errors import QueryError
from ..query.sequence import SequenceQuery
from ..timestamps import Interval
from .model import GapHistogram, RunComponent, gap_pmf, run_score
from .queues import ArrivalQueue, TimeQueue

__all__ = ["LEARN_EVERY", "LossyOperator"]

_NO_KEY = ()

#: Events between two passes over idle queues, per queue left by the last pass (and at
#: least SWEEP_MIN queues' worth); queues visited per event during a pass.
SWEEP_RATIO = 4
SWEEP_MIN = 1024
SWEEP_PACE = 2

#: Gap samples gathered before the densities and scoring tables are updated: at least
#: this many, and at least W / 4 so the O(W) update costs amortised O(1) per sample.
LEARN_EVERY = 1024

#: Attributes that make up an operator's state (the rest derives from its configuration).
_STATE = ("threshold", "learned", "gap_samples", "paqs", "naqs", "pending", "held_times", "held_events",
          "held_routes", "clock", "seen", "sequence", "totals", "since_sweep", "swept_size", "sweep_plan")


class _StatePickler(pickle.Pickler):
    """Pickles events' read-only attribute mappings as plain dicts."""

    def reducer_override(self, obj):
        if isinstance(obj, MappingProxyType):
            return _read_only, (dict(obj),)
        return NotImplemented


def _read_only(attrs: dict) -> MappingProxyType:
    return MappingProxyType(attrs)


@dataclass(frozen=True)
class _Literal:
    """A non-trivial predicate of one clause: the positive components it reads and
    whether it is an equality of hash attributes (true inside one hashed queue)."""

    expr: Expr
    needs: frozenset[str]
    implied: bool


@dataclass(frozen=True)
class _NegativeCheck:
    """A negative component under one clause: its variable, whether its NAQs are hashed,
    the positive components its predicates read, the predicates, and those left once
    the hash-attribute equalities are known to hold (all its positives observed)."""

    var: str
    hashed: bool
    needs: frozenset[str]
    literals: tuple[Expr, ...]
    unimplied: tuple[Expr, ...]


@dataclass(frozen=True)
class _ClausePlan:
    """What match generation checks for one DNF clause (bit ``bit`` of the masks)."""

    bit: int
    literals: tuple[_Literal, ...]                 # on positive components only
    negatives: dict[int, _NegativeCheck]           # by negative component index


@dataclass
class _Walk:
    """One backward match generation: its clause, hash key, last arrival time, and the
    paths already emitted (a path satisfying two clauses is reported once)."""

    plan: _ClausePlan
    key: Any
    t_last: int
    emitted: dict     # path identity -> True once emitted, or the clauses of its waiting match


def _equalities(literals) -> list[tuple[Attr, Attr]]:
    return [(lit.left, lit.right) for lit in literals
            if isinstance(lit, Compare) and lit.op == "=" and isinstance(lit.left, Attr)
            and isinstance(lit.right, Attr) and lit.left.var != lit.right.var]


def _key_attributes(query: SequenceQuery, never_missed: set[str]) -> dict[str, str]:
    """The hash attribute of each component (section 5.2).

    Positive components are hashed when equalities between positives, in every clause,
    tie one attribute of each into one class; a negative is hashed on its attribute set
    equal to the key attribute of a positive that is ``never_missed`` (a missed one's
    DEFAULT could name another key). An equality through a negative does not tie
    positives (``x.tag = y.tag AND y.tag = z.tag`` with ``y`` negated says nothing of x and z).
    """
    common = _equalities(set(query.clauses[0].joint).intersection(*(c.joint for c in query.clauses[1:])))
    positives = {query.components[k].var for k in query.positives}
    for by_var in equality_classes((left, right) for left, right in common
                                   if left.var in positives and right.var in positives):
        if positives <= set(by_var) and all(len(by_var[v]) == 1 for v in positives):
            keys = {var: names[0] for var, names in by_var.items()}
            for left, right in common:
                for negative, other in ((left, right), (right, left)):
                    if negative.var not in positives and other.var in never_missed \
                            and keys.get(other.var) == other.name:
                        keys.setdefault(negative.var, negative.name)
            return keys
    return {}


class LossyOperator(Operator):
    """Evaluates one ``SEQUENCE`` query (AYAC) over a lossy stream.

    ``gaps`` optionally fixes gap densities f_i (a pmf over gaps 0..W, ``pmf[0] = 0``)
    by component variable; the query's ``GAP`` clause takes precedence, and every other
    component (but the first positive) learns its density online (``learn=True``).
    Positive components' gaps are learned from the emitted matches with both ends
    observed; a negative component's from the first of its events found inside an
    interval during match generation (censored by the interval, so biased short). The
    tables move every max(LEARN_EVERY, W / 4) gaps. Bounds u are computed at arrival
    (section 4.1) with the tables then in force, so for up to W after a move a path the
    new tables score just above the threshold may have been pruned; with fixed
    densities (``GAP``, ``gaps``, ``learn=False``) pruning loses nothing.

    >>> from penumbra.query import parse
    >>> from penumbra.events import Streams, parse_event
    >>> q = parse("SEQUENCE(A x, !B y, C z) WHERE x.tag = z.tag AND y.tag = x.tag WITHIN 10 THRESHOLD 0.5")
    >>> op = LossyOperator(q, Streams())
    >>> ev = lambda s, i, t: parse_event({"stream": s, "id": i, "ts": {"lo": t, "hi": t}, "attrs": {"tag": 7}})
    >>> [m.to_json() for m in op.feed([ev("A", "a1", 1), ev("C", "c1", 5)]).matches]
    [{'events': {'x': 'a1', 'z': 'c1'}, 'prob': 1.0}]
    """

    def __init__(self, query: SequenceQuery, streams: Streams | Mapping, gaps: Mapping[str, np.ndarray] | None = None,
                 *, learn: bool = True):
        if not isinstance(streams, Streams):
            streams = Streams(streams.values())
        params = [streams.get_or_default(c.stream) for c in query.components]
        fixed = {var: self._checked_pmf(var, pmf, query.window) for var, pmf in (gaps or {}).items()}
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
        unknown = set(fixed) - set(query.variables)
        if unknown:
            raise ValidationError("gaps", f"unknown component variable {sorted(unknown)[0]!r}")
        first = components[self.positives[0]].var
        self.learned = {c.var: GapHistogram(self.window) for c in components
                        if c.var not in fixed and c.var != first and learn}
        self.by_stream: dict[str, list[int]] = {}
        for k, c in enumerate(components):
            self.by_stream.setdefault(c.stream.casefold(), []).append(k)
        self.key_attr = _key_attributes(query, {components[k].var for k in self.positives
                                                if not self._may_miss(k)})
        self.key_of = [self.key_attr.get(c.var) for c in components]
        self.trivial = [[clause.trivial.get(c.var, ()) for clause in query.clauses] for c in components]
        everything = (1 << len(query.clauses)) - 1
        # components with no trivial predicate in any clause accept every event of their stream
        self.unconditional = [everything if not any(literals) else 0 for literals in self.trivial]
        self._check_defaults()
        self.plans = [self._plan(bit, clause) for bit, clause in enumerate(query.clauses)]
        self.edges = {(i, j): self._edge(i, j) for i, j in itertools.combinations(range(len(self.positives)), 2)}
        self.leading_negatives = range(self.positives[0])
        self.trailing_negatives = range(self.positives[-1] + 1, len(components))
        self.paqs: list[dict[Any, ArrivalQueue]] = [{} for _ in self.positives]
        self.naqs: dict[int, dict[Any, TimeQueue]] = {k: {} for k, c in enumerate(components) if c.negated}
        self.pending: list = []
        self.routes: dict[str, tuple] = {}
        self.since_sweep = 0               # events processed since the last pass over idle queues
        self.swept_size = 0                # queues the last pass left (so far, during a pass)
        self.sweep_plan: list = []         # (queues, key) still to visit in this pass
        self.held_times: list[int] = []     # the reorder buffer: held events in time order
        self.held_events: list[Event] = []
        self.held_routes: list[tuple] = []
        self.clock = -math.inf          # time of the last event processed
        self.seen = -math.inf           # largest time seen
        self.sequence = 0               # arrival order, to break ties in heaps
        self.totals = {"events": 0, "matches": 0, "late": 0, "arrivals": 0, "pruned_arrivals": 0,
                       "pruned_paths": 0, "negated_paths": 0, "ignored": 0}
        self.gap_samples: list[tuple[str, int]] = []     # (variable, gap) not yet learned
        self._refresh_tables()

    def _may_miss(self, k: int) -> bool:
        return k not in (self.positives[0], self.positives[-1]) and self.miss_probs[k] > 0

    def _check_defaults(self) -> None:
        """A joint predicate on a positive component that may be missed needs a DEFAULT
        for each attribute it reads (section 2.2)."""
        missable = {self.query.components[k].var for k in self.positives if self._may_miss(k)}
        for clause in self.query.clauses:
            for literal in clause.joint:
                for attr in attrs_of(literal):
                    if attr.var in missable and attr.name not in self.query.defaults.get(attr.var, {}):
                        raise QueryError.at(attr, f"{attr.var} may be missed (miss_prob > 0): give "
                                            f"DEFAULT {attr.var}.{attr.name} = ...")

    def _implied_by_key(self, literal: Expr) -> bool:
        """``x.tag = y.tag`` on the hash attributes always holds inside one hashed queue."""
        return (isinstance(literal, Compare) and literal.op == "=" and isinstance(literal.left, Attr)
                and isinstance(literal.right, Attr)
                and self.key_attr.get(literal.left.var) == literal.left.name
                and self.key_attr.get(literal.right.var) == literal.right.name)

    def _plan(self, bit: int, clause) -> _ClausePlan:
        components = self.query.components
        negated = {c.var: k for k, c in enumerate(components) if c.negated}
        literals = []
        on_negative: dict[int, list[_Literal]] = {k: [] for k in negated.values()}
        for expr in clause.joint:
            used = variables_of(expr)
            negative = used & set(negated)
            literal = _Literal(expr, frozenset(used - negative), self._implied_by_key(expr))
            if negative:
                on_negative[negated[negative.pop()]].append(literal)
            else:
                literals.append(literal)
        checks = {k: _NegativeCheck(components[k].var, components[k].var in self.key_attr,
                                    frozenset().union(*(t.needs for t in terms)), tuple(t.expr for t in terms),
                                    tuple(t.expr for t in terms if not t.implied))
                  for k, terms in on_negative.items()}
        return _ClausePlan(bit, tuple(literals), checks)

    def _edge(self, i: int, j: int) -> tuple[str, tuple[str, ...], tuple[tuple[int, bool], ...]]:
        """Edge V_i -> V_j: V_i's variable, the positives it skips (missed), and the
        negatives of its run, each "anchored" when no positive precedes it in the run (its
        gap is then measured from V_i's arrival, which is how its f is learned)."""
        components = self.query.components
        start, end = self.positives[i], self.positives[j]
        skipped = tuple(components[k].var for k in self.positives[i + 1:j])
        run = tuple((k, not any(not c.negated for c in components[start + 1:k]))
                    for k in range(start + 1, end) if components[k].negated)
        return components[start].var, skipped, run

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
        # lists, not arrays: the hot path reads single entries
        self.score: dict[tuple[int, int], list[float]] = {}
        for i, j in itertools.combinations(range(len(states)), 2):
            self.score[i, j] = run_score(run[states[i] + 1:states[j]], self.window).tolist()
        self.leading = run_score(run[:states[0]], self.window).tolist()
        self.trailing = run_score(run[states[-1] + 1:], self.window).tolist()
        self.reach: dict[tuple[int, int], list[float]] = {
            edge: np.maximum.accumulate(np.asarray(table)).tolist() for edge, table in self.score.items()}
        self.monotone = {edge: bool(np.all(np.diff(table[1:]) <= 0)) for edge, table in self.score.items()}
        self.initial_bound = max(self.leading)
        self._prune_edges()

    def _prune_edges(self) -> None:
        self.incoming = [[i for i in range(j) if self.reach[i, j][self.window] >= self.threshold]
                         for j in range(len(self.positives))]

    # --- Operator interface -------------------------------------------------------------

    def set_threshold(self, threshold: float) -> None:
        """Takes effect for the next block. Arrivals pruned under a higher threshold stay pruned."""
        self.threshold = check_threshold(threshold)
        self._prune_edges()

    @property
    def counters(self) -> dict[str, int | float]:
        return {**self.totals, "paq_entries": sum(len(q) for qs in self.paqs for q in qs.values()),
                "naq_entries": sum(len(q) for qs in self.naqs.values() for q in qs.values()),
                "pending": len(self.pending), "held": len(self.held_times)}

    def feed(self, events: Sequence[Event]) -> BlockResult:
        out = BlockResult()
        self._admit(events, out)
        cut = bisect_right(self.held_times, self.seen - self.max_delay)
        self._process(*self._take_held(cut), out)
        self._finish_block(out)
        return out

    def _take_held(self, count: int) -> tuple[zip, int]:
        """The first ``count`` held events, in time order, as (t, event, route), and ``count``."""
        ready = zip(self.held_times[:count], self.held_events[:count], self.held_routes[:count])
        del self.held_times[:count], self.held_events[:count], self.held_routes[:count]
        return ready, count

    def flush(self) -> BlockResult:
        """End of input: process the held events and emit every match still waiting for
        the window of its trailing negatives to pass."""
        out = BlockResult()
        self._process(*self._take_held(len(self.held_times)), out)
        self._release(math.inf, out)
        self._finish_block(out)
        return out

    def evict(self, watermark: float) -> int:
        """Drop queue entries no match ending at or after ``watermark`` can use."""
        return self._sweep(self._safe_horizon(watermark))

    def snapshot(self) -> bytes:
        """Configuration and state (queues, waiting matches, learned densities) as bytes;
        the scoring tables are recomputed on restore."""
        config = (self.query, self.miss_probs, self.max_delay, self.fixed_gaps, self.learn)
        state = {name: getattr(self, name) for name in _STATE}
        buffer = io.BytesIO()
        _StatePickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump((config, state))
        return buffer.getvalue()

    @classmethod
    def restore(cls, data: bytes) -> LossyOperator:
        """The operator a :meth:`snapshot` was taken from (trusted bytes only: pickle)."""
        config, state = pickle.loads(data)
        operator = cls.__new__(cls)
        operator._setup(*config)
        operator.__dict__.update(state)
        operator._refresh_tables()
        return operator

    # --- input ------------------------------------------------------------------------------

    def _route(self, stream: str) -> tuple:
        """What an event of ``stream`` may be: (component, state or -1 for a negative,
        hash attribute, clause mask when no trivial predicate is on it (else 0), queues
        it joins directly)."""
        route = self.routes.get(stream)
        if route is None:
            route = self.routes[stream] = tuple(
                (k, self.state_of.get(k, -1), self.key_of[k], self.unconditional[k], self._direct_queues(k))
                for k in self.by_stream.get(stream.casefold(), ()))
        return route

    def _direct_queues(self, k: int) -> dict | None:
        """The queues an event of component k joins without a bound to compute: the NAQs
        of a negative, the PAQs of V_1 when it is not also the last state."""
        if self.query.components[k].negated:
            return self.naqs[k]
        return self.paqs[0] if self.state_of[k] == 0 and len(self.positives) > 1 else None

    def _admit(self, events: Sequence[Event], out: BlockResult) -> None:
        """Hold, in time order, the events of the query's streams that have a precise
        timestamp on the grid not older than the last one processed (the external
        buffer of section 2.1, released after the streams' max delay D)."""
        self.totals["events"] += len(events)
        routes = [self.routes.get(event.stream) or self._route(event.stream) for event in events]
        if not all(routes):
            events = list(itertools.compress(events, routes))
            self.totals["ignored"] += len(routes) - len(events)
            routes = [route for route in routes if route]
        stamps = [event.ts for event in events]
        precise = [type(ts) is Interval and ts.lo == ts.hi for ts in stamps]
        times = np.fromiter((ts.lo if ok else math.nan for ts, ok in zip(stamps, precise)),
                            dtype=float, count=len(stamps))
        bad = ~(times % 1 == 0) | (times < self.clock)
        if bad.any():
            for n in np.flatnonzero(bad).tolist():
                self._late(events[n], self._why_late(times[n]), out)
            keep = (~bad).tolist()
            events = list(itertools.compress(events, keep))
            routes = list(itertools.compress(routes, keep))
            times = times[~bad]
        if not events:
            return
        times = times.astype(np.int64)
        self.seen = max(self.seen, int(times.max()))
        if len(times) > 1 and not (np.diff(times) >= 0).all() or (self.held_times and self.held_times[-1] > times[0]):
            times = np.concatenate((np.asarray(self.held_times, dtype=np.int64), times))
            order = np.argsort(times, kind="stable").tolist()
            events, routes = self.held_events + list(events), self.held_routes + routes
            events, routes = [events[n] for n in order], [routes[n] for n in order]
            self.held_times, self.held_events, self.held_routes = times[order].tolist(), events, routes
        else:
            self.held_times += times.tolist()
            self.held_events += events
            self.held_routes += routes

    def _why_late(self, t: float) -> str:
        if math.isnan(t):
            return "lossy CEP needs a precise timestamp {\"lo\": t, \"hi\": t}"
        if t % 1:
            return f"time {t:g} is not on the unit grid of the query (integer times)"
        return f"out of order: time {t:g} is before {self.clock:g}, already processed"

    def _late(self, event: Event, reason: str, out: BlockResult) -> None:
        self.totals["late"] += 1
        out.late.append(Late(event, reason))

    def _finish_block(self, out: BlockResult) -> None:
        """Observations for the dashboard: the totals and the size of the state (queues
        by hash key, waiting matches, held events) without walking every queue."""
        out.observations.update(self.totals, queues=self.queue_count(), pending=len(self.pending),
                                held=len(self.held_times),
                                clock=self.clock if math.isfinite(self.clock) else None)

    def _learn(self) -> None:
        """Add the gaps seen since the last update to the estimates of f (section 3) and
        recompute the scoring tables. Done every max(:data:`LEARN_EVERY`, W / 4) gaps,
        counted in event order, so results do not depend on how the input is cut into blocks."""
        by_var: dict[str, list[int]] = {}
        for var, gap in self.gap_samples:
            by_var.setdefault(var, []).append(gap)
        for var, gaps in by_var.items():
            self.learned[var].add(np.asarray(gaps))
        self.gap_samples = []
        self._refresh_tables()

    def _safe_horizon(self, now: float) -> int:
        """Entries at or before this time serve no match ending at ``now`` or later, nor
        a waiting match's trailing negatives."""
        horizon = math.floor(now) - self.window
        if self.pending:
            horizon = min(horizon, min(item[3] for item in self.pending))
        return horizon

    def queue_count(self) -> int:
        return sum(len(queues) for queues in (*self.paqs, *self.naqs.values()))

    def _sweep(self, horizon: int) -> int:
        """Dequeue every entry at or before ``horizon`` and drop the emptied queues."""
        gone = 0
        for queues in (*self.paqs, *self.naqs.values()):
            for key, queue in list(queues.items()):
                gone += queue.expire(horizon)
                if queue.head == len(queue.entries):
                    del queues[key]
        return gone

    def _sweep_some(self, processed: int) -> None:
        """Dequeue idle queues a few at a time (dequeue by window, section 4.1, for
        queues no event touches any more): once SWEEP_RATIO times more events went by
        than queues were left by the last pass, a new pass lists every queue and visits
        SWEEP_PACE of them per event processed. A pass thus costs amortised O(1) per
        event, never stalls a block, and idle queues hold O(W) memory."""
        self.since_sweep += processed
        if not self.sweep_plan:
            if self.since_sweep <= SWEEP_RATIO * max(self.swept_size, SWEEP_MIN) or not math.isfinite(self.clock):
                return
            self.sweep_plan = [(queues, key) for queues in (*self.paqs, *self.naqs.values()) for key in queues]
            self.since_sweep = self.swept_size = 0
        horizon = self._safe_horizon(self.clock)
        plan = self.sweep_plan
        for _ in range(min(SWEEP_PACE * processed, len(plan))):
            queues, key = plan.pop()
            queue = queues.get(key)
            if queue is not None:
                queue.expire(horizon)
                if queue.head == len(queue.entries):
                    del queues[key]
                else:
                    self.swept_size += 1

    def _process(self, ready, processed: int, out: BlockResult) -> None:
        """The NFA over events in time order: NAQ pushes and PAQ arrivals. Arrivals at
        V_1 (the commonest) are enqueued here with u = G_{0,1}(W), others by :meth:`_arrive`."""
        initial_bound = self.initial_bound
        enter = initial_bound >= self.threshold
        entered = pruned = 0
        clock = self.clock
        pending = self.pending
        for t, event, route in ready:
            if t > clock:
                if pending and pending[0][0] <= t:
                    self._release(t, out)
                clock = self.clock = t
            attrs = event.attrs
            arrivals = []
            for k, state, key_name, mask, queues in route:
                if not mask:
                    mask = self._clause_mask(k, attrs)
                    if not mask:
                        continue
                key = attrs.get(key_name) if key_name else _NO_KEY
                if key is None:
                    continue    # an equality on an absent attribute never holds
                if queues is None:
                    arrivals.append((state, key, mask))
                    continue
                if state == 0 and not enter:
                    pruned += 1
                    continue
                queue = queues.get(key)
                if queue is None:
                    queue = queues[key] = TimeQueue()
                if state < 0:
                    queue.entries.append((t, mask, event))
                else:
                    queue.entries.append((t, mask, event, initial_bound))
                    entered += 1
            if arrivals:
                if len(arrivals) > 1:
                    arrivals.sort(reverse=True)     # later states first: a path never uses one event twice
                for state, key, mask in arrivals:
                    self._arrive(state, key, mask, t, event, out)
                if len(self.gap_samples) >= max(LEARN_EVERY, self.window // 4):
                    self._learn()
        self.totals["arrivals"] += entered + pruned
        self.totals["pruned_arrivals"] += pruned
        self._sweep_some(processed)

    def _clause_mask(self, k: int, attrs) -> int:
        """Bit c set when the event satisfies clause c's trivial predicates on component k."""
        var = self.query.components[k].var
        mask = 0
        for bit, literals in enumerate(self.trivial[k]):
            if all(evaluate(literal, {var: attrs}) is True for literal in literals):
                mask |= 1 << bit
        return mask

    # --- NFA ------------------------------------------------------------------------------

    def _arrive(self, state: int, key, mask: int, t: int, event: Event, out: BlockResult) -> None:
        """An arrival at V_state: bound v_new (section 5.1), threshold pruning, then
        enqueue in the state's PAQ or, at the last state, match generation.

        v_new = max_i (max_k u_{i,k}) G_{i,j}(t - t_{i,0}); when H_{i,j} is
        non-increasing (runs of negatives, S^N), the tighter H_{i,j}(t - t_{i,newest})
        bounds every H_{i,j}(t - t_{i,k}) (the monotonic improvement of section 5.1).
        Entries older than the window may still be queued: they only loosen the bound.
        """
        self.totals["arrivals"] += 1
        if state == 0:
            bound = self.initial_bound
        else:
            bound = 0.0
            for i in self.incoming[state]:
                queue = self.paqs[i].get(key)
                if queue is None or queue.head == len(queue.entries):
                    continue
                peak = self.initial_bound if i == 0 else queue.max_bound()
                if self.monotone[i, state]:
                    newest = bisect_left(queue.entries, (t,), queue.head) - 1
                    if newest < queue.head or t - queue.entries[newest][0] >= self.window:
                        continue    # nothing queued before t inside the window
                    factor = self.score[i, state][t - queue.entries[newest][0]]
                else:
                    factor = self.reach[i, state][min(t - queue.entries[queue.head][0], self.window)]
                bound = max(bound, peak * factor)
        if bound < self.threshold:
            self.totals["pruned_arrivals"] += 1
            return
        if state == len(self.positives) - 1:
            self._generate(key, mask, t, event, out)
            return
        queues = self.paqs[state]
        queue = queues.get(key)
        if queue is None:
            queue = queues[key] = ArrivalQueue()
        queue.push(t, event, mask, bound)

    def _generate(self, key, mask: int, t: int, event: Event, out: BlockResult) -> None:
        """Backward match generation from a new arrival at the last state (section 4.2)."""
        last = len(self.positives) - 1
        var = self.query.components[self.positives[last]].var
        emitted: dict = {}
        for plan in self.plans:
            if mask >> plan.bit & 1:
                walk = _Walk(plan, key, t, emitted)
                path, bindings, literals = {last: (t, event)}, {var: event.attrs}, list(plan.literals)
                if last == 0:
                    self._complete(walk, 1.0, path, bindings, (), literals, [], out)
                else:
                    self._extend(walk, last, t, 1.0, path, bindings, (), literals, [], out)

    def _extend(self, walk: _Walk, j: int, t_b: int, score: float, path: dict, bindings: dict,
                missed: tuple[str, ...], literals: list, negatives: list, out: BlockResult) -> None:
        """Extend a partial path that starts at V_j (arrival t_b, j > 0) to an arrival t_a
        in V_i, for every edge V_i -> V_j kept: t_last - W < t_a < t_b, score times u_a
        above the threshold, no negative in (t_a, t_b), predicates that became evaluable
        hold; a path reaching V_1 is completed."""
        horizon = walk.t_last - self.window
        threshold = self.threshold
        bit = walk.plan.bit
        pruned = 0
        for i in self.incoming[j]:
            queue = self.paqs[i].get(walk.key)
            if queue is None:
                continue
            table = self.score[i, j]
            var, skipped, run = self.edges[i, j]
            entries = queue.entries
            for n in queue.span(horizon, t_b):
                t_a, clauses, event, bound = entries[n]
                if not clauses >> bit & 1:
                    continue
                extended = score * table[t_b - t_a]
                if extended * bound < threshold:
                    pruned += 1
                    continue
                now_bindings = {**bindings, var: event.attrs}
                still = (literals, negatives)
                if literals or negatives or run:
                    still = self._apply(walk, now_bindings, now_bindings.keys(), literals,
                                        negatives + [(k, t_a, t_b, anchored) for k, anchored in run])
                    if still is None:
                        continue
                longer = {**path, i: (t_a, event)}
                if i == 0:
                    self._complete(walk, extended, longer, now_bindings, missed + skipped, *still, out)
                else:
                    self._extend(walk, i, t_a, extended, longer, now_bindings, missed + skipped, *still, out)
        self.totals["pruned_paths"] += pruned

    def _apply(self, walk: _Walk, bindings: dict, observed, literals: list, negatives: list):
        """Apply each predicate and negative search whose components are bound (section
        4.2, as early as possible). Returns the literals and negatives still waiting, or
        None when one fails. A literal on the hash attributes holds by construction when
        both its components are observed."""
        literal_wait, negative_wait = [], []
        for literal in literals:
            if not literal.needs <= bindings.keys():
                literal_wait.append(literal)
            elif not (literal.implied and literal.needs <= observed) \
                    and evaluate(literal.expr, bindings) is not True:
                return None
        for item in negatives:
            check = walk.plan.negatives[item[0]]
            if not check.needs <= bindings.keys():
                negative_wait.append(item)
            elif self._negative_present(walk, item, check, bindings, observed):
                self.totals["negated_paths"] += 1
                return None
        return literal_wait, negative_wait

    def _negative_present(self, walk: _Walk, item: tuple, check: _NegativeCheck, bindings: dict,
                          observed) -> bool:
        """Binary search of negative component k's NAQ for an event in (lo, hi) that
        satisfies the clause's predicates on k."""
        k, lo, hi, anchored = item
        queue = self.naqs[k].get(walk.key if check.hashed else _NO_KEY)
        if queue is None:
            return False
        entries = queue.entries
        start = bisect_right(entries, (lo, math.inf), queue.head)
        stop = bisect_left(entries, (hi,), start)
        literals = check.unimplied if check.needs <= observed else check.literals
        bit = walk.plan.bit
        for n in range(start, stop):
            t, clauses, event = entries[n]
            if clauses >> bit & 1 and (not literals or all(
                    evaluate(expr, {**bindings, check.var: event.attrs}) is True for expr in literals)):
                if anchored and check.var in self.learned:
                    self.gap_samples.append((check.var, t - lo))
                return True
        return False

    def _complete(self, walk: _Walk, score: float, path: dict, bindings: dict, missed: tuple[str, ...],
                  literals: list, negatives: list, out: BlockResult) -> None:
        """The path reached V_1: leading negatives (from V_0 at t_last - W), defaults of
        missed components, the checks that waited for them; then emit, or wait for the
        window of trailing negatives to pass."""
        t_first = path[0][0]
        opened = walk.t_last - self.window
        score *= self.leading[t_first - opened]
        if score < self.threshold:
            return
        # with several clauses the same path may come once per clause: report it once
        identity = tuple((s, entry[1].id) for s, entry in path.items()) if len(self.plans) > 1 else None
        if identity is not None and walk.emitted.get(identity) is True:
            return
        observed = bindings.keys()
        full = self._with_defaults(bindings, missed)
        checks = negatives + [(k, opened, t_first, True) for k in self.leading_negatives] \
            if self.leading_negatives else negatives
        if (literals or checks) and self._apply(walk, full, observed, literals, checks) is None:
            return
        if not self.trailing_negatives:
            if identity is not None:
                walk.emitted[identity] = True
            self._emit(path, score, out)
        elif identity in walk.emitted:
            walk.emitted[identity].append((walk.plan.bit, full, frozenset(observed)))
        else:
            # the trailing negatives are searched once the window has passed, under
            # every clause that accepted the path
            clauses = [(walk.plan.bit, full, frozenset(observed))]
            if identity is not None:
                walk.emitted[identity] = clauses
            self.sequence += 1
            heapq.heappush(self.pending, (t_first + self.window, self.sequence, walk.key, walk.t_last,
                                          score, path, clauses))

    def _with_defaults(self, bindings: dict, missed: tuple[str, ...]) -> dict:
        """Bindings with each missed component's DEFAULT values (defaults may name other
        missed components, hence one pass per missed component)."""
        if not missed:
            return bindings
        values: dict[str, dict[str, Any]] = {var: {} for var in missed}
        full = {**bindings, **values}
        for _ in missed:
            for var in missed:
                for name, expr in self.query.defaults.get(var, {}).items():
                    values[var][name] = evaluate(expr, full)
        return full

    def _release(self, until: float, out: BlockResult) -> None:
        """Emit the waiting matches whose window ended by ``until``: no trailing negative
        in (t_last, t_first + W) under one of the clauses that accepted the path, scored
        by the trailing run."""
        while self.pending and self.pending[0][0] <= until:
            deadline, _, key, t_last, score, path, clauses = heapq.heappop(self.pending)
            score *= self.trailing[deadline - t_last]
            if score < self.threshold:
                continue
            searches = [(k, t_last, deadline, True) for k in self.trailing_negatives]
            if any(self._apply(_Walk(self.plans[bit], key, t_last, {}), full, observed, [], searches) is not None
                   for bit, full, observed in clauses):
                self._emit(path, score, out)

    def _emit(self, path: dict, score: float, out: BlockResult) -> None:
        components = self.query.components
        events = {components[self.positives[s]].var: path[s][1].id for s in reversed(path)}
        out.matches.append(Match(events, score))
        self.totals["matches"] += 1
        for s in range(1, len(self.positives)):
            var = components[self.positives[s]].var
            if s in path and s - 1 in path and var in self.learned:
                self.gap_samples.append((var, path[s][0] - path[s - 1][0]))
