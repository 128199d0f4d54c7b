"""Backward match generation of the AYAC operator (section 4.2).

Arrivals at the last state start it: partial paths, a block of them at a time, are
extended from V_l back to V_1 through the PAQs, keeping a path only while its score
times the bound u of its next arrival reaches the threshold, searching each negative
component's NAQ in its interval as soon as the predicates on it can be evaluated, and
applying each non-trivial predicate as soon as its components are bound. Predicates on
a missed component use its DEFAULT values.

An imprecise event comes to a state once per instant of its support, but a path takes
it once: a path holding one (*vague*) stands for every path of its events' instants, so
their number does not multiply with the events' widths. Its time at each state is the
latest instant found there (the bound for the state before it), its ``t_last`` the
earliest instant of its last event (the window's bound), its score an upper bound over
its instants, and no negative breaks it while it is built: at V_1 it is decided over its
possible worlds (:mod:`.worlds`), exactly, like every path an imprecise event touches.

:class:`BackwardGeneration` is given what it reads: the NFA and its clause plans
(:mod:`.plan`), the scoring tables in force (:mod:`.tables`), the threshold, the PAQs
and NAQs (:mod:`.queues`) and the totals it counts in. It yields what it finds, in
order: the matches that passed, to report at once (:class:`Completed`) or once the
window of their trailing negatives has passed (:class:`Pending`), and those imprecise
timestamps touch (:class:`Imprecise`), for their evaluation over worlds; reporting them
is the operator's.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Iterator, NamedTuple, Union

import numpy as np

from ..events import Event
from ..probability import meets
from ..query.ast import evaluate
from .matches import NFAPath
from .plan import NFA, ClausePlan, Literal, NegativeCheck
from .queues import NO_KEY, Queue
from .tables import ScoringTables
from .worlds import PossibleWorlds, same_events

__all__ = ["BackwardGeneration", "Completed", "Found", "Imprecise", "Pending"]

#: Most (path, queue entry) pairs one extension lays out at once; more go in slices of paths.
EXPAND_LIMIT = 1 << 20


class Completed(NamedTuple):
    """A path that reached V_1 and passed every check: a match of probability ``score``,
    to report now (the query has no trailing negatives)."""

    path: NFAPath
    score: float


class Pending(NamedTuple):
    """A path that reached V_1 and passed every check but the trailing negatives': a
    match of probability ``score`` but for the trailing run's, with the hash-key code
    ``key`` and the time ``t_last`` of its last event, that waits for their window.
    ``clauses`` holds (clause bit, bindings, observed variables) of every clause that
    accepted it."""

    path: NFAPath
    score: float
    key: int
    t_last: int
    clauses: list[tuple[int, dict, frozenset]]


class Imprecise(NamedTuple):
    """A match imprecise timestamps touch, to be evaluated over its possible worlds:
    its events by state and its hash-key code."""

    events: dict[int, Event]
    key: int


#: What match generation finds.
Found = Union[Completed, Pending, Imprecise]


@dataclass
class _Paths:
    """A block of partial paths of one clause that observed the same states: from V_l
    back to V_j, j = ``states[-1]``. Per path: the last arrival's time and hash key, the
    score so far, and the time and event at each observed state; shared: the clause's
    predicates not yet applied and the negative searches waiting for their predicates'
    components (each with its interval per path), and whether each path is vague (holds
    an imprecise event and stands for its instants)."""

    states: tuple[int, ...]
    t_last: np.ndarray
    key: np.ndarray
    score: np.ndarray
    times: dict[int, np.ndarray]
    events: dict[int, np.ndarray]
    literals: tuple[Literal, ...]
    vague: np.ndarray
    negatives: tuple[tuple[int, np.ndarray, np.ndarray], ...] = ()

    def __len__(self) -> int:
        return len(self.t_last)

    def take(self, rows: np.ndarray) -> _Paths:
        return replace(self, t_last=self.t_last[rows], key=self.key[rows], score=self.score[rows],
                       times={s: t[rows] for s, t in self.times.items()},
                       events={s: e[rows] for s, e in self.events.items()}, vague=self.vague[rows],
                       negatives=tuple((k, lo[rows], hi[rows]) for k, lo, hi in self.negatives))


@dataclass
class BackwardGeneration:
    """Backward match generation over an operator's queues as they stand, with the
    scoring tables and threshold in force. ``worlds`` is given once an imprecise event
    has been processed: the paths it touches go to it rather than being checked here.
    Counts the paths pruned by the threshold and by negatives in ``totals``."""

    nfa: NFA
    tables: ScoringTables
    threshold: float
    paqs: list[Queue]
    naqs: dict[int, list[Queue]]
    totals: dict[str, int]
    worlds: PossibleWorlds | None = None

    def __post_init__(self) -> None:
        self.incoming = self.tables.incoming(self.threshold)

    def generate(self, t: np.ndarray, key: np.ndarray, mask: np.ndarray, events: np.ndarray,
                 wide: np.ndarray) -> Iterator[Found]:
        """Backward match generation from a block of arrivals at the last state (``wide``:
        the arrival is an instant of an imprecise event), per clause; what it finds is
        given as it is found."""
        last = len(self.nfa.positives) - 1
        # path identity -> True once reported, or the clauses of its waiting match
        reported: dict = {}
        for plan in self.nfa.plans:
            rows = np.flatnonzero(mask >> plan.bit & 1)
            if len(rows):
                yield from self._walk(plan, _arrivals(last, t[rows], key[rows], events[rows], wide[rows],
                                                      plan.literals), reported)

    def trailing_clear(self, key: int, t_last: int, deadline: int, clauses: list) -> bool:
        """Whether one of the clauses that accepted a waiting match finds no event of a
        trailing negative in (t_last, deadline), the window that has now passed."""
        one = np.array([key], np.int64)
        lo, hi = np.array([t_last], np.int64), np.array([deadline], np.int64)
        plans = self.nfa.plans
        return any(not any(self._present(plans[bit], plans[bit].negatives[k], k, one, lo, hi, [bindings],
                                         observed)[0] for k in self.nfa.trailing_negatives)
                   for bit, bindings, observed in clauses)

    def _walk(self, plan: ClausePlan, paths: _Paths, reported: dict) -> Iterator[Found]:
        """Extend the paths from V_j back along every edge kept; complete them at V_1."""
        j = paths.states[-1]
        if j == 0:
            yield from self._complete(plan, paths, reported)
            return
        for i in self.incoming[j]:
            for longer in self._extend(plan, paths, i):
                if len(longer):
                    yield from self._walk(plan, longer, reported)

    def _extend(self, plan: ClausePlan, paths: _Paths, i: int):
        """Extend each path, which starts at V_j (arrival t_b), to every arrival t_a in
        V_i's queue with t_last - W < t_a < t_b, the same key and the clause's trivial
        predicates, whose score times u_a reaches the threshold; then apply the
        predicates and negative searches that became possible (no negative of the run
        in (t_a, t_b)). Yields the longer paths, in slices when they are many."""
        j = paths.states[-1]
        queue = self.paqs[i]
        start, stop = queue.find(paths.key, paths.t_last - self.nfa.window, paths.times[j])
        counted = np.cumsum(stop - start)
        total = int(counted[-1]) if len(counted) else 0
        cuts = np.unique(np.searchsorted(counted, np.arange(EXPAND_LIMIT, total, EXPAND_LIMIT), side="right"))
        bounds = [0, *cuts[(cuts > 0) & (cuts < len(paths))].tolist(), len(paths)]
        for a, b in zip(bounds, bounds[1:]):
            part = paths if (a, b) == (0, len(paths)) else paths.take(np.arange(a, b))
            yield self._extended(plan, part, i, start[a:b], stop[a:b])

    def _extended(self, plan: ClausePlan, paths: _Paths, i: int, start: np.ndarray, stop: np.ndarray) -> _Paths:
        """:meth:`_extend` for the queue entries of ranks [start, stop) of each path."""
        j = paths.states[-1]
        queue = self.paqs[i]
        t_b = paths.times[j]
        rows, entries = queue.entries(start, stop)
        satisfied = (queue.mask[entries] >> plan.bit & 1).astype(bool)
        rows, entries = rows[satisfied], entries[satisfied]
        t_a = queue.t[entries]
        gap = t_b[rows] - t_a
        vague = paths.vague[rows]
        if vague.any():     # a vague path: the best the edge scores at a gap up to the latest instant's
            factor = np.where(vague, self.tables.best[i, j][np.minimum(gap, self.nfa.window)],
                              self.tables.score[i, j][np.where(vague, 0, gap)])
        else:
            factor = self.tables.score[i, j][gap]
        score = paths.score[rows] * factor
        keep = meets(score * queue.bound[entries], self.threshold)
        self.totals["pruned_paths"] += len(keep) - int(np.count_nonzero(keep))
        rows, entries, t_a, score, vague = rows[keep], entries[keep], t_a[keep], score[keep], vague[keep]
        vague |= queue.wide[entries]
        if vague.any():
            rows, entries, t_a, score, vague = _collapse(rows, entries, t_a, score, vague, queue.event)
        longer = paths.take(rows)
        longer = replace(longer, states=paths.states + (i,), score=score, vague=vague,
                         times={**longer.times, i: t_a}, events={**longer.events, i: queue.event[entries]},
                         negatives=longer.negatives + tuple((k, t_a, longer.times[j])
                                                            for k in self.nfa.run_negatives[i, j]))
        return self._check(plan, longer, complete=False)[0]

    def _check(self, plan: ClausePlan, paths: _Paths, complete: bool) -> tuple[_Paths, np.ndarray]:
        """Apply each waiting predicate and negative search whose components are bound
        (section 4.2: as early as possible); ``complete`` paths also bind their missed
        components to their DEFAULT values. A literal on the hash attributes holds by
        construction when both its components are observed. Returns the paths kept and
        which they were."""
        observed = {self.nfa.state_vars[s] for s in paths.states}
        bound = set(self.nfa.query.variables) if complete else observed
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
            rows = np.flatnonzero(keep & ~paths.vague)     # a vague path is decided over its worlds
            present = self._present(plan, check, k, paths.key[rows], lo[rows], hi[rows],
                                    bindings and [bindings[n] for n in rows.tolist()], observed)
            keep[rows[present]] = False
        waiting = tuple(item for item in paths.negatives if not plan.negatives[item[0]].needs <= bound)
        paths = replace(paths, literals=tuple(lit for lit in paths.literals if lit not in literals),
                        negatives=waiting)
        return paths.take(keep), keep

    def _bindings(self, paths: _Paths, complete: bool) -> list[dict]:
        """Each path's bindings, variable -> attributes; with ``complete``, the missed
        components' DEFAULT values too."""
        state_vars = self.nfa.state_vars
        columns = [(state_vars[s], paths.events[s]) for s in paths.states]
        bindings = [{var: column[n].attrs for var, column in columns} for n in range(len(paths))]
        missed = [var for s, var in enumerate(state_vars) if s not in paths.states] if complete else []
        for binding in bindings if missed else ():
            self.nfa.bind_defaults(binding, missed)
        return bindings

    def _present(self, plan: ClausePlan, check: NegativeCheck, k: int, key: np.ndarray, lo: np.ndarray,
                 hi: np.ndarray, bindings: list[dict] | None, observed) -> np.ndarray:
        """Whether negative component k has an event in (lo, hi) satisfying the clause's
        predicates on it, per path: a count by binary search in its NAQ, or, when
        predicates read other components, a scan of the events found."""
        queue = self.naqs[k][plan.bit]
        start, stop = queue.find(key if check.hashed else np.full(len(key), NO_KEY, np.int64), lo, hi)
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

    def _complete(self, plan: ClausePlan, paths: _Paths, reported: dict) -> Iterator[Found]:
        """The paths reached V_1: leading run score (from V_0 at t_last - W), the checks
        that waited for missed components' defaults, leading negatives; then a match to
        report, or to wait for the window of trailing negatives to pass. A path
        satisfying several clauses is found once."""
        window = self.nfa.window
        lead = paths.times[0] - (paths.t_last - window)
        score = paths.score * np.where(paths.vague, self.tables.initial_bound,
                                       self.tables.leading[np.where(paths.vague, 0, lead)])
        paths = replace(paths, score=score).take(meets(score, self.threshold))
        if self.worlds is not None:
            paths, imprecise = self._set_aside_imprecise(paths)
            yield from imprecise
        identities = None
        if len(self.nfa.plans) > 1:
            identities = [tuple((s, paths.events[s][n].id) for s in paths.states) for n in range(len(paths))]
            fresh = [reported.get(identity) is not True for identity in identities]
            paths, identities = paths.take(np.array(fresh, bool)), list(itertools.compress(identities, fresh))
        leading = tuple((k, paths.t_last - window, paths.times[0]) for k in self.nfa.leading_negatives)
        paths, keep = self._check(plan, replace(paths, negatives=paths.negatives + leading), complete=True)
        if identities is not None:
            identities = list(itertools.compress(identities, keep.tolist()))
        if not self.nfa.trailing_negatives:
            for n in range(len(paths)):
                if identities is not None:
                    reported[identities[n]] = True
                yield Completed(_path(paths, n), float(paths.score[n]))
            return
        # the trailing negatives are searched once the window has passed, under every
        # clause that accepted the path
        observed = frozenset(self.nfa.state_vars[s] for s in paths.states)
        bindings = self._bindings(paths, complete=True)
        for n in range(len(paths)):
            accepted = (plan.bit, bindings[n], observed)
            if identities is not None and identities[n] in reported:
                reported[identities[n]].append(accepted)
                continue
            clauses = [accepted]
            if identities is not None:
                reported[identities[n]] = clauses
            yield Pending(_path(paths, n), float(paths.score[n]), int(paths.key[n]), int(paths.t_last[n]), clauses)

    def _set_aside_imprecise(self, paths: _Paths) -> tuple[_Paths, list[Imprecise]]:
        """The paths reaching V_1 that imprecise timestamps touch go to the evaluation over
        worlds (once per match, whatever clause found it); returns the others, and those
        matches. The trailing negatives are looked at when the window has passed."""
        if not len(paths):
            return paths, []
        states = paths.states
        # the paths of one match (every combination of its instants) decided once: rows of
        # the same events, found by the events' identities
        first, which = same_events(*(paths.events[s] for s in states))
        keep = np.ones(len(first), bool)
        imprecise = []
        for group, n in enumerate(first.tolist()):
            events = {s: paths.events[s][n] for s in states}
            key = int(paths.key[n])
            if self.worlds.touches(key, events, {s: int(paths.times[s][n]) for s in states}):
                keep[group] = False
                imprecise.append(Imprecise(events, key))
        return paths.take(keep[which]), imprecise


