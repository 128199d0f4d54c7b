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

:class:`MatchGeneration`, mixed into :class:`~.operator.LossyOperator`, reads the
operator's queues, scoring tables and clause plans (:mod:`.plan`), and keeps its
totals, waiting matches and gap samples.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..events import Event, event_to_json
from ..operator import BlockResult, Match
from ..probability import meets
from ..query.ast import evaluate
from .plan import ClausePlan, Literal, NegativeCheck
from .queues import NO_KEY
from .worlds import TooManyWorlds, same_events

__all__ = ["MatchGeneration"]

#: Most (path, queue entry) pairs one extension lays out at once; more go in slices of paths.
EXPAND_LIMIT = 1 << 20


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


class MatchGeneration:
    """Backward match generation: emits the matches and learns the gaps they observed,
    and holds back those that wait for the window of their trailing negatives to pass."""

    def _generate(self, t: np.ndarray, key: np.ndarray, mask: np.ndarray, events: np.ndarray, wide: np.ndarray,
                  out: BlockResult) -> None:
        """Backward match generation from a block of arrivals at the last state (``wide``:
        the arrival is an instant of an imprecise event), per clause."""
        last = len(self.positives) - 1
        emitted: dict = {}       # path identity -> True once emitted, or the clauses of its waiting match
        for plan in self.plans:
            rows = np.flatnonzero(mask >> plan.bit & 1)
            if len(rows):
                self._walk(plan, _arrivals(last, t[rows], key[rows], events[rows], wide[rows], plan.literals),
                           emitted, out)

    def _walk(self, plan: ClausePlan, paths: _Paths, emitted: dict, out: BlockResult) -> None:
        """Extend the paths from V_j back along every edge kept; complete them at V_1."""
        j = paths.states[-1]
        if j == 0:
            self._complete(plan, paths, emitted, out)
            return
        for i in self.incoming[j]:
            for longer in self._extend(plan, paths, i):
                if len(longer):
                    self._walk(plan, longer, emitted, out)

    def _extend(self, plan: ClausePlan, paths: _Paths, i: int):
        """Extend each path, which starts at V_j (arrival t_b), to every arrival t_a in
        V_i's queue with t_last - W < t_a < t_b, the same key and the clause's trivial
        predicates, whose score times u_a reaches the threshold; then apply the
        predicates and negative searches that became possible (no negative of the run
        in (t_a, t_b)). Yields the longer paths, in slices when they are many."""
        j = paths.states[-1]
        queue = self.paqs[i]
        start, stop = queue.find(paths.key, paths.t_last - self.window, paths.times[j])
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
            factor = np.where(vague, self.reach[i, j][np.minimum(gap, self.window)],
                              self.score[i, j][np.where(vague, 0, gap)])
        else:
            factor = self.score[i, j][gap]
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
                                                            for k in self.run_negatives[i, j]))
        return self._check(plan, longer, complete=False)[0]

    def _check(self, plan: ClausePlan, paths: _Paths, complete: bool) -> tuple[_Paths, np.ndarray]:
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
        components' DEFAULT values too (a default may name another missed component,
        hence one pass per missed component)."""
        columns = [(self.state_vars[s], paths.events[s]) for s in paths.states]
        bindings = [{var: column[n].attrs for var, column in columns} for n in range(len(paths))]
        missed = [var for s, var in enumerate(self.state_vars) if s not in paths.states] if complete else []
        for binding in bindings if missed else ():
            self._bind_defaults(binding, missed)
        return bindings

    def _bind_defaults(self, binding: dict[str, Any], missed: list[str]) -> None:
        """Bind the missed components to their DEFAULT values (a default may name another
        missed component, hence one pass per missed component)."""
        values: dict[str, dict[str, Any]] = {var: {} for var in missed}
        binding.update(values)
        for _ in missed:
            for var in missed:
                for name, expr in self.query.defaults.get(var, {}).items():
                    values[var][name] = evaluate(expr, binding)

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

    def _complete(self, plan: ClausePlan, paths: _Paths, emitted: dict, out: BlockResult) -> None:
        """The paths reached V_1: leading run score (from V_0 at t_last - W), the checks
        that waited for missed components' defaults, leading negatives; then emit, or
        wait for the window of trailing negatives to pass. A path satisfying several
        clauses is reported once."""
        lead = paths.times[0] - (paths.t_last - self.window)
        score = paths.score * np.where(paths.vague, self.initial_bound, self.leading[np.where(paths.vague, 0, lead)])
        paths = replace(paths, score=score).take(meets(score, self.threshold))
        if self.vague_seen:
            paths = self._route(paths)
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
                                          float(paths.score[n]), path, clauses, self._factors(path)))

    def _release(self, until: float, out: BlockResult) -> None:
        """Emit the waiting matches whose window ended by ``until``: no trailing negative
        in (t_last, t_first + W) under one of the clauses that accepted the path, scored
        by the trailing run."""
        while self.pending and self.pending[0][0] <= until:
            # (a match left waiting by a state written before factors were kept has none saved)
            deadline, _, key, t_last, score, path, clauses, *saved = heapq.heappop(self.pending)
            trailing = float(self.trailing[deadline - t_last])
            score *= trailing
            if not meets(score, self.threshold):
                continue
            if self.vague_seen and self._trailing_vague(key, path, deadline):
                try:    # an imprecise negative may lie in the window: the share of worlds it is clear
                    held = self._trailing_worlds(key, t_last, deadline, clauses)
                except TooManyWorlds as error:
                    self._too_many({s: event for s, (_, event) in path.items()}, error, out)
                    continue
            else:
                one = np.array([key], np.int64)
                lo, hi = np.array([t_last], np.int64), np.array([deadline], np.int64)
                held = float(any(not any(self._present(self.plans[bit], self.plans[bit].negatives[k], k, one, lo, hi,
                                                       [bindings], observed)[0] for k in self.trailing_negatives)
                                 for bit, bindings, observed in clauses))
            if held and meets(score * held, self.threshold):
                factors = (saved[0] if saved else self._factors(path)) + [self._run(
                    self.state_vars[-1], None, range(self.positives[-1] + 1, len(self.query.components)),
                    deadline - t_last, trailing * held)]
                self._emit_path(path, score * held, out, factors)
        self._release_worlds(until, out)

    def _emit(self, paths: _Paths, n: int, out: BlockResult) -> None:
        path = {s: (int(paths.times[s][n]), paths.events[s][n]) for s in paths.states}
        self._emit_path(path, float(paths.score[n]), out, self._factors(path))

    def _factors(self, path: dict[int, tuple[int, Event]]) -> list[dict[str, Any]]:
        """A path's score taken apart, with the scoring tables of now: the leading run
        (components before the first positive, from t_last - W to the first arrival), then
        the run between each two observed states (missed positives and negatives). Their
        product is the score but for the trailing run, which :meth:`_release` adds."""
        states = sorted(path)
        t_first, t_last = path[states[0]][0], path[states[-1]][0]
        lead = t_first - (t_last - self.window)
        factors = [self._run(None, self.state_vars[states[0]], range(self.positives[0]), lead,
                             float(self.leading[lead]))]
        for i, j in zip(states, states[1:]):
            gap = path[j][0] - path[i][0]
            factors.append(self._run(self.state_vars[i], self.state_vars[j],
                                     range(self.positives[i] + 1, self.positives[j]), gap,
                                     float(self.score[i, j][gap])))
        return factors

    def _run(self, after: str | None, before: str | None, components: range, gap: int, score: float) -> dict:
        """One factor of :meth:`_factors`: the run of components between ``after`` and
        ``before`` (None: the window's start or end), ``gap`` apart, and its score."""
        described = [{"var": c.var, "stream": c.stream, "negated": c.negated, "miss_prob": self.miss_probs[k]}
                     for k, c in ((k, self.query.components[k]) for k in components)]
        return {"after": after, "before": before, "components": described, "gap": gap, "score": score}

    def _match_key(self, path: dict[int, tuple[int, Event]]) -> dict | None:
        """:attr:`Match.key`: the hash attribute of the query's first keyed positive
        component, its value from the first event of the match that has a hash attribute
        (every keyed component shares the value; a missed one is not in the match)."""
        keyed = [s for s, k in enumerate(self.positives) if self.key_of[k] is not None]
        present = [s for s in keyed if s in path]
        if not present:
            return None
        return {self.key_of[self.positives[keyed[0]]]:
                path[present[0]][1].attrs.get(self.key_of[self.positives[present[0]]])}

    def _emit_path(self, path: dict[int, tuple[int, Event]], score: float, out: BlockResult,
                   factors: list[dict[str, Any]], learn: bool = True) -> None:
        """Report a match (its observed events, in the query's order) and learn its gaps
        (``learn``: they are known)."""
        observed = sorted(path)
        out.matches.append(Match({self.state_vars[s]: path[s][1].id for s in observed}, score,
                                 key=self._match_key(path),
                                 times={self.state_vars[s]: (path[s][1].ts.lo, path[s][1].ts.hi) for s in observed},
                                 records={self.state_vars[s]: event_to_json(path[s][1]) for s in observed},
                                 factors=[f for f in factors if f["components"]]))
        self.totals["matches"] += 1
        for s in range(1, len(self.positives) if learn else 0):
            var = self.state_vars[s]
            if s in path and s - 1 in path and var in self.learned:
                self.gap_samples[var].append(path[s][0] - path[s - 1][0])
                self.sample_count += 1


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
