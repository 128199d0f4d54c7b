"""The probabilistic timing join: PTJoin partitions and the interval paper's strategies
(docs/joins.md, "Code", says which module holds what)."""

from __future__ import annotations

from ..events import Streams
from ..query import JoinQuery
from .matches import JoinMatches
from .operator import DEFAULT_FLOOR, JoinOperator
from .strategies import STRATEGIES

__all__ = ["DEFAULT_FLOOR", "JoinMatches", "JoinOperator", "STRATEGIES", "build_operator"]


def build_operator(query: JoinQuery, streams: Streams, **options) -> JoinOperator:
    return JoinOperator(query, streams, **options)
