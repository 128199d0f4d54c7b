"""From a query's text to a running operator."""

from __future__ import annotations

from .events import Streams
from .keygroups import KeyGroup
from .operator import Operator
from .query import parse

__all__ = ["build_operator", "compile_query", "operator_class"]


def operator_class(kind: str) -> type[Operator]:
    """The operator class of a query form (``join``, ``pattern`` or ``sequence``)."""
    if kind == "join":
        from .joins import JoinOperator as cls
    elif kind == "pattern":
        from .patterns import PatternOperator as cls
    elif kind == "sequence":
        from .lossy import LossyOperator as cls
    else:
        raise ValueError(f"unknown query kind {kind!r}")
    return cls


def build_operator(query, streams: Streams, key_group: KeyGroup | None = None) -> Operator:
    """The operator that evaluates a parsed query over streams with these parameters
    (for one key group of it when ``key_group`` is given)."""
    operator = operator_class(query.kind)(query, streams)
    operator.key_group = key_group
    return operator


def compile_query(text: str, streams: Streams, key_group: KeyGroup | None = None) -> Operator:
    """Parse ``text`` and build its operator; raises QueryError or ValidationError on bad input."""
    return build_operator(parse(text), streams, key_group)
