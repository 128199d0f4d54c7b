"""Expression trees of the query language, shared by every query form.

Nodes keep the ``line`` and ``column`` where they start, so a later check (an unknown
variable, a wrong type) can point at the text. :func:`evaluate` gives an expression's
value for one binding of variables to events' attributes; a missing attribute or a
comparison of incompatible values is ``None`` (unknown, as SQL's NULL, also under
``NOT``), and a condition holds only where it is True.

>>> from penumbra.query import parse_expression
>>> evaluate(parse_expression("a.value > 95 AND a.node = b.node"),
...          {"a": {"value": 97, "node": "n1"}, "b": {"node": "n1"}})
True
"""

from __future__ import annotations

import math
import operator
import sys
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Iterable, Mapping

from lark import Token, Transformer, v_args

from .errors import QueryError

__all__ = ["Attr", "BinOp", "Bool", "Call", "Compare", "Const", "Duration", "Expr", "ExprBuilder", "LARGEST_INTEGER",
           "MAX_DEPTH", "Not", "Unary", "Var", "attrs_of", "check_evaluable", "conjuncts", "equality_classes",
           "evaluate", "unevaluable", "variables_of"]


#: How deep an expression may nest (parentheses, NOT, arithmetic inside comparisons; the
#: operands of one AND or OR count as one level): what people write stays far below, and
#: :func:`evaluate` and the query forms' checks recurse once per level.
MAX_DEPTH = 64


@dataclass(frozen=True)
class Expr:
    line: int | None = field(default=None, compare=False, kw_only=True)
    column: int | None = field(default=None, compare=False, kw_only=True)
    depth: int = field(default=1, init=False, compare=False, repr=False)

    def __post_init__(self):
        depth = 1 + max((child.depth for child in _children(self)), default=0)
        if depth > MAX_DEPTH:
            raise QueryError.at(self, f"the expression nests too deeply (more than {MAX_DEPTH} levels)")
        object.__setattr__(self, "depth", depth)


@dataclass(frozen=True)
class Const(Expr):
    value: Any


@dataclass(frozen=True)
class Attr(Expr):
    """``var.name``: attribute ``name`` of the event bound to ``var``."""

    var: str
    name: str


@dataclass(frozen=True)
class Var(Expr):
    """A bare variable name, as in ``WINDOW(A, B)`` or ``skip_till_any_match(a, b, c)``."""

    name: str


@dataclass(frozen=True)
class Unary(Expr):
    op: str
    operand: Expr


@dataclass(frozen=True)
class BinOp(Expr):
    op: str
    left: Expr
    right: Expr


@dataclass(frozen=True)
class Compare(Expr):
    op: str
    left: Expr
    right: Expr


@dataclass(frozen=True)
class Bool(Expr):
    """``AND`` / ``OR`` of two or more operands."""

    op: str
    operands: tuple[Expr, ...]


@dataclass(frozen=True)
class Not(Expr):
    operand: Expr


@dataclass(frozen=True)
class Call(Expr):
    """``name(args)``; the query form decides what a call means (e.g. a selection strategy)."""

    name: str
    args: tuple[Expr, ...]


@dataclass(frozen=True)
class Duration(Expr):
    """``WITHIN 15 s``: a number and an optional unit as written."""

    value: float
    unit: str | None

    SECONDS = {"ms": 0.001, "millisecond": 0.001, "milliseconds": 0.001,
               "s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0,
               "min": 60.0, "mins": 60.0, "minute": 60.0, "minutes": 60.0,
               "h": 3600.0, "hour": 3600.0, "hours": 3600.0}

    def seconds(self) -> float:
        """The duration in seconds (a bare number counts as seconds): the decimal the
        literal and its unit say, rounded once (``300 ms`` is 0.3, not 300 * 0.001);
        ``inf`` when that is beyond the largest float (``1e308 h``)."""
        factor = self.SECONDS[(self.unit or "s").lower()]
        if factor == 1.0:
            return self.value
        try:
            return float(Fraction(repr(self.value)) * Fraction(repr(factor)))
        except OverflowError:
            return math.inf

    def __str__(self) -> str:
        """As written: ``1e+06 h``, ``150``."""
        return f"{self.value:g} {self.unit}" if self.unit else f"{self.value:g}"


def _pos(meta) -> dict[str, int | None]:
    return {"line": getattr(meta, "line", None), "column": getattr(meta, "column", None)}


#: The widest integer literal: events' integers are 64-bit too (penumbra.events).
LARGEST_INTEGER = 2 ** 63 - 1


