"""One-source conditions over a block of events at once: the values of each attribute a
condition reads become a numpy column, and numeric comparisons and arithmetic run on the
columns, deciding exactly what :func:`~penumbra.query.ast.evaluate` decides event by event
(anything else, strings or integers beyond 2**53 read or computed, falls back to it for
the block)."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from .ast import Attr, BinOp, Bool, Compare, Const, Expr, Not, Unary, attrs_of, evaluate

__all__ = ["block_filter"]

#: Integers up to this are exact as floats.
_EXACT = 2 ** 53


class _PerEvent(Exception):
    """The block's values or the condition need the per-event evaluator."""


def block_filter(terms: list[Expr], variable: str, events: list[Mapping[str, Any]],
                 columns: dict | None = None) -> np.ndarray:
    """Which events (their attributes) satisfy every one of ``terms`` (on ``variable`` alone), exactly as
    :func:`~penumbra.query.ast.evaluate` decides; numeric conditions run on numpy arrays.
    ``columns``, when given, keeps the attribute columns read from ``events`` for the next
    call over the same events (many conditions over one block read each attribute once)."""
    columns = {} if columns is None else columns
    try:
        for term in terms:
            for attr in attrs_of(term):
                if attr.name not in columns:
                    try:
                        columns[attr.name] = _numeric_column([e.get(attr.name) for e in events])
                    except _PerEvent:
                        columns[attr.name] = None
                if columns[attr.name] is None:
                    raise _PerEvent
        with np.errstate(all="ignore"):
            keep = np.ones(len(events), dtype=bool)
            for term in terms:
                keep &= _truth(term, columns)
        return keep
    except _PerEvent:
        return np.array([all(evaluate(t, {variable: e}) is True for t in terms) for e in events],
                        dtype=bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _numeric_column(values: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    """Values and a mask of present ones; any non-numeric value sends the block per event."""
    kinds = set(map(type, values))
    if not kinds <= {int, float, type(None)}:
        raise _PerEvent
    if int in kinds and any(type(v) is int and abs(v) > _EXACT for v in values):
        raise _PerEvent   # beyond 2**53 a float is not the integer
    if type(None) not in kinds:
        return np.array(values, dtype=np.float64), np.ones(len(values), dtype=bool)
    present = np.array([v is not None for v in values], dtype=bool)
    return np.array([v if v is not None else np.nan for v in values], dtype=np.float64), present


_COMPARE = {"=": np.equal, "!=": np.not_equal, "<": np.less, "<=": np.less_equal,
            ">": np.greater, ">=": np.greater_equal}
_ARITHMETIC = {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.true_divide, "%": np.mod}


def _truth(expr: Expr, columns) -> np.ndarray:
    return _logic(expr, columns)[0]


def _logic(expr: Expr, columns) -> tuple[np.ndarray, np.ndarray]:
    """Where ``expr`` is True and where it is False (elsewhere unknown: SQL's logic, as
    :func:`~penumbra.query.ast.evaluate`)."""
    if isinstance(expr, Compare):
        left, left_ok = _value(expr.left, columns)
        right, right_ok = _value(expr.right, columns)
        known = left_ok & right_ok
        holds = _COMPARE[expr.op](left, right)
        return known & holds, known & ~holds
    if isinstance(expr, Bool):
        # a comparison of constants is one truth value for the whole block: broadcast it
        trues, falses = (np.broadcast_arrays(*side) for side in zip(*(_logic(e, columns) for e in expr.operands)))
        if expr.op == "and":
            return np.logical_and.reduce(trues), np.logical_or.reduce(falses)
        return np.logical_or.reduce(trues), np.logical_and.reduce(falses)
    if isinstance(expr, Not):
        true, false = _logic(expr.operand, columns)
        return false, true
    raise _PerEvent


def _value(expr: Expr, columns) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(expr, Const) and _is_number(expr.value) and abs(expr.value) <= _EXACT:
        return np.float64(expr.value), np.True_
    if isinstance(expr, Attr):
        return columns[expr.name]
    if isinstance(expr, Unary):
        value, ok = _value(expr.operand, columns)
        return (-value if expr.op == "-" else value), ok
    if isinstance(expr, BinOp):
        left, left_ok = _value(expr.left, columns)
        right, right_ok = _value(expr.right, columns)
        ok = left_ok & right_ok
        if expr.op in ("/", "%"):
            ok = ok & (right != 0)
        result = _ARITHMETIC[expr.op](left, right)
        if expr.op != "/" and np.any(np.abs(np.where(ok, result, 0.0)) > _EXACT):
            raise _PerEvent   # integers beyond 2**53: the evaluator's are exact, a float's are not
        return result, ok
    raise _PerEvent
