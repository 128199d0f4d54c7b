"""The pattern form of the query language (SASE over imprecise timestamps)."""

from __future__ import annotations

from lark import v_args

from .ast import ExprBuilder
from .errors import QueryError

__all__ = ["PatternBuilder"]


@v_args(meta=True)
class PatternBuilder(ExprBuilder):
    def pattern_query(self, meta, children):
        raise QueryError.at(meta, "pattern queries are not supported yet")
