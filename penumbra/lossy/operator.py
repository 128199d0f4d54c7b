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
(section 4.2): partial paths, a block of them at a time, are extended from V_l back to V_1 through the
PAQs, keeping a path only while its score times the bound u of its next arrival reaches
the threshold, searching each negative component's NAQ in its interval as soon as the
predicates on it can be evaluated, and applying each non-trivial predicate as soon as
its components are bound. Predicates on a missed component use its DEFAULT values.

The first and last positive components must be observed (the case section 4.2 treats);
any run of components between observed positives may be missed. Negatives before the
first positive must be absent from (t_last - W, t_first) (the NFA enters V_0 at
t_last - W, footnote 2), negatives after the last from (t_last, t_first + W): such a
match waits until the stream passes t_first + W (or the end of input).

Queues are hashed on the query's equality attributes (section 5.2, e.g. the RFID tag):
when one attribute of every positive component is tied by ``=`` in every clause, the
entries of each state are segmented by key value, and so are those of every negative
tied to that key (see :mod:`.queues`).

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
from bisect import bisect_right
from operator import attrgetter
from dataclasses import dataclass, replace
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
from .queues import Queue

__all__ = ["LEARN_CHECK_EVERY", "LEARN_EVERY", "LossyOperator"]

_STREAM, _TS, _LO, _HI = attrgetter("stream"), attrgetter("ts"), attrgetter("lo"), attrgetter("hi")

#: Key code of unhashed queues (hashed keys get codes from 1).
_NO_KEY = 0

#: Gap samples gathered before the densities and scoring tables are updated: at least
#: this many, and at least W / 4 so the O(W) update costs amortised O(1) per sample.
LEARN_EVERY = 1024

#: Events processed between two points where the tables may move. Counted in event
#: order, so every event meets the same tables however the input is cut into blocks.
LEARN_CHECK_EVERY = 8192

