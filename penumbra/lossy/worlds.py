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
matters. An imprecise event of a negative component is kept whole (:class:`Vague`) and
breaks no path while paths are built (a negative breaks a path only where it is
certain). A path that reaches V_1 with an imprecise event, or whose intervals meet an
imprecise negative event, is then evaluated here over its worlds once nothing can change
it any more: every instant of its events processed, and the window of its trailing
negatives passed (:meth:`PossibleWorlds._release_worlds`).
"""

from __future__ import annotations

import functools
import heapq
import itertools
from bisect import bisect_left
from typing import Any

import numpy as np

from ..events import Event
from ..operator import BlockResult, Late
from ..probability import meets
from ..query.ast import evaluate
from ..timestamps import Interval
from .queues import NO_KEY

__all__ = ["COMBINATIONS", "CLAUSE_SETS", "PossibleWorlds", "TooManyWorlds", "Vague", "reading"]

#: Most combinations of instants of a match's events evaluated at once (beyond, the
#: match is reported in ``late`` with its reason rather than computed).
COMBINATIONS = 4_000_000

#: Most clauses with distinct negative events combined by inclusion-exclusion for one match.
CLAUSE_SETS = 12


class TooManyWorlds(Exception):
    """A match whose evaluation over worlds is beyond the operator's bounds."""


@functools.lru_cache(maxsize=8192)
def reading(ts: Interval) -> tuple[np.ndarray, np.ndarray]:
    """The instants of an interval on the unit grid with positive probability, and their
    probabilities (a certain instant: one, with probability 1). Read-only arrays."""
    if ts.lo == ts.hi:
        instants, probs = np.array([int(ts.lo)], np.int64), np.ones(1)
    else:
        instants, probs = ts.grid(1.0)
        support = probs > 0
        instants, probs = instants[support].astype(np.int64), probs[support]
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
    return event.ts.lo == event.ts.hi


class Vague:
    """The imprecise events of one negative component, each kept once, by hash-key code
    (NO_KEY when not hashed): per key, in order of their first instant, the support's
    first and last instant, the clause mask and the event."""

    __slots__ = ("by_key", "span", "size", "compacted")

    def __init__(self):
        self.by_key: dict[int, tuple[list[int], list[int], list[int], list[Event]]] = {}
        self.span = 0               # the widest support kept, last minus first instant
        self.size = 0
        self.compacted = 0

    def __len__(self) -> int:
        return self.size

    def push(self, lo: int, hi: int, key: int, mask: int, event: Event) -> None:
        """Keep an event; events come in order of their first instant."""
        columns = self.by_key.get(key)
        if columns is None:
            columns = self.by_key[key] = ([], [], [], [])
        for column, value in zip(columns, (lo, hi, mask, event)):
            column.append(value)
        self.span = max(self.span, hi - lo)
        self.size += 1

    def meeting(self, key: int, lo: int, hi: int) -> list[tuple[int, Event]]:
        """(clause mask, event) of the events with this key whose support meets (lo, hi)."""
        columns = self.by_key.get(key)
        if columns is None:
            return []
        firsts, lasts, masks, events = columns
        found = []
        n = bisect_left(firsts, hi) - 1
        while n >= 0 and firsts[n] > lo - self.span:
            if lasts[n] > lo:
                found.append((masks[n], events[n]))
            n -= 1
        return found

    def expire(self, horizon: int) -> int:
        """Drop the events whose support ends at or before ``horizon``."""
        gone = 0
        for key in list(self.by_key):
            firsts, lasts, masks, events = self.by_key[key]
            keep = [n for n, last in enumerate(lasts) if last > horizon]
            if len(keep) == len(lasts):
                continue
            gone += len(lasts) - len(keep)
            if keep:
                self.by_key[key] = tuple([column[n] for n in keep] for column in (firsts, lasts, masks, events))
            else:
                del self.by_key[key]
        self.size -= gone
        self.compacted = self.size
        return gone

    def due(self) -> bool:
        return self.size > 2 * max(self.compacted, 64)

    def keys(self) -> np.ndarray:
        return np.array(sorted(self.by_key), np.int64)


