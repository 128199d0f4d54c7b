"""The streams a query reads, checked against the streams a deployment has registered."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from .errors import QueryError

__all__ = ["AttributeWarning", "check_registered", "unseen_attributes"]

#: Registered names listed in an error, at most.
LISTED = 12


def check_registered(query, streams: Mapping[str, Any]) -> None:
    """Refuse a query (any form) that a deployment could not run with bounded state: a
    :class:`QueryError` at the first stream name that is not among ``streams`` (the
    registered :class:`~penumbra.events.StreamParams` by name; names compare
    case-insensitively, as in queries), with the closest registered name, or, for a join,
    at a stream that bounds the length of its timestamps neither by ``pi`` nor by
    templates (its partner's events could never be let go)."""
    names = sorted(streams, key=str.casefold)
    known = {name.casefold(): name for name in names}
    for source in query.sources:
        if source.stream.casefold() in known:
            continue
        close = difflib.get_close_matches(source.stream.casefold(), list(known), n=1, cutoff=0.75)
        hint = f"; did you mean {known[close[0]]!r}?" if close else ""
        listed = ", ".join(names[:LISTED]) + (f" and {len(names) - LISTED} more" if len(names) > LISTED else "")
        raise QueryError(f"stream {source.stream!r} is not registered (registered: {listed or 'none'}){hint}",
                         source.line, source.column)
    if query.kind != "join":
        return
    for source in query.sources:
        if getattr(streams[source.stream], "longest", None) is None:
            raise QueryError(f"stream {source.stream!r} declares neither pi (the longest timestamp it carries) "
                             "nor templates, so a join could never let go of its partner's events: declare its "
                             "pi with PUT /api/streams/{name}", source.line, source.column)


#: what the query's text holds, in order: a string, a comment, a ``var.attr`` reference
_TOKENS = re.compile(r"""'[^'\n]*'|"[^"\n]*"|--[^\n]*|(?<![\w.])([A-Za-z_]\w*)\.([A-Za-z_]\w*)""")


class AttributeWarning(NamedTuple):
    message: str
    line: int
    column: int


def unseen_attributes(text: str, query, seen: Mapping[str, Iterable[str]]) -> list[AttributeWarning]:
    """Each ``var.attr`` of the query (outside strings and comments) whose stream's events
    have carried attributes, none of them ``attr``: a likely typo, said with its line and
    column (1-based). ``seen`` maps a stream (case-folded) to the attribute names its events
    carried; a stream with none seen yet is not judged."""
    streams = {source.var: source.stream for source in query.sources}
    known = {stream.casefold(): set(names) for stream, names in seen.items()}
    out = []
    for found in _TOKENS.finditer(text):
        var, attr = found.group(1), found.group(2)
        stream = streams.get(var) if var else None
        names = known.get(stream.casefold()) if stream else None
        if not names or attr in names:
            continue
        line = text.count("\n", 0, found.start()) + 1
        column = found.start() - (text.rfind("\n", 0, found.start()) + 1) + 1
        close = difflib.get_close_matches(attr, sorted(names), n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]!r}?" if close else f" (it has {', '.join(sorted(names)[:LISTED])})"
        out.append(AttributeWarning(f"no event of {stream!r} has carried an attribute {attr!r} so far{hint}",
                                    line, column))
    return out
