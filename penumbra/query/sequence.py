"""The lossy-CEP form of the query language (AYAC)."""

from __future__ import annotations

from lark import v_args

from .ast import ExprBuilder
from .errors import QueryError

__all__ = ["SequenceBuilder"]


@v_args(meta=True)
class SequenceBuilder(ExprBuilder):
    def sequence_query(self, meta, children):
        raise QueryError.at(meta, "SEQUENCE queries are not supported yet")
