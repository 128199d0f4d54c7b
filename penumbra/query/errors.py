"""Query errors carry the line and column of the offending text."""

from __future__ import annotations

from ..errors import MAX_MESSAGE_CHARS, PenumbraError, cut

__all__ = ["QueryError"]


class QueryError(PenumbraError):
    """A query that does not parse or does not make sense; ``line`` and ``column`` are 1-based."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None):
        self.message = message = cut(message, MAX_MESSAGE_CHARS)
        self.line = line
        self.column = column
        where = f"line {line}, column {column}: " if line is not None else ""
        super().__init__(f"{where}{message}")

    @classmethod
    def at(cls, node, message: str) -> QueryError:
        """An error located at a parse-tree node or an AST node with a ``meta`` position."""
        meta = getattr(node, "meta", node)
        return cls(message, getattr(meta, "line", None), getattr(meta, "column", None))
