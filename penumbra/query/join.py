"""The join form of the query language (PTJoin paper, section 3)::

    SELECT * FROM SEISMIC A, ACOUSTIC B
    WHERE WINDOW(A, B) = 2000 AND A.region = B.region
    WITH THRESHOLD 0.6 USING lazy_lookup

The condition is ``P(|X_A - X_B| <= d) >= threshold``. ``WHERE`` holds exactly one
``WINDOW(A, B) = d``; its other conjuncts are equalities ``A.x = B.y`` (which partition
the buffers) and conditions on one side only (which filter that stream's events).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lark import v_args

from .ast import Attr, Call, Compare, Const, Expr, ExprBuilder, Var, check_evaluable, conjuncts, unevaluable, variables_of
from .errors import QueryError

__all__ = ["JOIN_STRATEGIES", "JoinBuilder", "JoinQuery", "Source"]

#: The interval paper's five strategies; every one returns the same matches.
JOIN_STRATEGIES = ("simple", "ssort", "eager", "lazy", "lazy_lookup")


@dataclass(frozen=True)
class Source:
    stream: str
    var: str
    line: int | None = field(default=None, compare=False)
    column: int | None = field(default=None, compare=False)


@dataclass(frozen=True)
class JoinQuery:
    left: Source
    right: Source
    window: float
    threshold: float
    keys: tuple[tuple[str, str], ...] = ()
    filters: dict[str, tuple[Expr, ...]] = field(default_factory=dict)
    strategy: str | None = None
    kind: str = field(default="join", init=False)

    @property
    def variables(self) -> tuple[str, str]:
        return self.left.var, self.right.var

    @property
    def sources(self) -> tuple[Source, Source]:
        """The query's sources in query order, each with its stream and position."""
        return self.left, self.right


def _window(expr: Compare, left: str, right: str) -> float:
    """``d`` from ``WINDOW(left, right) = d`` (the variables in either order)."""
    call = expr.left
    variables = sorted(a.name if isinstance(a, Var) else "" for a in call.args)
    if variables != sorted([left, right]):
        raise QueryError.at(call, f"WINDOW takes the two join variables: WINDOW({left}, {right})")
    if expr.op != "=":
        raise QueryError.at(expr, f"WINDOW(...) takes '=', got {expr.op!r}")
    value = expr.right.value if isinstance(expr.right, Const) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise QueryError.at(expr.right, "the window must be a number")
    if value < 0:
        raise QueryError.at(expr.right, f"the window must be >= 0, got {value!r}")
    return float(value)


@v_args(meta=True)
class JoinBuilder(ExprBuilder):
    def join_source(self, meta, children):
        stream = children[0]
        return Source(str(stream), str(children[1]), stream.line, stream.column)

    def join_query(self, meta, children):
        left, right, condition, threshold, strategy = children
        if left.var == right.var:
            raise QueryError(f"the two sources need different variables, both are {left.var!r}",
                             right.line, right.column)
        window = None
        keys: list[tuple[str, str]] = []
        filters: dict[str, list[Expr]] = {left.var: [], right.var: []}
        for term in conjuncts(condition):
            if isinstance(term, Compare) and isinstance(term.left, Call) \
                    and term.left.name.casefold() == "window":
                if window is not None:
                    raise QueryError.at(term, "WINDOW(...) is given twice")
                window = _window(term, left.var, right.var)
                continue
            nested = unevaluable(term)
            if isinstance(nested, Call) and nested.name.casefold() == "window":
                raise QueryError.at(nested, f"WINDOW({left.var}, {right.var}) = d is a condition of its own, "
                                    "joined to the others by AND (not inside OR, NOT or an expression)")
            check_evaluable(term, f" (a join's WHERE holds WINDOW({left.var}, {right.var}) = d, equalities "
                                  f"{left.var}.x = {right.var}.y and conditions on one source)")
            used = variables_of(term)
            unknown = used - {left.var, right.var}
            if unknown:
                raise QueryError.at(term, f"unknown variable {sorted(unknown)[0]!r} "
                                    f"(the sources are {left.var} and {right.var})")
            if len(used) == 1:
                filters[used.pop()].append(term)
            elif (isinstance(term, Compare) and term.op == "=" and isinstance(term.left, Attr)
                  and isinstance(term.right, Attr) and term.left.var != term.right.var):
                pair = (term.left, term.right) if term.left.var == left.var else (term.right, term.left)
                keys.append((pair[0].name, pair[1].name))
            elif used:
                raise QueryError.at(term, "a condition on both sources must be an equality "
                                    f"{left.var}.x = {right.var}.y")
            else:
                raise QueryError.at(term, "a condition must refer to a source's attribute")
        if window is None:
            raise QueryError.at(meta, f"WHERE needs WINDOW({left.var}, {right.var}) = d")
        if not 0 < threshold.value <= 1:
            raise QueryError.at(threshold, f"the threshold must be in (0, 1], got {threshold.value!r}")
        if strategy is not None and str(strategy).lower() not in JOIN_STRATEGIES:
            raise QueryError(f"unknown strategy {str(strategy)!r} (one of: {', '.join(JOIN_STRATEGIES)})",
                             strategy.line, strategy.column)
        return JoinQuery(left, right, window, float(threshold.value), tuple(keys),
                         {var: tuple(terms) for var, terms in filters.items() if terms},
                         str(strategy).lower() if strategy is not None else None)
