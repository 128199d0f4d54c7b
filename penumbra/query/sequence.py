"""The lossy-CEP form of the query language (AYAC paper, section 2.2)::

    SEQUENCE(Shelf x, !Counter y, Exit z)
    WHERE x.tag = z.tag AND y.tag = x.tag
    WITHIN 3600 THRESHOLD 0.5

* ``SEQUENCE`` names each component; a leading ``!`` makes it *negative* (it must not
  occur between the positive components around it; before the first or after the last
  positive it must not occur within the window).
* ``WHERE`` is converted to disjunctive normal form; each conjunctive clause is a
  *predicate*, and within a clause a literal on one component only is *trivial*
  (checked as events arrive), the others are checked when a match is generated. A
  literal naming a negative component says which of its events would break the match
  (SASE's negation): ``x.tag = z.tag AND y.tag = x.tag`` with ``!Counter y`` is "no
  counter read of x's tag between x and z"; it does not tie x to z by itself.
* ``DEFAULT a.tag = x.tag, a.aisle = 'unknown'`` gives the value an attribute of a
  positive component takes when that component was missed (a negative component takes
  none: its literals say which of its events break a match) (the paper writes these in
  brackets next to each attribute; one clause keeps one value per attribute). A trivial
  literal of a missed component is taken to hold: the missed event was one of its events.
* ``GAP z = exponential(40)`` fixes f_z, the density of the time from the previous
  positive component to z (section 3). Families: ``uniform(lo, hi)`` (integer gaps
  lo..hi), ``exponential(mean)`` (discretised, truncated to the window) and
  ``histogram(width, w1, w2, ...)`` (bins of ``width`` time units from gap 1, weights
  normalised). Components without ``GAP`` learn f online from completed matches.
* ``WITHIN w`` holds when t_last - t_first < w (time units of the grid, unit 1);
  ``THRESHOLD p`` is the least probability reported.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

from lark import v_args

from .ast import (Attr, Bool, Call, Compare, Const, Expr, ExprBuilder, Not, Var, attrs_of, check_evaluable, evaluate,
                  variables_of)
from ..events import GAP_FAMILIES, gap_problem
from ..events.streams import gap_pmf
from .errors import QueryError

__all__ = ["Clause", "GapSpec", "SequenceBuilder", "SequenceComponent", "SequenceQuery",
           "disjunctive_normal_form"]

#: Largest number of conjunctive clauses a WHERE may expand to.
MAX_CLAUSES = 64

#: Largest window: the scoring tables hold one entry per time unit of the window.
MAX_WINDOW = 10_000_000


@dataclass(frozen=True)
class SequenceComponent:
    stream: str
    var: str
    negated: bool
    line: int | None = field(default=None, compare=False)
    column: int | None = field(default=None, compare=False)


@dataclass(frozen=True)
class GapSpec:
    """A gap density given in the query: ``family(params)`` for component ``var``."""

    var: str
    family: str
    params: tuple[float, ...]


@dataclass(frozen=True)
class Clause:
    """One conjunctive clause of the WHERE in DNF: trivial literals by component
    variable, and the literals spanning two or more components."""

    trivial: dict[str, tuple[Expr, ...]]
    joint: tuple[Expr, ...]


@dataclass(frozen=True)
class SequenceQuery:
    components: tuple[SequenceComponent, ...]
    clauses: tuple[Clause, ...]
    window: int
    threshold: float
    defaults: dict[str, dict[str, Expr]] = field(default_factory=dict)
    gaps: dict[str, GapSpec] = field(default_factory=dict)
    kind: str = field(default="sequence", init=False)

    @property
    def variables(self) -> tuple[str, ...]:
        return tuple(c.var for c in self.components)

    @property
    def sources(self) -> tuple[SequenceComponent, ...]:
        """The query's sources in query order, each with its stream and position."""
        return self.components

    @property
    def positives(self) -> tuple[int, ...]:
        """Indices of the positive components, in query order."""
        return tuple(k for k, c in enumerate(self.components) if not c.negated)


def _push_not(expr: Expr, negate: bool) -> Expr:
    """``expr`` (negated if asked) with NOT moved onto literals (De Morgan).

    Exact under :func:`~penumbra.query.ast.evaluate`, where a condition holds only when
    its value is True, so NOT(a AND b) and NOT a OR NOT b agree even on unknown values.
    """
    if isinstance(expr, Not):
        return _push_not(expr.operand, not negate)
    if isinstance(expr, Bool):
        op = {"and": "or", "or": "and"}[expr.op] if negate else expr.op
        return Bool(op, tuple(_push_not(e, negate) for e in expr.operands), line=expr.line, column=expr.column)
    return Not(expr, line=expr.line, column=expr.column) if negate else expr


