"""What the AYAC operator reports for a match, and its probability taken apart.

A match is a *path* of the NFA: the time and event at each state it observed (a missed
positive has no event). It is reported with the events it observed by variable, its
hash key, its events' times and records, and its *factors* (:mod:`penumbra.explain`):
one per run of components between two observed states, with the run's score
(H_{i,j} of section 4, or the leading and trailing runs' scores); their product is the
match's probability. A match whose probability is summed over possible worlds
(:mod:`.worlds`) has one factor, that sum.
"""

from __future__ import annotations

from typing import Any

from ..events import Event, event_to_json
from ..operator import Match
from .plan import NFA
from .tables import ScoringTables

__all__ = ["NFAPath", "path_factors", "run_factor", "to_match", "worlds_factor"]

#: A path of the NFA: state -> (time, event) of each state it observed.
NFAPath = dict[int, tuple[int, Event]]


def to_match(nfa: NFA, path: NFAPath, score: float, factors: list[dict[str, Any]]) -> Match:
    """The match of a path of probability ``score``: its observed events, in the
    query's order, and the factors of runs that hold a component."""
    observed = sorted(path)
    return Match({nfa.state_vars[s]: path[s][1].id for s in observed}, score,
                 key=_match_key(nfa, path),
                 times={nfa.state_vars[s]: (path[s][1].ts.lo, path[s][1].ts.hi) for s in observed},
                 records={nfa.state_vars[s]: event_to_json(path[s][1]) for s in observed},
                 factors=[f for f in factors if f["components"]])


def _match_key(nfa: NFA, path: NFAPath) -> dict | None:
    """:attr:`Match.key`: the hash attribute of the query's first keyed positive
    component, its value from the first event of the match that has a hash attribute
    (every keyed component shares the value; a missed one is not in the match)."""
    for s, name in nfa.state_keys:
        if s in path:
            return {nfa.state_keys[0][1]: path[s][1].attrs.get(name)}
    return None


def path_factors(nfa: NFA, tables: ScoringTables, path: NFAPath) -> list[dict[str, Any]]:
    """A path's score taken apart, with ``tables``: the leading run (components before
    the first positive, from t_last - W to the first arrival), then the run between each
    two observed states (missed positives and negatives). Their product is the score but
    for the trailing run's, added when a match waiting for it is reported."""
    states = sorted(path)
    t_first, t_last = path[states[0]][0], path[states[-1]][0]
    lead = t_first - (t_last - nfa.window)
    factors = [run_factor(nfa, None, nfa.state_vars[states[0]], range(nfa.positives[0]), lead,
                          float(tables.leading[lead]))]
    for i, j in zip(states, states[1:]):
        gap = path[j][0] - path[i][0]
        factors.append(run_factor(nfa, nfa.state_vars[i], nfa.state_vars[j],
                                  range(nfa.positives[i] + 1, nfa.positives[j]), gap, float(tables.score[i, j][gap])))
    return factors


def run_factor(nfa: NFA, after: str | None, before: str | None, components: range, gap: int,
               score: float) -> dict[str, Any]:
    """One factor: the run of ``components`` between the observed components ``after`` and
    ``before`` (None: the window's start or end), ``gap`` apart, and its score."""
    return {"after": after, "before": before, "components": _described(nfa, components), "gap": gap, "score": score}


def worlds_factor(nfa: NFA, prob: float, worlds: int) -> dict[str, Any]:
    """The one factor of a match summed over ``worlds`` combinations of its instants."""
    return {"after": None, "before": None, "components": _described(nfa, range(len(nfa.query.components))),
            "gap": None, "score": prob, "worlds": worlds}


def _described(nfa: NFA, components: range) -> list[dict[str, Any]]:
    return [{"var": c.var, "stream": c.stream, "negated": c.negated, "miss_prob": nfa.miss_probs[k]}
            for k, c in ((k, nfa.query.components[k]) for k in components)]
