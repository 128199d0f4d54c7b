"""Imprecise timestamps in the AYAC operator: a match's probability over possible worlds.

An event ``{"lo": a, "hi": b}`` (optionally with a ``pmf``) happened at one instant of
a, a+1, ..., b, uniform or weighted, independently of every other event (the possible
worlds of the imprecise-timestamps paper). In one world every time is precise and the
match has the probability of the lossy model, S(world) (zero where the world breaks it);
over the worlds it has

    P(match) = sum over worlds of P(world) S(world).

Only the events that can change S take part: the match's observed events, and the
events of its negative components whose support meets the intervals they are searched
in. With the components' times t fixed, the runs' scores are the tables of
:mod:`.model`, and the match is accepted when one DNF clause holds, that is when none of
the clause's negative events lies in its interval: per clause c, the probability
A_c(t) = prod over its negative events n of P(t_n outside the union of n's intervals);
over the clauses, P(union of A_c) by inclusion-exclusion (a negative event shared by two
clauses is one event: its intervals are united, never multiplied).

How it runs. An imprecise event is processed as one entry per instant of its support
(at that instant, in time order) where it is a positive component, with the scores of
the precise model: the largest score over the instants bounds the sum above, so a match
pruned on every instant is below the threshold in every world and nothing pruned
matters. An imprecise event of a negative component is kept whole (:class:`~.queues.Vague`)
and breaks no path while paths are built (a negative breaks a path only where it is
certain). A path that reaches V_1 with an imprecise event, or whose intervals meet an
imprecise negative event (:meth:`PossibleWorlds.touches`), is then evaluated here over
its worlds (:meth:`PossibleWorlds.probability`) once nothing can change it any more:
every instant of its events processed, and the window of its trailing negatives passed
(:mod:`.waiting`).

:class:`PossibleWorlds` is given what it reads: the NFA and its clause plans
(:mod:`.plan`), the scoring tables in force (:mod:`.tables`), the NAQs and the
imprecise negative events kept whole.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..events import Event
from ..query.ast import evaluate
from ..timestamps import Interval
from .plan import NFA, ClausePlan, NegativeCheck
from .queues import NO_KEY, Queue, Vague
from .tables import ScoringTables

__all__ = ["CLAUSE_SETS", "COMBINATIONS", "PossibleWorlds", "TooManyWorlds", "certain", "same_events", "support"]

#: Most combinations of instants of a match's events evaluated at once (beyond, the
#: match is reported in ``late`` with its reason rather than computed).
COMBINATIONS = 4_000_000

#: Most clauses with distinct negative events combined by inclusion-exclusion for one match.
CLAUSE_SETS = 12


class TooManyWorlds(Exception):
    """A match whose evaluation over worlds is beyond the operator's bounds."""


@functools.lru_cache(maxsize=8192)
def support(ts: Interval) -> tuple[np.ndarray, np.ndarray]:
    """The support of an interval on the unit grid: its instants with positive
    probability, and their probabilities (a certain instant: one, with probability 1).
    Read-only arrays."""
    if ts.lo == ts.hi:
        instants, probs = np.array([int(ts.lo)], np.int64), np.ones(1)
    else:
        instants, probs = ts.grid(1.0)
        possible = probs > 0
        instants, probs = instants[possible].astype(np.int64), probs[possible]
    instants.flags.writeable = False
    probs.flags.writeable = False
    return instants, probs


#: The identity of each object of an object array, as integers (one C loop).
_IDENTITY = np.frompyfunc(id, 1, 1)


