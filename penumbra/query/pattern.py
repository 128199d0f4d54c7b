"""The pattern form of the query language (SASE over imprecise timestamps)::

    PATTERN SEQ(TaskStart a, CPU b, TaskFinish c, CPU d)
    WHERE a.taskId = c.taskId AND b.nodeId = a.nodeId AND b.value > 95
      AND skip_till_any_match(a, b, c, d)
    WITHIN 150 RETURN a, b, c WITH CONFIDENCE 0.5 USING sorted

A component's type is the name of the stream its events come from (compared
case-insensitively). Each ``WHERE`` conjunct is checked as soon as every variable it
names is bound, i.e. at the component of its last variable in pattern order, and so is
each equality the conjuncts imply (``a.k = c.k AND b.k = c.k``: ``b.k = a.k`` at ``b``);
an equality ``x.k = y.k'`` chain that reaches every component partitions the state
(SASE's partitioned active instance stacks). ``WITHIN W`` holds when ``t_last - t_first < W``;
with a unit, ``W`` is converted to seconds. Without a selection strategy the query
uses ``skip_till_any_match``; without ``USING`` it is evaluated by ``sorted``.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field

from lark import v_args

from .ast import (Attr, Call, Compare, Const, Duration, Expr, ExprBuilder, Var, attrs_of, check_evaluable, conjuncts,
                  equality_classes, variables_of)
from .errors import QueryError

__all__ = ["PATTERN_METHODS", "PATTERN_STRATEGIES", "PatternBuilder", "PatternComponent", "PatternQuery"]

#: Selection strategies (section 2.1): every event may start a run; the next component is
#: any later relevant event, or only the next one in occurrence time.
PATTERN_STRATEGIES = ("skip_till_any_match", "skip_till_next_match")
#: Evaluation methods (sections 3, 4.1-4.3); every method returns the same matches.
PATTERN_METHODS = ("point", "any_state", "sorted", "selectivity")


@dataclass(frozen=True)
class PatternComponent:
    """``Type var`` in ``SEQ(...)``: events of stream ``stream`` bound to ``var``."""

    stream: str
    var: str
    line: int | None = field(default=None, compare=False)
    column: int | None = field(default=None, compare=False)


@dataclass(frozen=True)
class PatternQuery:
    """A parsed pattern query.

    ``steps[j]`` holds the conjuncts checked when component ``j`` is bound (those whose
    last variable in pattern order is component ``j``). ``partition`` names, per
    component, the attribute of an equality shared by every component, or is ``None``.
    ``window`` is W in the events' time unit; ``time_unit`` is the grid step.
    """

    components: tuple[PatternComponent, ...]
    steps: tuple[tuple[Expr, ...], ...]
    window: float
    strategy: str = "skip_till_any_match"
    returns: tuple[str, ...] = ()
    threshold: float | None = None
    method: str = "sorted"
    partition: tuple[str, ...] | None = None
    time_unit: float = 1.0
    kind: str = field(default="pattern", init=False)

    @property
    def variables(self) -> tuple[str, ...]:
        return tuple(c.var for c in self.components)

    @property
    def sources(self) -> tuple[PatternComponent, ...]:
        """The query's sources in query order, each with its stream and position."""
        return self.components

    @property
    def length(self) -> int:
        """The pattern length l."""
        return len(self.components)


def _strategy(call: Call, variables: tuple[str, ...]) -> str:
    """The strategy named by ``skip_till_any_match(a, b, ...)``, which must list every variable in order."""
    name = call.name.casefold()
    if name not in PATTERN_STRATEGIES:
        raise QueryError.at(call, f"unknown function {call.name!r} (a selection strategy is one of: "
                            f"{', '.join(PATTERN_STRATEGIES)})")
    named = tuple(a.name if isinstance(a, Var) else "" for a in call.args)
    if named != variables:
        raise QueryError.at(call, f"{name} takes the pattern's variables in order: "
                            f"{name}({', '.join(variables)})")
    return name


def _partition(keys: list[tuple[Attr, Attr]], variables: tuple[str, ...]) -> tuple[str, ...] | None:
    """Per component, the attribute of one equality class that covers every component."""
    for members in equality_classes(keys):
        if all(v in members for v in variables):
            return tuple(members[v][0] for v in variables)
    return None