#: Attributes that make up an operator's state (the rest derives from its configuration).
_STATE = ("threshold", "learned", "gap_samples", "sample_count", "paqs", "naqs", "pending", "held_times",
          "held_events", "held_streams", "anchors", "clock", "seen", "processed", "sequence", "totals", "key_codes",
          "next_code", "live_codes", "key_group")


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
class _Paths:
    """A block of partial paths of one clause that observed the same states: from V_l
    back to V_j, j = ``states[-1]``. Per path: the last arrival's time and hash key, the
    score so far, and the time and event at each observed state; shared: the clause's
    predicates not yet applied and the negative searches waiting for their predicates'
    components (each with its interval per path)."""

    states: tuple[int, ...]
    t_last: np.ndarray
    key: np.ndarray
    score: np.ndarray
    times: dict[int, np.ndarray]
    events: dict[int, np.ndarray]
    literals: tuple[_Literal, ...]
    negatives: tuple[tuple[int, np.ndarray, np.ndarray], ...] = ()

    def __len__(self) -> int:
        return len(self.t_last)

    def take(self, rows: np.ndarray) -> _Paths:
        return replace(self, t_last=self.t_last[rows], key=self.key[rows], score=self.score[rows],
                       times={s: t[rows] for s, t in self.times.items()},
                       events={s: e[rows] for s, e in self.events.items()},
                       negatives=tuple((k, lo[rows], hi[rows]) for k, lo, hi in self.negatives))


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

    def __init__(self, query: SequenceQuery, streams: Streams | Mapping, gaps: Mapping[str, np.ndarray] | None = None,
                 *, learn: bool = True):
        if not isinstance(streams, Streams):
            streams = Streams(streams.values())
        params = [streams.get_or_default(c.stream) for c in query.components]
        fixed = {}
        for component, p in zip(query.components, params):
            if p.gap is not None:
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
        self.key_attr = _key_attributes(query, {components[k].var for k in self.positives
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
        self._check_defaults()
        self.plans = [self._plan(bit, clause) for bit, clause in enumerate(query.clauses)]
        self.run_negatives = {(i, j): self._run_negatives(i, j)
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
        self.next_code = _NO_KEY + 1
        self.live_codes = 0                 # codes kept by the last clean-up of key_codes
        self.pending: list = []
        self.held_times: list[int] = []     # the reorder buffer: held events in time order
        self.held_events: list[Event] = []
        self.held_streams: list[int] = []
        self.clock = -math.inf              # time of the last event processed
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

    def _run_negatives(self, i: int, j: int) -> tuple[int, ...]:
        """The negative components between the positives of V_i and V_j."""
        components = self.query.components
        return tuple(k for k in range(self.positives[i] + 1, self.positives[j]) if components[k].negated)

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
        self.incoming = [[i for i in range(j) if self.reach[i, j][self.window] >= self.threshold]
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
                "pending": len(self.pending), "held": len(self.held_times)}

    def feed(self, events: Sequence[Event]) -> BlockResult:
        out = BlockResult()
        self._admit(events, out)
        self._process(bisect_right(self.held_times, self.seen - self.max_delay), out)
        self._finish_block(out)
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

    def clock_of(self, events: Sequence[Event]) -> dict[str, float]:
        """The largest precise time on the grid among the events of the query's streams
        (late ones lie behind the time already processed, so the figure needs no state)."""
        times = [e.ts.lo for e in events if type(e.ts) is Interval and e.ts.lo == e.ts.hi and e.ts.lo % 1 == 0
                 and self._stream(e.stream) >= 0]
        return {"seen": float(max(times))} if times else {}

    def advance(self, clock: dict[str, float]) -> BlockResult:
        """Take the time other key groups have seen: release the held events it makes
        safe, and the waiting matches whose window it closes. Times before the
        released frontier are processed from here on, as after an event at the frontier."""
        out = BlockResult()
        if clock.get("seen", -math.inf) > self.seen:
            self.seen = int(clock["seen"])
        if self.seen == -math.inf:
            return out
        frontier = self.seen - self.max_delay
        self._process(bisect_right(self.held_times, frontier), out)
        if math.floor(frontier) > self.clock:
            self.clock = math.floor(frontier)
            self._release(self.clock, out)
            self._compact()
        self._finish_block(out)
        return out

    def wake(self) -> dict[str, float]:
        """The time seen at which a held event is released, or a waiting match's window closes."""
        due = min(self.held_times[:1] + [item[0] for item in self.pending[:1]], default=math.inf)
        return {"seen": due + self.max_delay - 0.5} if due < math.inf else {}

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

    def queue_count(self) -> int:
        """Hashed queues holding entries, over every state and negative component."""
        return sum(len(queue.keys()) for queue in self._queues())

    def _queues(self) -> list[Queue]:
        return [*self.paqs, *(queue for queues in self.naqs.values() for queue in queues), *self.anchors.values()]

    # --- input ------------------------------------------------------------------------------

    def _stream(self, name: str) -> int:
        index = self.stream_of.get(name)
        if index is None:
            index = self.stream_of[name] = self.stream_index.get(name.casefold(), -1)
        return index

    def _admit(self, events: Sequence[Event], out: BlockResult) -> None:
        """Hold, in time order, the events of the query's streams that have a precise
        timestamp on the grid not older than the last one processed (the external
        buffer of section 2.1, released after the streams' max delay D)."""
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
        bad = ~(times % 1 == 0) | (times < self.clock)
        if bad.any():
            for n in np.flatnonzero(bad).tolist():
                self._late(events[n], self._why_late(times[n]), out)
            keep = (~bad).tolist()
            events = list(itertools.compress(events, keep))
            streams = list(itertools.compress(streams, keep))
            times = times[~bad]
        if not events:
            return
        times = times.astype(np.int64)
        self.seen = max(self.seen, int(times.max()))
        if len(times) > 1 and not (np.diff(times) >= 0).all() or (self.held_times and self.held_times[-1] > times[0]):
            times = np.concatenate((np.asarray(self.held_times, dtype=np.int64), times))
            order = np.argsort(times, kind="stable").tolist()
            events, streams = self.held_events + list(events), self.held_streams + streams
            self.held_events = [events[n] for n in order]
            self.held_streams = [streams[n] for n in order]
            self.held_times = times[order].tolist()
        else:
            self.held_times += times.tolist()
            self.held_events += events
            self.held_streams += streams

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
        """Observations for the dashboard: the totals and the size of the state (queued
        entries, waiting matches, held events)."""
        out.observations.update(self.totals, queue_entries=sum(len(queue) for queue in self._queues()),
                                pending=len(self.pending),
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
        del self.held_times[:count], self.held_events[:count], self.held_streams[:count]
        start = 0
        while start < count:
            stop = min(count, start + LEARN_CHECK_EVERY - self.processed % LEARN_CHECK_EVERY) \
                if self.learned else count
            self._chunk(times[start:stop], events[start:stop], streams[start:stop], out)
            self.processed += stop - start
            if self.learned and self.processed % LEARN_CHECK_EVERY == 0 \
                    and self.sample_count >= max(LEARN_EVERY, self.window // 4):
                self._learn()
            start = stop

    def _chunk(self, times: np.ndarray, events: np.ndarray, streams: np.ndarray, out: BlockResult) -> None:
        """One chunk through the NFA: NAQ pushes, then each state's arrivals in order
        (bounds, threshold pruning, PAQ pushes; match generation at the last state);
        then the waiting matches whose window closed, and queue compaction."""
        codes: dict[str, np.ndarray] = {}
        selected = []
        for k, component in enumerate(self.query.components):
            rows = np.flatnonzero(streams == self.component_stream[k])
            name = self.key_of[k]
            if name is None:
                key = np.full(len(rows), _NO_KEY, np.int64)
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
                self.anchors[state].push(t, key, events[rows])
            bound = self._bounds(state, t, key)
            keep = bound >= self.threshold
            self.totals["arrivals"] += len(rows)
            self.totals["pruned_arrivals"] += len(rows) - int(np.count_nonzero(keep))
            if state < last:
                self.paqs[state].push(t[keep], key[keep], events[rows[keep]], mask[keep], bound[keep])
            else:
                self._generate(t[keep], key[keep], mask[keep], events[rows[keep]], out)
        for k, state in self.anchor_of.items():
            rows, key, _ = selected[k]
            if not len(rows):
                continue
            anchors = self.anchors[state] if state in self.anchors else self.paqs[0]
            t = times[rows]
            start, stop = anchors.find(key, t - self.window, t)
            found = start < stop
            self._sample(self.query.components[k].var, t[found] - anchors.t[anchors.order[stop[found] - 1]])
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
        codes = np.fromiter(map(self.key_codes.setdefault, values, range(first, self.next_code)),
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

    # --- match generation (section 4.2) ------------------------------------------------------

    def _generate(self, t: np.ndarray, key: np.ndarray, mask: np.ndarray, events: np.ndarray,
                  out: BlockResult) -> None:
        """Backward match generation from a block of arrivals at the last state, per clause."""
        last = len(self.positives) - 1
        emitted: dict = {}       # path identity -> True once emitted, or the clauses of its waiting match
        for plan in self.plans:
            rows = np.flatnonzero(mask >> plan.bit & 1)
            if len(rows):
                paths = _Paths((last,), t[rows], key[rows], np.ones(len(rows)), {last: t[rows]},
                               {last: events[rows]}, plan.literals)
                self._walk(plan, paths, emitted, out)

    def _walk(self, plan: _ClausePlan, paths: _Paths, emitted: dict, out: BlockResult) -> None:
        """Extend the paths from V_j back along every edge kept; complete them at V_1."""
        j = paths.states[-1]
        if j == 0:
            self._complete(plan, paths, emitted, out)
            return
        for i in self.incoming[j]:
            longer = self._extend(plan, paths, i)
            if len(longer):
                self._walk(plan, longer, emitted, out)

    def _extend(self, plan: _ClausePlan, paths: _Paths, i: int) -> _Paths:
        """Extend each path, which starts at V_j (arrival t_b), to every arrival t_a in
        V_i's queue with t_last - W < t_a < t_b, the same key and the clause's trivial
        predicates, whose score times u_a reaches the threshold; then apply the
        predicates and negative searches that became possible (no negative of the run
        in (t_a, t_b))."""
        j = paths.states[-1]
        queue = self.paqs[i]
        t_b = paths.times[j]
        start, stop = queue.find(paths.key, paths.t_last - self.window, t_b)
        rows, entries = queue.entries(start, stop)
        satisfied = (queue.mask[entries] >> plan.bit & 1).astype(bool)
        rows, entries = rows[satisfied], entries[satisfied]
        t_a = queue.t[entries]
        score = paths.score[rows] * self.score[i, j][t_b[rows] - t_a]
        keep = score * queue.bound[entries] >= self.threshold
        self.totals["pruned_paths"] += len(keep) - int(np.count_nonzero(keep))
        rows, entries, t_a = rows[keep], entries[keep], t_a[keep]
        longer = paths.take(rows)
        longer = replace(longer, states=paths.states + (i,), score=score[keep],
                         times={**longer.times, i: t_a}, events={**longer.events, i: queue.event[entries]},
                         negatives=longer.negatives + tuple((k, t_a, longer.times[j])
                                                            for k in self.run_negatives[i, j]))
        return self._check(plan, longer, complete=False)[0]

    def _check(self, plan: _ClausePlan, paths: _Paths, complete: bool) -> tuple[_Paths, np.ndarray]:
        """Apply each waiting predicate and negative search whose components are bound
        (section 4.2: as early as possible); ``complete`` paths also bind their missed
        components to their DEFAULT values. A literal on the hash attributes holds by
        construction when both its components are observed. Returns the paths kept and
        which they were."""
        observed = {self.state_vars[s] for s in paths.states}
        bound = set(self.query.variables) if complete else observed
        literals = [literal for literal in paths.literals if literal.needs <= bound]
        negatives = [item for item in paths.negatives if plan.negatives[item[0]].needs <= bound]
        keep = np.ones(len(paths), bool)
        if not literals and not negatives:
            return paths, keep
        bindings = None
        for literal in literals:
            if literal.implied and literal.needs <= observed:
                continue
            bindings = bindings or self._bindings(paths, complete)
            rows = np.flatnonzero(keep)
            keep[rows] = [evaluate(literal.expr, bindings[n]) is True for n in rows.tolist()]
        for k, lo, hi in negatives:
            check = plan.negatives[k]
            if check.unimplied if check.needs <= observed else check.literals:
                bindings = bindings or self._bindings(paths, complete)
            rows = np.flatnonzero(keep)
            present = self._present(plan, check, k, paths.key[rows], lo[rows], hi[rows],
                                    bindings and [bindings[n] for n in rows.tolist()], observed)
            keep[rows[present]] = False
        waiting = tuple(item for item in paths.negatives if not plan.negatives[item[0]].needs <= bound)
        paths = replace(paths, literals=tuple(lit for lit in paths.literals if lit not in literals),
                        negatives=waiting)
        return paths.take(keep), keep

    def _bindings(self, paths: _Paths, complete: bool) -> list[dict]:
        """Each path's bindings, variable -> attributes; with ``complete``, the missed
        components' DEFAULT values too (a default may name another missed component,
        hence one pass per missed component)."""
        columns = [(self.state_vars[s], paths.events[s]) for s in paths.states]
        bindings = [{var: column[n].attrs for var, column in columns} for n in range(len(paths))]
        missed = [var for s, var in enumerate(self.state_vars) if s not in paths.states] if complete else []
        defaults = self.query.defaults
        for binding in bindings if missed else ():
            values: dict[str, dict[str, Any]] = {var: {} for var in missed}
            binding.update(values)
            for _ in missed:
                for var in missed:
                    for name, expr in defaults.get(var, {}).items():
                        values[var][name] = evaluate(expr, binding)
        return bindings

    def _present(self, plan: _ClausePlan, check: _NegativeCheck, k: int, key: np.ndarray, lo: np.ndarray,
                 hi: np.ndarray, bindings: list[dict] | None, observed) -> np.ndarray:
        """Whether negative component k has an event in (lo, hi) satisfying the clause's
        predicates on it, per path: a count by binary search in its NAQ, or, when
        predicates read other components, a scan of the events found."""
        queue = self.naqs[k][plan.bit]
        start, stop = queue.find(key if check.hashed else np.full(len(key), _NO_KEY, np.int64), lo, hi)
        present = start < stop
        literals = check.unimplied if check.needs <= observed else check.literals
        if literals:
            for n in np.flatnonzero(present).tolist():
                for entry in queue.order[start[n]:stop[n]].tolist():
                    scope = {**bindings[n], check.var: queue.event[entry].attrs}
                    if all(evaluate(expr, scope) is True for expr in literals):
                        break
                else:
                    present[n] = False
        self.totals["negated_paths"] += int(np.count_nonzero(present))
        return present

    def _complete(self, plan: _ClausePlan, paths: _Paths, emitted: dict, out: BlockResult) -> None:
        """The paths reached V_1: leading run score (from V_0 at t_last - W), the checks
        that waited for missed components' defaults, leading negatives; then emit, or
        wait for the window of trailing negatives to pass. A path satisfying several
        clauses is reported once."""
        score = paths.score * self.leading[paths.times[0] - (paths.t_last - self.window)]
        paths = replace(paths, score=score).take(score >= self.threshold)
        identities = None
        if len(self.plans) > 1:
            identities = [tuple((s, paths.events[s][n].id) for s in paths.states) for n in range(len(paths))]
            fresh = [emitted.get(identity) is not True for identity in identities]
            paths, identities = paths.take(np.array(fresh, bool)), list(itertools.compress(identities, fresh))
        leading = tuple((k, paths.t_last - self.window, paths.times[0]) for k in self.leading_negatives)
        paths, keep = self._check(plan, replace(paths, negatives=paths.negatives + leading), complete=True)
        if identities is not None:
            identities = list(itertools.compress(identities, keep.tolist()))
        if not self.trailing_negatives:
            for n in range(len(paths)):
                if identities is not None:
                    emitted[identities[n]] = True
                self._emit(paths, n, out)
            return
        # the trailing negatives are searched once the window has passed, under every
        # clause that accepted the path
        observed = frozenset(self.state_vars[s] for s in paths.states)
        bindings = self._bindings(paths, complete=True)
        for n in range(len(paths)):
            accepted = (plan.bit, bindings[n], observed)
            if identities is not None and identities[n] in emitted:
                emitted[identities[n]].append(accepted)
                continue
            clauses = [accepted]
            if identities is not None:
                emitted[identities[n]] = clauses
            self.sequence += 1
            t_first, t_last = int(paths.times[0][n]), int(paths.t_last[n])
            path = {s: (int(paths.times[s][n]), paths.events[s][n]) for s in paths.states}
            heapq.heappush(self.pending, (t_first + self.window, self.sequence, int(paths.key[n]), t_last,
                                          float(paths.score[n]), path, clauses))

    def _release(self, until: float, out: BlockResult) -> None:
        """Emit the waiting matches whose window ended by ``until``: no trailing negative
        in (t_last, t_first + W) under one of the clauses that accepted the path, scored
        by the trailing run."""
        while self.pending and self.pending[0][0] <= until:
            deadline, _, key, t_last, score, path, clauses = heapq.heappop(self.pending)
            score *= self.trailing[deadline - t_last]
            if score < self.threshold:
                continue
            one = np.array([key], np.int64)
            lo, hi = np.array([t_last], np.int64), np.array([deadline], np.int64)
            for bit, bindings, observed in clauses:
                plan = self.plans[bit]
                if not any(self._present(plan, plan.negatives[k], k, one, lo, hi, [bindings], observed)[0]
                           for k in self.trailing_negatives):
                    self._emit_path(path, score, out)
                    break

    def _emit(self, paths: _Paths, n: int, out: BlockResult) -> None:
        self._emit_path({s: (int(paths.times[s][n]), paths.events[s][n]) for s in paths.states},
                        float(paths.score[n]), out)

    def _emit_path(self, path: dict[int, tuple[int, Event]], score: float, out: BlockResult) -> None:
        """Report a match (its observed events, in the query's order) and learn its gaps."""
        out.matches.append(Match({self.state_vars[s]: path[s][1].id for s in sorted(path)}, score))
        self.totals["matches"] += 1
        for s in range(1, len(self.positives)):
            var = self.state_vars[s]
            if s in path and s - 1 in path and var in self.learned:
                self.gap_samples[var].append(path[s][0] - path[s - 1][0])
                self.sample_count += 1

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
        live = {item[2] for item in self.pending}
        for queue in self._queues():
            live.update(queue.keys().tolist())
        self.key_codes = {value: code for value, code in self.key_codes.items() if code in live}
        self.live_codes = len(self.key_codes)