def same_events(*columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows whose objects (one per column) are the same: the first row of each group
    and each row's group, groups numbered in the order they first appear (not by the
    objects' addresses, which a restored operator does not share: it must go the same way)."""
    identities = np.column_stack([_IDENTITY(column).astype(np.int64) if column.dtype == object else column
                                  for column in columns])
    _, first, which = np.unique(identities, axis=0, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    group = np.empty_like(order)
    group[order] = np.arange(len(order))
    return first[order], group[which.ravel()]


def certain(event: Event) -> bool:
    """Whether the event's time is one instant."""
    return event.ts.lo == event.ts.hi


@dataclass
class PossibleWorlds:
    """A match's probability over the possible worlds of its events' times and of the
    imprecise negative events that may break it, for the NFA ``nfa`` with ``tables``,
    its NAQs (``naqs``: per negative component, one per clause) and the imprecise
    events kept whole (``vague``: per negative component)."""

    nfa: NFA
    tables: ScoringTables
    naqs: dict[int, list[Queue]]
    vague: dict[int, Vague]

    # --- which matches ----------------------------------------------------------------------

    def touches(self, key: int, events: dict[int, Event], times: dict[int, int]) -> bool:
        """Whether imprecise timestamps touch a match that reached V_1, with its events and
        their times by state: one of its events is imprecise, or an imprecise negative
        event may lie in one of its intervals but the trailing one (looked at when its
        window has passed, :meth:`trailing_touched`)."""
        if not all(map(certain, events.values())):
            return True
        trailing = set(self.nfa.trailing_negatives)
        intervals = [(k, lo, hi) for k, (lo, hi) in self._intervals(sorted(events), times).items()
                     if k not in trailing]
        return self._meets_imprecise(key, intervals)

    def trailing_touched(self, key: int, t_last: int, deadline: int) -> bool:
        """Whether an imprecise negative event may lie in a match's trailing interval."""
        return self._meets_imprecise(key, [(k, t_last, deadline) for k in self.nfa.trailing_negatives])

    def _meets_imprecise(self, key: int, intervals) -> bool:
        """Whether an imprecise negative event may lie in one of the intervals."""
        for k, lo, hi in intervals:
            vague = self.vague.get(k)
            if vague and vague.meeting(key if self.nfa.key_attribute(k) is not None else NO_KEY, lo, hi):
                return True
        return False

    # --- the evaluation ---------------------------------------------------------------------

    def probability(self, events: dict[int, Event], key: int) -> tuple[float | None, int]:
        """P(match) = sum over the worlds of P(world) S(world), and the number of
        combinations of the match's instants it summed; None when no world holds the
        match (none puts its events in order inside the window, or each one's negative
        events break it): not a match at all, as a precise path that is broken is none,
        while a path some world holds with a score of zero is a match of probability
        zero. Raises :class:`TooManyWorlds` beyond the bounds it computes."""
        states = sorted(events)
        if len({(e.stream, e.id) for e in events.values()}) < len(states):
            return None, 0      # one event cannot be two components
        times, weight = self._combinations(states, events)
        if not len(weight):
            return None, 0
        tables, window = self.tables, self.nfa.window
        span = times[states[-1]] - times[states[0]]
        score = weight * tables.leading[window - span] * tables.trailing[window - span]
        for i, j in zip(states, states[1:]):
            score = score * tables.score[i, j][times[j] - times[i]]
        accepted = self._accepted(states, events, key, times, len(weight))
        if accepted is None or not accepted.any():
            return None, len(weight)
        if not score.any():
            return 0.0, len(weight)
        return float(min(1.0, max(0.0, float(np.dot(score, accepted))))), len(weight)

    def trailing(self, key: int, t_last: int, deadline: int, clauses: list) -> float:
        """A waiting precise match whose trailing interval (t_last, deadline) an imprecise
        negative event meets: P(one of the clauses that accepted it finds none of its
        trailing negative events inside). Its runs and leading negatives were decided
        when it completed (nothing imprecise met them), so only the trailing ones are left."""
        interval = (np.array([t_last], np.int64), np.array([deadline], np.int64))
        intervals = {k: interval for k in self.nfa.trailing_negatives}
        found = []
        for bit, bindings, observed in clauses:
            relevant, negatives = self._breaking(self.nfa.plans[bit], self.nfa.trailing_negatives, key, observed,
                                                 bindings, intervals)
            if not relevant:
                return 1.0
            found.append((relevant, negatives))
        return float(_union(found, intervals, 1)[0])

    def _combinations(self, states: list[int], events: dict[int, Event]) -> tuple[dict[int, np.ndarray], np.ndarray]:
        """Every combination of the events' instants in increasing time inside the window,
        with its probability."""
        instants, weight = support(events[states[0]].ts)
        times = {states[0]: instants}
        for s in states[1:]:
            later, probs = support(events[s].ts)
            if len(weight) * len(later) > COMBINATIONS:
                raise TooManyWorlds(f"more than {COMBINATIONS:,} combinations of instants")
            previous, first = times[max(times)], times[states[0]]
            rows, cols = np.nonzero((later[None, :] > previous[:, None])
                                    & (later[None, :] - first[:, None] < self.nfa.window))
            times = {state: column[rows] for state, column in times.items()}
            times[s] = later[cols]
            weight = weight[rows] * probs[cols]
        return times, weight

    def _accepted(self, states: list[int], events: dict[int, Event], key: int,
                  times: dict[int, np.ndarray], count: int) -> np.ndarray | None:
        """Per combination (``count`` of them), the probability that one clause holds: its
        predicates on the positives, and none of its negative events inside its interval.
        None when no clause accepts the positives."""
        observed = {self.nfa.state_vars[s] for s in states}
        bindings = self._bindings(states, events)
        intervals = self._intervals(states, times)
        in_match = frozenset((e.stream, e.id) for e in events.values())
        clauses = []
        for plan in self.nfa.plans:
            if not self._clause_holds(plan, states, events, observed, bindings):
                continue
            relevant, negatives = self._breaking(plan, plan.negatives, key, observed, bindings, intervals, in_match)
            if not relevant:
                return np.ones(count)
            clauses.append((relevant, negatives))
        if not clauses:
            return None
        return _union(clauses, intervals, count)

    def _breaking(self, plan: ClausePlan, components, key: int, observed, bindings, intervals,
                  in_match: frozenset = frozenset()) -> tuple[frozenset, dict]:
        """The events that break the match under a clause where they lie in the intervals of
        the negative ``components`` that search them (not the match's own events, which lie
        at their own times, outside every interval): (name, component) of each, and name ->
        (event, the components that search it)."""
        negatives: dict = {}
        for k in components:
            for event in self._negative_events(plan, plan.negatives[k], k, key, observed, bindings, intervals[k]):
                if (event.stream, event.id) not in in_match:
                    negatives.setdefault((event.stream, event.id), (event, set()))[1].add(k)
        return frozenset((name, k) for name, (_, searched) in negatives.items() for k in searched), negatives

    def _intervals(self, states: list[int], times: dict[int, Any]) -> dict[int, tuple[Any, Any]]:
        """Per negative component, its open interval: per combination for arrays of times
        by state, or one for times."""
        nfa = self.nfa
        first, last = times[states[0]], times[states[-1]]
        out = {k: (last - nfa.window, first) for k in nfa.leading_negatives}
        for i, j in zip(states, states[1:]):
            out.update({k: (times[i], times[j]) for k in nfa.run_negatives[i, j]})
        out.update({k: (last, first + nfa.window) for k in nfa.trailing_negatives})
        return out

    def _bindings(self, states: list[int], events: dict[int, Event]) -> dict[str, Any]:
        """Variable -> attributes, the missed components' from their DEFAULTs."""
        state_vars = self.nfa.state_vars
        binding: dict[str, Any] = {state_vars[s]: events[s].attrs for s in states}
        self.nfa.bind_defaults(binding, [var for s, var in enumerate(state_vars) if s not in events])
        return binding

    def _clause_holds(self, plan: ClausePlan, states, events, observed, bindings) -> bool:
        """The clause's predicates on the positives: trivial ones on each observed event,
        joint ones (through DEFAULTs for missed components)."""
        nfa = self.nfa
        for s in states:
            k = nfa.positives[s]
            if not (nfa.unconditional[k] or nfa.clause_mask(k, events[s].attrs)) >> plan.bit & 1:
                return False
        return all(literal.implied and literal.needs <= observed or evaluate(literal.expr, bindings) is True
                   for literal in plan.literals)

    def _negative_events(self, plan: ClausePlan, check: NegativeCheck, k: int, key: int, observed, bindings,
                         interval) -> list[Event]:
        """The events of negative component k that break the match under this clause
        when they lie in its interval: in its NAQ (precise) or kept whole (imprecise), with
        the clause's predicates on them, meeting the widest interval of any combination."""
        lo, hi = int(interval[0].min()), int(interval[1].max())
        hashed = key if check.hashed else NO_KEY
        queue = self.naqs[k][plan.bit]
        start, stop = queue.find(np.array([hashed], np.int64), np.array([lo], np.int64), np.array([hi], np.int64))
        found = [queue.event[entry] for entry in queue.order[start[0]:stop[0]].tolist()]
        vague = self.vague.get(k)
        if vague:
            found += [event for mask, event in vague.meeting(hashed, lo, hi) if mask >> plan.bit & 1]
        literals = check.unimplied if check.needs <= observed else check.literals
        if literals:
            found = [e for e in found
                     if all(evaluate(expr, {**bindings, check.var: e.attrs}) is True for expr in literals)]
        return found


def _union(clauses: list, intervals: dict, count: int) -> np.ndarray:
    """P(one of the clauses holds) per combination, each clause given as (its negative
    events, event name -> (event, negative components that search it)), the negatives'
    intervals per combination: inclusion-exclusion over the clauses, an event shared by
    several clauses or components counted once, outside the union of its intervals."""
    # a clause whose negative events include another's is implied by it
    distinct = {relevant: negatives for relevant, negatives in clauses}
    minimal = [r for r in distinct if not any(other < r for other in distinct)]
    if len(minimal) > CLAUSE_SETS:
        raise TooManyWorlds(f"{len(minimal)} clauses with distinct negative events combined "
                            f"(at most {CLAUSE_SETS})")
    cache: dict = {}

    def outside(name, event, components) -> np.ndarray:
        if (name, components) not in cache:
            cache[name, components] = _outside(support(event.ts), [intervals[k] for k in sorted(components)], count)
        return cache[name, components]

    union = np.zeros(count)
    for size in range(1, len(minimal) + 1):
        for subset in itertools.combinations(minimal, size):
            merged: dict = {}
            for relevant in subset:
                for name, (event, components) in distinct[relevant].items():
                    merged.setdefault(name, (event, set()))[1].update(components)
            term = np.ones(count)
            for name, (event, components) in merged.items():
                term = term * outside(name, event, frozenset(components))
            union += term if size % 2 else -term
    return np.clip(union, 0.0, 1.0)


def _outside(distribution: tuple[np.ndarray, np.ndarray], intervals: list[tuple[Any, Any]],
             count: int) -> np.ndarray:
    """Per combination, P(the event lies in none of the open ``intervals``), its instants and
    their probabilities given. For an event of many instants, intervals that share no
    integer (the runs of one match) add up, each by the cumulative probabilities at its
    ends; otherwise the instants are marked inside one by one. Exactly 0 where every
    instant is inside, 1 where none is."""
    instants, probs = distribution
    if len(instants) > 16:
        spans: list[tuple[np.ndarray, np.ndarray]] = []
        for lo, hi in intervals:
            lo, hi = np.broadcast_to(lo, count), np.broadcast_to(hi, count)
            if not any(np.array_equal(lo, a) and np.array_equal(hi, b) for a, b in spans):
                spans.append((lo, hi))
        if all(np.all(np.minimum(b1, b2) - np.maximum(a1, a2) <= 1)
               for (a1, b1), (a2, b2) in itertools.combinations(spans, 2)):
            cumulative = np.concatenate(([0.0], np.cumsum(probs)))
            held, weight = np.zeros(count, np.int64), np.zeros(count)
            for lo, hi in spans:
                first = np.searchsorted(instants, lo, side="right")
                stop = np.searchsorted(instants, hi, side="left")
                inside = np.maximum(stop - first, 0)
                held += inside
                weight += np.where(inside > 0, cumulative[np.maximum(stop, first)] - cumulative[first], 0.0)
            return np.where(held == 0, 1.0, np.where(held >= len(instants), 0.0, np.clip(1.0 - weight, 0.0, 1.0)))
    inside = np.zeros((count, len(instants)), bool)
    for lo, hi in intervals:
        inside |= (instants > np.reshape(lo, (-1, 1))) & (instants < np.reshape(hi, (-1, 1)))
    # no instant inside: 1 - 0 is 1 exactly; every instant inside: 0, whatever the sum's rounding
    return np.where(inside.all(axis=1), 0.0, np.clip(1.0 - inside @ probs, 0.0, 1.0))