def _path(paths: _Paths, n: int) -> NFAPath:
    return {s: (int(paths.times[s][n]), paths.events[s][n]) for s in paths.states}


def _arrivals(last: int, t: np.ndarray, key: np.ndarray, events: np.ndarray, wide: np.ndarray,
              literals: tuple[Literal, ...]) -> _Paths:
    """The paths starting at V_l: one per precise arrival, and one per imprecise event for
    all its instants arriving (its latest as its time, its earliest as t_last)."""
    if not wide.any():
        return _Paths((last,), t, key, np.ones(len(t)), {last: t}, {last: events}, literals, np.zeros(len(t), bool))
    spread = np.flatnonzero(wide)
    first, which = same_events(events[spread])
    earliest = np.full(len(first), np.iinfo(np.int64).max)
    latest = np.full(len(first), np.iinfo(np.int64).min)
    np.minimum.at(earliest, which, t[spread])
    np.maximum.at(latest, which, t[spread])
    rows = np.concatenate([np.flatnonzero(~wide), spread[first]])
    precise = t[~wide]
    times = np.concatenate([precise, latest])
    vague = np.arange(len(rows)) >= len(precise)
    return _Paths((last,), np.concatenate([precise, earliest]), key[rows], np.ones(len(rows)), {last: times},
                  {last: events[rows]}, literals, vague)


def _collapse(rows: np.ndarray, entries: np.ndarray, t_a: np.ndarray, score: np.ndarray, vague: np.ndarray,
              event: np.ndarray) -> tuple[np.ndarray, ...]:
    """The extensions that are vague taken once per (path, event): the latest instant, the
    best score; the others as they are."""
    spread = np.flatnonzero(vague)
    first, which = same_events(rows[spread].astype(np.int64), event[entries[spread]])
    latest = np.full(len(first), np.iinfo(np.int64).min)
    best = np.zeros(len(first))
    np.maximum.at(latest, which, t_a[spread])
    np.maximum.at(best, which, score[spread])
    plain = np.flatnonzero(~vague)
    picked = spread[first]
    return (np.concatenate([rows[plain], rows[picked]]), np.concatenate([entries[plain], entries[picked]]),
            np.concatenate([t_a[plain], latest]), np.concatenate([score[plain], best]),
            np.arange(len(plain) + len(picked)) >= len(plain))