def _dnf(expr: Expr) -> list[list[Expr]]:
    """The clauses of ``expr`` in disjunctive normal form; more than :data:`MAX_CLAUSES` is
    an error, found before any product is expanded (the expansion grows exponentially)."""
    if isinstance(expr, Bool) and expr.op == "or":
        clauses = [clause for operand in expr.operands for clause in _dnf(operand)]
    elif isinstance(expr, Bool):
        parts = [_dnf(operand) for operand in expr.operands]
        if math.prod(len(p) for p in parts) > MAX_CLAUSES:
            raise QueryError.at(expr, f"WHERE expands to more than {MAX_CLAUSES} clauses in disjunctive normal form")
        clauses = [list(itertools.chain.from_iterable(chosen)) for chosen in itertools.product(*parts)]
    else:
        clauses = [[expr]]
    if len(clauses) > MAX_CLAUSES:
        raise QueryError.at(expr, f"WHERE expands to more than {MAX_CLAUSES} clauses in disjunctive normal form")
    return clauses


def disjunctive_normal_form(expr: Expr | None) -> list[list[Expr]]:
    """The conjunctive clauses whose OR is ``expr`` (section 2.2); ``[[]]`` for no condition."""
    return [[]] if expr is None else _dnf(_push_not(expr, False))


def _check_literal(literal: Expr, components: dict[str, SequenceComponent]) -> set[str]:
    check_evaluable(literal, " in WHERE")
    used = variables_of(literal)
    for attr in attrs_of(literal):
        if attr.var not in components:
            raise QueryError.at(attr, f"unknown variable {attr.var!r} (the components are "
                                f"{', '.join(components)})")
    negatives = sorted(v for v in used if components[v].negated)
    if len(negatives) > 1:
        raise QueryError.at(literal, f"a condition may involve one negative component, this one "
                            f"involves {', '.join(negatives)}")
    return used


def _clauses(condition: Expr | None, components: dict[str, SequenceComponent]) -> tuple[Clause, ...]:
    out = []
    for literals in disjunctive_normal_form(condition):
        trivial: dict[str, list[Expr]] = {}
        joint: list[Expr] = []
        holds = True
        for literal in literals:
            used = _check_literal(literal, components)
            if not used:
                holds = holds and evaluate(literal, {}) is True
            elif len(used) == 1:
                trivial.setdefault(used.pop(), []).append(literal)
            else:
                joint.append(literal)
        if holds:
            out.append(Clause({var: tuple(terms) for var, terms in trivial.items()}, tuple(joint)))
    if not out:
        raise QueryError.at(condition, "the WHERE condition can never hold")
    return tuple(out)


def _defaults(items: list[Expr], components: dict[str, SequenceComponent]) -> dict[str, dict[str, Expr]]:
    out: dict[str, dict[str, Expr]] = {}
    targets: dict[tuple[str, str], Attr] = {}
    for item in items:
        if not (isinstance(item, Compare) and item.op == "=" and isinstance(item.left, Attr)):
            raise QueryError.at(item, "a default is written var.attribute = value")
        target = item.left
        if target.var not in components:
            raise QueryError.at(target, f"unknown variable {target.var!r}")
        if components[target.var].negated:
            raise QueryError.at(target, f"{target.var!r} is negative: only a missed positive component "
                                "takes default values")
        if target.name in out.get(target.var, {}):
            raise QueryError.at(target, f"{target.var}.{target.name} has two defaults")
        for attr in attrs_of(item.right):
            if attr.var not in components or components[attr.var].negated:
                raise QueryError.at(attr, f"a default may refer to positive components only, not {attr.var!r}")
        _check_literal(item.right, components)
        out.setdefault(target.var, {})[target.name] = item.right
        targets[target.var, target.name] = target
    _refuse_cycles(out, targets)
    return out


def _refuse_cycles(defaults: dict[str, dict[str, Expr]], targets: dict[tuple[str, str], Attr]) -> None:
    """A default that reaches itself through others (``a.k = a.k``, or ``a.k = b.k`` and
    ``b.k = a.k``) gives no value when those components are missed together: refused,
    at the first default of the cycle."""
    names = {(var, name): expr for var, given in defaults.items() for name, expr in given.items()}
    done: set[tuple[str, str]] = set()

    def visit(node: tuple[str, str], path: list[tuple[str, str]]) -> None:
        if node in path:
            cycle = path[path.index(node):] + [node]
            raise QueryError.at(targets[cycle[0]], "DEFAULT " + " -> ".join(f"{v}.{n}" for v, n in cycle)
                                + " refers to itself: a missed component would have no value")
        if node in done:
            return
        for attr in attrs_of(names[node]):
            if (attr.var, attr.name) in names:
                visit((attr.var, attr.name), path + [node])
        done.add(node)

    for node in names:
        visit(node, [])