class PossibleWorlds:
    """Mixed into :class:`~.operator.LossyOperator`: routes the paths imprecise
    timestamps touch to an evaluation over their possible worlds, and runs it."""

    # --- routing --------------------------------------------------------------------------

    def _meets_vague(self, key: int, intervals) -> bool:
        """Whether an imprecise negative event may lie in one of the intervals."""
        for k, lo, hi in intervals:
            vague = self.vague.get(k)
            if vague and vague.meeting(key if self.key_of[k] is not None else NO_KEY, lo, hi):
                return True
        return False

    def _route(self, paths):
        """The paths reaching V_1 that imprecise timestamps touch go to the evaluation
        over worlds (once per match, whatever clause found it); the rest are returned.
        The trailing negatives are looked at when the window has passed
        (:meth:`_trailing_vague`)."""
        if not len(paths):
            return paths
        states = paths.states
        # the paths of one match (every combination of its instants) decided once: rows of
        # the same events, found by the events' identities
        first, which = same_events(*(paths.events[s] for s in states))
        keep = np.ones(len(first), bool)
        trailing = set(self.trailing_negatives)
        for u, n in enumerate(first.tolist()):
            events = {s: paths.events[s][n] for s in states}
            if all(map(certain, events.values())):
                times = {s: int(paths.times[s][n]) for s in states}
                intervals = [(k, lo, hi) for k, (lo, hi) in self._intervals(sorted(states), times).items()
                             if k not in trailing]
                if not self._meets_vague(int(paths.key[n]), intervals):
                    continue
            keep[u] = False
            self._schedule(events, int(paths.key[n]))
        return paths.take(keep[which])

    def _trailing_vague(self, key: int, path: dict[int, tuple[int, Event]], deadline: int) -> bool:
        t_last = path[max(path)][0]
        return self._meets_vague(key, [(k, t_last, deadline) for k in self.trailing_negatives])

    def _schedule(self, events: dict[int, Event], key: int) -> None:
        """Wait for the match to be evaluated: until every instant of its events is
        processed (a later one could add a path, never a world) and its trailing
        negatives' window has passed."""
        identity = tuple((s, e.stream, e.id) for s, e in sorted(events.items()))
        if identity in self.worlds_due:
            return
        spans = {s: (e.ts.lo, e.ts.hi) for s, e in events.items()}
        first, last = min(spans), max(spans)
        deadline = max(int(hi) + (0 if lo == hi else 1) for lo, hi in spans.values())
        if self.trailing_negatives:
            deadline = max(deadline, int(spans[first][1]) + self.window)
        horizon = int(reading(events[last].ts)[0][0]) - self.window
        self.sequence += 1
        self.worlds_due.add(identity)
        heapq.heappush(self.worlds, (deadline, self.sequence, key, horizon, identity, events))

    def _release_worlds(self, until: float, out: BlockResult) -> None:
        while self.worlds and self.worlds[0][0] <= until:
            _, _, key, _, identity, events = heapq.heappop(self.worlds)
            self.worlds_due.discard(identity)
            self._evaluate(events, key, out)

    def _evaluate(self, events: dict[int, Event], key: int, out: BlockResult) -> None:
        try:
            prob, worlds = self._over_worlds(events, key)
        except TooManyWorlds as error:
            self._too_many(events, error, out)
            return
        if prob is None or not meets(prob, self.threshold):
            return
        path = {s: (int(reading(e.ts)[0][0]), e) for s, e in events.items()}
        described = [{"var": c.var, "stream": c.stream, "negated": c.negated, "miss_prob": self.miss_probs[k]}
                     for k, c in enumerate(self.query.components)]
        factor = {"after": None, "before": None, "components": described, "gap": None, "score": prob,
                  "worlds": worlds}
        self._emit_path(path, prob, out, [factor], learn=all(map(certain, events.values())))

    def _too_many(self, events: dict[int, Event], error: TooManyWorlds, out: BlockResult) -> None:
        """Report a match beyond the evaluation's bounds in ``late``, with its last event."""
        self.totals["late"] += 1
        out.late.append(Late(events[max(events)], f"the match {', '.join(e.id for _, e in sorted(events.items()))} "
                                                  f"over imprecise timestamps needs {error} to evaluate, more than "
                                                  f"this operator computes for one match"))

    # --- the evaluation -------------------------------------------------------------------------

    def _over_worlds(self, events: dict[int, Event], key: int) -> tuple[float | None, int]:
        """P(match) = sum over the worlds of P(world) S(world), and the number of
        combinations of the match's instants it summed; None when no world holds the
        match (none puts its events in order inside the window, or each one's negative
        events break it): not a match at all, as a precise path that is broken is none,
        while a path some world holds with a score of zero is a match of probability zero."""
        states = sorted(events)
        if len({(e.stream, e.id) for e in events.values()}) < len(states):
            return None, 0      # one event cannot be two components
        times, weight = self._combinations(states, events)
        if not len(weight):
            return None, 0
        window = self.window
        span = times[states[-1]] - times[states[0]]
        score = weight * self.leading[window - span] * self.trailing[window - span]
        for i, j in zip(states, states[1:]):
            score = score * self.score[i, j][times[j] - times[i]]
        accepted = self._accepted(states, events, key, times, len(weight))
        if accepted is None or not accepted.any():
            return None, len(weight)
        if not score.any():
            return 0.0, len(weight)
        return float(min(1.0, max(0.0, float(np.dot(score, accepted))))), len(weight)

    def _combinations(self, states: list[int], events: dict[int, Event]) -> tuple[dict[int, np.ndarray], np.ndarray]:
        """Every combination of the events' instants in increasing time inside the window,
        with its probability."""
        instants, weight = reading(events[states[0]].ts)
        times = {states[0]: instants}
        for s in states[1:]:
            later, probs = reading(events[s].ts)
            if len(weight) * len(later) > COMBINATIONS:
                raise TooManyWorlds(f"more than {COMBINATIONS:,} combinations of instants")
            previous, first = times[max(times)], times[states[0]]
            rows, cols = np.nonzero((later[None, :] > previous[:, None])
                                    & (later[None, :] - first[:, None] < self.window))
            times = {state: column[rows] for state, column in times.items()}
            times[s] = later[cols]
            weight = weight[rows] * probs[cols]
        return times, weight

    def _accepted(self, states: list[int], events: dict[int, Event], key: int,
                  times: dict[int, np.ndarray], count: int) -> np.ndarray | None:
        """Per combination (``count`` of them), the probability that one clause holds: its
        predicates on the positives, and none of its negative events inside its interval.
        None when no clause accepts the positives."""
        observed = {self.state_vars[s] for s in states}
        bindings = self._bindings_of(states, events)
        intervals = self._intervals(states, times)
        own = {(e.stream, e.id) for e in events.values()}
        clauses = []
        for plan in self.plans:
            if not self._clause_holds(plan, states, events, observed, bindings):
                continue
            negatives = {}
            for k, check in plan.negatives.items():
                for event in self._negative_events(plan, check, k, key, observed, bindings, intervals[k]):
                    if (event.stream, event.id) in own:
                        continue    # the match's own event: at its own time, outside every interval
                    negatives.setdefault((event.stream, event.id), (event, set()))[1].add(k)
            relevant = frozenset((name, k) for name, (_, ks) in negatives.items() for k in ks)
            if not relevant:
                return np.ones(count)
            clauses.append((relevant, negatives))
        if not clauses:
            return None
        return self._union(clauses, intervals, count)

    @staticmethod
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

        def outside(name, event, ks) -> np.ndarray:
            if (name, ks) not in cache:
                cache[name, ks] = _outside(reading(event.ts), [intervals[k] for k in sorted(ks)], count)
            return cache[name, ks]

        union = np.zeros(count)
        for size in range(1, len(minimal) + 1):
            for subset in itertools.combinations(minimal, size):
                merged: dict = {}
                for relevant in subset:
                    for name, (event, ks) in distinct[relevant].items():
                        merged.setdefault(name, (event, set()))[1].update(ks)
                term = np.ones(count)
                for name, (event, ks) in merged.items():
                    term = term * outside(name, event, frozenset(ks))
                union += term if size % 2 else -term
        return np.clip(union, 0.0, 1.0)

    def _trailing_worlds(self, key: int, t_last: int, deadline: int, clauses: list) -> float:
        """A waiting precise match whose trailing interval (t_last, deadline) an imprecise
        negative event meets: P(one of the clauses that accepted it finds none of its
        trailing negative events inside). Its runs and leading negatives were decided
        when it completed (nothing imprecise met them), so only the trailing ones are left."""
        interval = (np.array([t_last], np.int64), np.array([deadline], np.int64))
        intervals = {k: interval for k in self.trailing_negatives}
        found = []
        for bit, bindings, observed in clauses:
            plan = self.plans[bit]
            negatives: dict = {}
            for k in self.trailing_negatives:
                for event in self._negative_events(plan, plan.negatives[k], k, key, observed, bindings, interval):
                    negatives.setdefault((event.stream, event.id), (event, set()))[1].add(k)
            if not negatives:
                return 1.0
            found.append((frozenset((name, k) for name, (_, ks) in negatives.items() for k in ks), negatives))
        return float(self._union(found, intervals, 1)[0])

    def _intervals(self, states: list[int], times: dict[int, Any]) -> dict[int, tuple[Any, Any]]:
        """Per negative component, its open interval: per combination for arrays of times
        by state, or one for times."""
        first, last = times[states[0]], times[states[-1]]
        out = {k: (last - self.window, first) for k in self.leading_negatives}
        for i, j in zip(states, states[1:]):
            out.update({k: (times[i], times[j]) for k in self.run_negatives[i, j]})
        out.update({k: (last, first + self.window) for k in self.trailing_negatives})
        return out

    def _bindings_of(self, states: list[int], events: dict[int, Event]) -> dict[str, Any]:
        """Variable -> attributes, the missed components' from their DEFAULTs."""
        binding: dict[str, Any] = {self.state_vars[s]: events[s].attrs for s in states}
        self._bind_defaults(binding, [var for s, var in enumerate(self.state_vars) if s not in events])
        return binding

    def _clause_holds(self, plan, states, events, observed, bindings) -> bool:
        """The clause's predicates on the positives: trivial ones on each observed event,
        joint ones (through DEFAULTs for missed components)."""
        for s in states:
            k = self.positives[s]
            if not (self.unconditional[k] or self._clause_mask(k, events[s].attrs)) >> plan.bit & 1:
                return False
        return all(literal.implied and literal.needs <= observed or evaluate(literal.expr, bindings) is True
                   for literal in plan.literals)

    def _negative_events(self, plan, check, k, key, observed, bindings, interval) -> list[Event]:
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


def _outside(reading: tuple[np.ndarray, np.ndarray], intervals: list[tuple[Any, Any]], count: int) -> np.ndarray:
    """Per combination, P(the event lies in none of the open ``intervals``), its instants and
    their probabilities given. For an event of many instants, intervals that share no
    integer (the runs of one match) add up, each by the cumulative probabilities at its
    ends; otherwise the instants are marked inside one by one. Exactly 0 where every
    instant is inside, 1 where none is."""
    instants, probs = reading
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
