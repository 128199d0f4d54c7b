"""The reference the pattern operators are checked against: every possible world.

A possible world fixes each event's occurrence time at one instant of its grid (section
2.3); the world's probability is the product of the instants' probabilities. In each
world a deterministic SASE matcher runs; matches are then collapsed by signature into
(confidence, first t_1, last t_l). Written independently of penumbra.patterns.
"""

from __future__ import annotations

import itertools
from fractions import Fraction

from penumbra.query.ast import evaluate


def grid(event):
    lo, hi = int(event.ts.lo), int(event.ts.hi)
    weights = event.ts.pmf or [1.0 / (hi - lo + 1)] * (hi - lo + 1)
    return [(lo + k, w) for k, w in enumerate(weights) if w > 0]


def _holds(terms, bindings):
    return all(evaluate(t, bindings) is True for t in terms)


def _any_matches(query, events, times):
    length = len(query.components)
    for chosen in itertools.permutations(range(len(events)), length):
        ts = [times[i] for i in chosen]
        if any(a >= b for a, b in zip(ts, ts[1:])) or ts[-1] - ts[0] >= query.window:
            continue
        if any(events[i].stream.casefold() != c.stream.casefold() for i, c in zip(chosen, query.components)):
            continue
        bindings = {c.var: events[i].attrs for i, c in zip(chosen, query.components)}
        if _holds([t for step in query.steps for t in step], bindings):
            yield chosen


def _next_matches(query, events, times):
    """Skip till next match: every E_1 event starts a run; each later component takes the
    earliest relevant event after the previous one (all of them on a tie)."""
    length = len(query.components)

    def relevant(j, prefix, i):
        component = query.components[j]
        if events[i].stream.casefold() != component.stream.casefold():
            return False
        bindings = {query.components[k].var: events[p].attrs for k, p in enumerate(prefix)}
        bindings[component.var] = events[i].attrs
        return _holds(query.steps[j], bindings)

    def grow(prefix):
        if len(prefix) == length:
            if times[prefix[-1]] - times[prefix[0]] < query.window:
                yield tuple(prefix)
            return
        j = len(prefix)
        later = [i for i in range(len(events))
                 if times[i] > times[prefix[-1]] and relevant(j, prefix, i)]
        if not later:
            return
        first = min(times[i] for i in later)
        for i in later:
            if times[i] == first:
                yield from grow(prefix + [i])

    for i in range(len(events)):
        if relevant(0, [], i):
            yield from grow([i])


def possible_world_matches(query, events):
    """signature (ids in pattern order) -> (confidence, first t_1, last t_l)."""
    grids = [grid(e) for e in events]
    matcher = _next_matches if query.strategy == "skip_till_next_match" else _any_matches
    out: dict[tuple[str, ...], list] = {}
    for world in itertools.product(*grids):
        times = [t for t, _ in world]
        probability = Fraction(1)
        for _, p in world:
            probability *= Fraction(p)
        for chosen in set(matcher(query, events, times)):
            signature = tuple(events[i].id for i in chosen)
            entry = out.setdefault(signature, [Fraction(0), times[chosen[0]], times[chosen[-1]]])
            entry[0] += probability
            entry[1] = min(entry[1], times[chosen[0]])
            entry[2] = max(entry[2], times[chosen[-1]])
    return {s: (float(c), lo, hi) for s, (c, lo, hi) in out.items() if c > 0}
