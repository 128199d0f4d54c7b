"""From a query's text to a running operator."""

from __future__ import annotations

from .events import Streams
from .operator import Operator
from .query import parse

__all__ = ["build_operator", "compile_query"]


def build_operator(query, streams: Streams) -> Operator:
    """The operator that evaluates a parsed query over streams with these parameters."""
    if query.kind == "join":
        from .joins import build_operator as build
    elif query.kind == "pattern":
        from .patterns import build_operator as build
    elif query.kind == "sequence":
        from .lossy import build_operator as build
    else:
        raise ValueError(f"unknown query kind {query.kind!r}")
    return build(query, streams)


def compile_query(text: str, streams: Streams) -> Operator:
    """Parse ``text`` and build its operator; raises QueryError or ValidationError on bad input."""
    return build_operator(parse(text), streams)
