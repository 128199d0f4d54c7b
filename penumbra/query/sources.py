"""The streams a query reads, checked against the streams a deployment has registered."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from .errors import QueryError

__all__ = ["check_registered"]

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