def _gap(item: Expr, components: dict[str, SequenceComponent], first_positive: str) -> GapSpec:
    if not (isinstance(item, Compare) and item.op == "=" and isinstance(item.left, Var)
            and isinstance(item.right, Call)):
        raise QueryError.at(item, "a gap density is written var = family(args), e.g. z = exponential(40)")
    var, call = item.left.name, item.right
    if var not in components:
        raise QueryError.at(item.left, f"unknown variable {var!r}")
    if var == first_positive:
        raise QueryError.at(item.left, f"{var!r} is the first positive component: no gap precedes it")
    family = call.name.lower()
    if family not in GAP_FAMILIES:
        raise QueryError.at(call, f"unknown gap density {call.name!r} (one of: {', '.join(GAP_FAMILIES)})")
    params = []
    for arg in call.args:
        value = arg.value if isinstance(arg, Const) else None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise QueryError.at(arg, f"{family}(...) takes numbers")
        params.append(float(value))
    arity = GAP_FAMILIES[family]
    if (arity is None and len(params) < 2) or (arity is not None and len(params) != arity):
        expected = "a bin width and one or more weights" if arity is None else f"{arity} argument(s)"
        raise QueryError.at(call, f"{family}(...) takes {expected}, got {len(params)}")
    _check_gap_params(family, params, call)
    return GapSpec(var, family, tuple(params))


def _check_gap_params(family: str, params: list[float], call: Call) -> None:
    problem = gap_problem(family, params)
    if problem:
        raise QueryError.at(call, problem)


def _check_gap_in_window(spec: GapSpec, window: int, call: Call) -> None:
    """The density puts mass on some gap inside the window (else no match could be scored)."""
    try:
        gap_pmf(spec.family, spec.params, window)
    except ValueError as error:
        raise QueryError.at(call, str(error)) from None


def _window(duration) -> int:
    seconds = duration.seconds()
    if seconds > MAX_WINDOW:
        raise QueryError.at(duration, f"WITHIN {duration} is too long: at most {MAX_WINDOW:,} time units "
                            "(the scoring tables hold one entry per time unit)")
    if seconds != round(seconds) or seconds < 1:
        raise QueryError.at(duration, f"WITHIN needs a whole number of time units >= 1, got {seconds:g}")
    return int(round(seconds))


@v_args(meta=True)
class SequenceBuilder(ExprBuilder):
    def sequence_component(self, meta, children):
        negation, stream, var = children
        return SequenceComponent(str(stream), str(var), negation is not None, stream.line, stream.column)

    def sequence_defaults(self, meta, children):
        return ("defaults", children)

    def sequence_gaps(self, meta, children):
        return ("gaps", children)

    def sequence_query(self, meta, children):
        *parts, condition, defaults, gaps, duration, threshold = children
        components: dict[str, SequenceComponent] = {}
        for component in parts:
            if component.var in components:
                raise QueryError(f"variable {component.var!r} names two components", component.line, component.column)
            components[component.var] = component
        positives = [c for c in parts if not c.negated]
        if not positives:
            raise QueryError.at(meta, "SEQUENCE needs at least one positive component")
        if not 0 < threshold.value <= 1:
            raise QueryError.at(threshold, f"the threshold must be in (0, 1], got {threshold.value!r}")
        gap_items = gaps[1] if gaps else []
        gap_specs = [_gap(item, components, positives[0].var) for item in gap_items]
        if len({g.var for g in gap_specs}) != len(gap_specs):
            raise QueryError.at(gap_items[0], "a component has two GAP densities")
        window = _window(duration)
        if len(positives) > 1 and window < 2:
            raise QueryError.at(duration, f"WITHIN {window} leaves no gap between two positive components "
                                "(at least 2 time units)")
        for item, spec in zip(gap_items, gap_specs):
            _check_gap_in_window(spec, window, item.right)
        return SequenceQuery(
            components=tuple(parts),
            clauses=_clauses(condition, components),
            window=window,
            threshold=float(threshold.value),
            defaults=_defaults(defaults[1] if defaults else [], components),
            gaps={g.var: g for g in gap_specs},
        )
