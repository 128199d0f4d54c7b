"""One parser for the whole query language.

The grammar is assembled from ``common.lark`` (expressions) and one file per query
form (``join.lark``, ``pattern.lark``, ``sequence.lark``); each form's builder turns
its parse tree into a query object. Every error carries a line and a column.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from lark import Lark, Token, Transformer_NonRecursive, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken, VisitError

from .errors import QueryError
from .join import JoinBuilder
from .pattern import PatternBuilder
from .sequence import SequenceBuilder

__all__ = ["parse", "parse_expression"]

_FORMS = ("join", "pattern", "sequence")
_HERE = Path(__file__).parent


@v_args(meta=True)
class _QueryBuilder(Transformer_NonRecursive, JoinBuilder, PatternBuilder, SequenceBuilder):
    """Builds a query from its parse tree without recursion: a chain of thousands of ``AND``
    is as deep a tree as it is long (the expressions it builds are flat, and no deeper than
    :data:`~penumbra.query.ast.MAX_DEPTH`)."""

    def start(self, meta, children):
        return children[0]

    def expression(self, meta, children):
        return children[0]


@lru_cache(maxsize=None)
def _parser(start: str) -> Lark:
    text = "\n".join((_HERE / f"{name}.lark").read_text() for name in ("common", *_FORMS))
    text += "\nstart: " + " | ".join(f"{form}_query" for form in _FORMS) + "\nexpression: expr\n"
    return Lark(text, start=start, parser="lalr", propagate_positions=True)


# Terminal names shown to a person as what they would type.
_READABLE = {"NAME": "a name", "NUMBER": "a number", "STRING": "a string", "COMP_OP": "a comparison",
             "ADD_OP": "'+' or '-'", "MUL_OP": "'*', '/' or '%'", "TIME_UNIT": "a time unit",
             "LPAR": "'('", "RPAR": "')'", "COMMA": "','", "DOT": "'.'", "STAR": "'*'",
             "NEGATION": "'!'", "$END": "end of query"}


def _expected(error: UnexpectedInput) -> str:
    names = getattr(error, "accepts", None) or getattr(error, "expected", None) or ()
    shown = sorted({_READABLE.get(n, n.strip("_").replace("__ANON", "").upper() if n.isupper() else n)
                    for n in names if not n.startswith("__ANON")})
    if not shown:
        return ""
    if len(shown) > 8:
        shown = shown[:8] + ["..."]
    return "; expected " + ", ".join(shown)


def _end(text: str) -> tuple[int, int]:
    """The line and column just past the last non-blank character of ``text``, counted as
    lark counts its tokens' positions: only a newline ends a line (not a carriage return, a
    form feed or U+2028, which str.splitlines also takes)."""
    text = text.rstrip()
    return text.count("\n") + 1, len(text) - text.rfind("\n")


def _run(text: str, start: str):
    if not isinstance(text, str) or not text.strip():
        raise QueryError("the query is empty", 1, 1)
    try:
        tree = _parser(start).parse(text)
        return _QueryBuilder().transform(tree)
    except VisitError as error:
        if isinstance(error.orig_exc, QueryError):
            raise error.orig_exc from None
        raise
    except UnexpectedEOF as error:
        raise QueryError(f"the query ends too early{_expected(error)}", *_end(text)) from None
    except UnexpectedToken as error:
        token: Token = error.token
        if token.type == "$END":
            raise QueryError(f"the query ends too early{_expected(error)}", *_end(text)) from None
        raise QueryError(f"unexpected {str(token)!r}{_expected(error)}", error.line, error.column) from None
    except UnexpectedCharacters as error:
        char = text[error.pos_in_stream] if error.pos_in_stream < len(text) else ""
        raise QueryError(f"unexpected character {char!r}{_expected(error)}",
                         error.line, error.column) from None


def parse(text: str):
    """Parse a query of any form into its query object, or raise :class:`QueryError`."""
    return _run(text, "start")


def parse_expression(text: str):
    """Parse a bare expression (a ``WHERE`` condition) into an :mod:`~penumbra.query.ast` tree."""
    return _run(text, "expression")