def _number(token: Token) -> int | float:
    """A number literal: an integer within 64 bits, or a finite float; else a
    :class:`QueryError` at the literal (never a float overflow or a giant integer later)."""
    text = str(token)
    shown = text if len(text) <= 24 else f"{text[:12]}...{text[-6:]} ({len(text):,} characters)"
    if text.isdigit():
        # the length bound first: Python refuses to convert integers of over 4,300 digits
        if len(text) > 19 or int(text) > LARGEST_INTEGER:
            raise QueryError(f"the integer {shown} is too large (at most {LARGEST_INTEGER:,})", token.line,
                             token.column)
        return int(text)
    value = float(text)
    if not math.isfinite(value):
        raise QueryError(f"the number {shown} is too large (at most {sys.float_info.max:g})", token.line,
                         token.column)
    return value


@v_args(meta=True)
class ExprBuilder(Transformer):
    """Builds :mod:`ast` nodes from the rules of ``common.lark``."""

    def number(self, meta, children):
        return Const(_number(children[0]), **_pos(meta))

    def string(self, meta, children):
        return Const(str(children[0])[1:-1], **_pos(meta))

    def true(self, meta, children):
        return Const(True, **_pos(meta))

    def false(self, meta, children):
        return Const(False, **_pos(meta))

    def attr(self, meta, children):
        return Attr(str(children[0]), str(children[1]), **_pos(meta))

    def var(self, meta, children):
        return Var(str(children[0]), **_pos(meta))

    def call(self, meta, children):
        args = tuple(c for c in children[1:] if c is not None)
        return Call(str(children[0]), args, **_pos(meta))

    def unary(self, meta, children):
        op, operand = children
        if isinstance(operand, Const) and isinstance(operand.value, (int, float)) \
                and not isinstance(operand.value, bool):
            return Const(-operand.value if op == "-" else operand.value, **_pos(meta))
        return Unary(str(op), operand, **_pos(meta))

    def binop(self, meta, children):
        left, op, right = children
        return BinOp(str(op), left, right, **_pos(meta))

    def compare(self, meta, children):
        left, op, right = children
        op = {"==": "=", "<>": "!="}.get(str(op), str(op))
        return Compare(op, left, right, **_pos(meta))

    def _bool(self, op, meta, children):
        operands: list[Expr] = []
        for child in children:
            operands.extend(child.operands if isinstance(child, Bool) and child.op == op else [child])
        return Bool(op, tuple(operands), **_pos(meta))

    def and_(self, meta, children):
        return self._bool("and", meta, children)

    def or_(self, meta, children):
        return self._bool("or", meta, children)

    def not_(self, meta, children):
        return Not(children[0], **_pos(meta))

    def duration(self, meta, children):
        value, unit = children
        return Duration(float(_number(value)), str(unit).lower() if unit is not None else None, **_pos(meta))


def conjuncts(expr: Expr | None) -> list[Expr]:
    """The top-level ``AND`` operands of ``expr`` (``[]`` for no condition)."""
    if expr is None:
        return []
    return list(expr.operands) if isinstance(expr, Bool) and expr.op == "and" else [expr]


def _children(expr: Expr) -> tuple[Expr, ...]:
    if isinstance(expr, (Unary, Not)):
        return (expr.operand,)
    if isinstance(expr, (BinOp, Compare)):
        return (expr.left, expr.right)
    if isinstance(expr, (Bool, Call)):
        return expr.operands if isinstance(expr, Bool) else expr.args
    return ()


def unevaluable(expr: Expr) -> Expr | None:
    """The first node of ``expr``, in reading order, that :func:`evaluate` cannot evaluate
    (a bare variable, a call, a duration), or None."""
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, (Var, Call, Duration)):
            return node
        stack.extend(reversed(_children(node)))
    return None


def check_evaluable(expr: Expr, functions: str = "") -> None:
    """A :class:`QueryError` at the first node of a condition that :func:`evaluate` cannot
    evaluate: what every query form checks before it accepts a condition, so that no
    accepted query fails when its events come. ``functions`` says what the form's calls are."""
    bad = unevaluable(expr)
    if isinstance(bad, Var):
        raise QueryError.at(bad, f"a bare variable {bad.name!r} alone is not a value; write {bad.name}.attribute")
    if isinstance(bad, Call):
        raise QueryError.at(bad, f"unknown function {bad.name!r}{functions}")
    if bad is not None:
        raise QueryError.at(bad, "a duration is not a value in a condition")
    valueless = _valueless_constant(expr)
    if valueless is not None:
        raise QueryError.at(valueless, "this arithmetic has no value whatever the events say (a string and a number, "
                            "or a division by zero): the condition could never hold")


