"""Cursors: where a client stands in a feed, as the stream id of the last entry it got
(docs/redis.md), and the JSON encoding of the messages that carry them."""

from __future__ import annotations

import re

from contract.entries import encode as entry_json

__all__ = ["ZERO", "Cursor", "encode", "entry_cursor", "format_cursor", "parse_cursor"]

_CURSOR = re.compile(r"^(\d{1,20})(?:-(\d{1,20}))?$")
_LIMIT = 2 ** 64

Cursor = tuple[int, int]
ZERO: Cursor = (0, 0)


def parse_cursor(text: str) -> Cursor:
    """A stream id (``"1700000000000-3"``, or ``"1700000000000"`` for ``-0``) as a pair.

    >>> parse_cursor("17-3") > parse_cursor("17")
    True
    """
    found = _CURSOR.match(text) if isinstance(text, str) else None
    if not found or int(found.group(1)) >= _LIMIT or int(found.group(2) or 0) >= _LIMIT:
        raise ValueError(f"{text!r} is not a stream id (milliseconds-sequence)")
    return int(found.group(1)), int(found.group(2) or 0)


def format_cursor(cursor: Cursor) -> str:
    return f"{cursor[0]}-{cursor[1]}"


def entry_cursor(entry_id: bytes) -> Cursor:
    ms, _, seq = entry_id.partition(b"-")
    return int(ms), int(seq or 0)


def encode(message: dict) -> str:
    """A message's JSON text (through orjson; what it cannot write, a lone surrogate in an
    attribute or a key, or an integer beyond 64 bits, through the json module)."""
    return entry_json(message).decode()