@v_args(meta=True)
class PatternBuilder(ExprBuilder):
    def pattern_component(self, meta, children):
        stream = children[0]
        return PatternComponent(str(stream), str(children[1]), stream.line, stream.column)

    def pattern_return(self, meta, children):
        return [(str(name), name) for name in children]

    def pattern_confidence(self, meta, children):
        return children[0]

    def pattern_using(self, meta, children):
        return children[0]

    def pattern_query(self, meta, children):
        *components, condition, within, returns, confidence, using = children
        variables = tuple(c.var for c in components)
        seen: set[str] = set()
        for component in components:
            if component.var in seen:
                raise QueryError(f"variable {component.var!r} is used twice in SEQ(...)", component.line,
                                 component.column)
            seen.add(component.var)
        order = {v: j for j, v in enumerate(variables)}
        steps: list[list[Expr]] = [[] for _ in variables]
        strategy = None
        keys: list[tuple[Attr, Attr]] = []
        constants: list[tuple[Attr, Const]] = []
        for term in conjuncts(condition):
            if isinstance(term, Call) and term.name.casefold() in PATTERN_STRATEGIES:
                if strategy is not None:
                    raise QueryError.at(term, "the selection strategy is given twice")
                strategy = _strategy(term, variables)
                continue
            _check_names(term, order)
            used = variables_of(term)
            if not used:
                raise QueryError.at(term, "a condition must refer to a component's attribute")
            steps[max(order[v] for v in used)].append(term)
            if isinstance(term, Compare) and term.op == "=":
                if isinstance(term.left, Attr) and isinstance(term.right, Attr) and term.left.var != term.right.var:
                    keys.append((term.left, term.right))
                elif isinstance(term.left, Attr) and isinstance(term.right, Const):
                    constants.append((term.left, term.right))
                elif isinstance(term.left, Const) and isinstance(term.right, Attr):
                    constants.append((term.right, term.left))
        _implied_equalities(keys, constants, variables, steps)
        window = _window(within)
        returned = tuple(variables)
        if returns is not None:
            named: set[str] = set()
            for name, token in returns:
                if name not in order:
                    raise QueryError(f"RETURN names unknown variable {name!r} (the pattern's are "
                                     f"{', '.join(variables)})", token.line, token.column)
                if name in named:
                    raise QueryError(f"RETURN names {name!r} twice", token.line, token.column)
                named.add(name)
            names = {name for name, _ in returns}
            returned = tuple(v for v in variables if v in names)
        threshold = None
        if confidence is not None:
            if not 0 < confidence.value <= 1:
                raise QueryError.at(confidence, f"the confidence must be in (0, 1], got {confidence.value!r}")
            threshold = float(confidence.value)
        method = "sorted"
        if using is not None:
            method = str(using).lower()
            if method not in PATTERN_METHODS:
                raise QueryError(f"unknown method {str(using)!r} (one of: {', '.join(PATTERN_METHODS)})",
                                 using.line, using.column)
        return PatternQuery(tuple(components), tuple(tuple(s) for s in steps), window,
                            strategy or "skip_till_any_match", returned, threshold, method,
                            _partition(keys, variables))


def _implied_equalities(keys: list[tuple[Attr, Attr]], constants: list[tuple[Attr, Const]],
                        variables: tuple[str, ...], steps: list[list[Expr]]) -> None:
    """Add to ``steps`` the equalities the WHERE implies: with ``a.k = c.k AND b.k = c.k``,
    ``b.k = a.k`` holds in every match and is checked at ``b``; with ``b.k = c.k AND c.k =
    1``, ``b.k = 1`` is checked at ``b``. A match is the same with or without them; what
    changes is skip_till_next_match's "next" event, which is the next one passing the
    conditions checkable at its component: an event that cannot share the run's key is
    not next, whether the equalities are written as a chain, in another order, through a
    later component or a constant (and an equality chain that partitions the state
    decides the same). A written equality counts only for the attributes it names: ``a.j
    = b.j`` does not make ``b.k = a.k`` known at ``b``."""
    order = {v: j for j, v in enumerate(variables)}
    written = {frozenset(((left.var, left.name), (right.var, right.name))) for left, right in keys}
    pinned = {(attr.var, attr.name) for attr, _ in constants}
    for members in equality_classes(keys):
        bound = sorted(members, key=order.__getitem__)
        for later in bound[1:]:
            if not any(frozenset(((earlier, mine), (later, theirs))) in written
                       for earlier in bound[:bound.index(later)] for mine in members[earlier]
                       for theirs in members[later]):
                first = bound[0]
                steps[order[later]].append(Compare("=", Attr(later, members[later][0]),
                                                   Attr(first, members[first][0])))
        value = next((const for attr, const in constants if attr.name in members.get(attr.var, ())), None)
        if value is not None:
            for var in bound:
                if not any((var, name) in pinned for name in members[var]):
                    steps[order[var]].append(Compare("=", Attr(var, members[var][0]), value))


def _check_names(term: Expr, order: dict[str, int]) -> None:
    """Every variable in ``term`` is a pattern variable, and bare variables, calls and
    durations are not conditions."""
    check_evaluable(term)
    for attr in attrs_of(term):
        if attr.var not in order:
            raise QueryError.at(attr, f"unknown variable {attr.var!r} (the pattern's are {', '.join(order)})")


def _window(within: Duration) -> float:
    window = within.seconds() if within.unit is not None else within.value
    if window <= 0:
        raise QueryError.at(within, f"the window must be > 0, got {within.value!r}")
    if not math.isfinite(window):
        raise QueryError.at(within, f"WITHIN {within} is too long: at most {sys.float_info.max:g} seconds")
    return window