def _valueless_constant(expr: Expr) -> Expr | None:
    """The first arithmetic, in reading order, that has no value whatever the events say:
    of constants alone, or a division by a constant zero."""
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, (BinOp, Unary)) and not attrs_of(node) and evaluate(node, {}) is None:
            return node
        if isinstance(node, BinOp) and node.op in ("/", "%") and not attrs_of(node.right) \
                and _is_number(divisor := evaluate(node.right, {})) and divisor == 0:
            return node
        stack.extend(reversed(_children(node)))
    return None


def attrs_of(expr: Expr) -> list[Attr]:
    """Every attribute reference in ``expr``, in reading order."""
    if isinstance(expr, Attr):
        return [expr]
    return [a for child in _children(expr) for a in attrs_of(child)]


def variables_of(expr: Expr) -> set[str]:
    return {a.var for a in attrs_of(expr)}


def equality_classes(equalities: Iterable[tuple[Attr, Attr]]) -> list[dict[str, list[str]]]:
    """The classes of attributes that equalities ``a.x = b.y`` make equal (union-find),
    each as {variable: its attributes in the class}; SASE partitions state by such a class
    when it covers every component."""
    parent: dict[tuple[str, str], tuple[str, str]] = {}

    def root(node: tuple[str, str]) -> tuple[str, str]:
        while parent.setdefault(node, node) != node:
            node = parent[node]
        return node

    for left, right in equalities:
        parent[root((left.var, left.name))] = root((right.var, right.name))
    classes: dict[tuple[str, str], dict[str, list[str]]] = {}
    for var, name in list(parent):
        classes.setdefault(root((var, name)), {}).setdefault(var, []).append(name)
    return list(classes.values())


_ARITHMETIC = {"+": operator.add, "-": operator.sub, "*": operator.mul,
               "/": operator.truediv, "%": operator.mod}
_COMPARISON = {"=": operator.eq, "!=": operator.ne, "<": operator.lt,
               "<=": operator.le, ">": operator.gt, ">=": operator.ge}


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def evaluate(expr: Expr, bindings: Mapping[str, Mapping[str, Any]]) -> Any:
    """The value of ``expr`` with each variable bound to an event's attributes.

    Unknown attributes, arithmetic on non-numbers, division by zero and ordering of
    values of different types give ``None``, unknown. ``AND``, ``OR`` and ``NOT`` follow
    SQL's three-valued logic (any other value than True or None counts as false): ``NOT``
    of unknown is unknown, so ``NOT (a.v = 1)`` and ``a.v != 1`` both fail where ``a``
    has no ``v``, and a condition holds only where its value is True.
    """
    if isinstance(expr, Const):
        return expr.value
    if isinstance(expr, Attr):
        return bindings.get(expr.var, {}).get(expr.name)
    if isinstance(expr, Bool):
        decisive = expr.op == "or"          # the operand value that decides: True for OR, False for AND
        unknown = False
        for operand in expr.operands:
            value = evaluate(operand, bindings)
            if value is None:
                unknown = True
            elif (value is True) == decisive:
                return decisive
        return None if unknown else not decisive
    if isinstance(expr, Not):
        value = evaluate(expr.operand, bindings)
        return None if value is None else value is not True
    if isinstance(expr, Unary):
        value = evaluate(expr.operand, bindings)
        return (-value if expr.op == "-" else value) if _is_number(value) else None
    if isinstance(expr, BinOp):
        left, right = evaluate(expr.left, bindings), evaluate(expr.right, bindings)
        if expr.op == "+" and isinstance(left, str) and isinstance(right, str):
            return left + right
        if not (_is_number(left) and _is_number(right)):
            return None
        try:
            return _ARITHMETIC[expr.op](left, right)
        except (ZeroDivisionError, OverflowError):  # an integer too large for a float
            return None
    if isinstance(expr, Compare):
        left, right = evaluate(expr.left, bindings), evaluate(expr.right, bindings)
        if left is None or right is None:
            return None
        if expr.op in ("=", "!="):
            # JSON's kinds: true is not 1 (as a join's key and an event's identity read them)
            equal = (type(left) is bool) == (type(right) is bool) and left == right
            return equal if expr.op == "=" else not equal
        if _is_number(left) and _is_number(right) or (isinstance(left, str) and isinstance(right, str)):
            return _COMPARISON[expr.op](left, right)
        return None
    raise QueryError.at(expr, f"{type(expr).__name__} cannot be evaluated here")
