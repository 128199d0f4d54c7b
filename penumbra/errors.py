"""Errors for bad input: each names what is wrong and where, and quotes the input only in part."""

from __future__ import annotations

__all__ = ["MAX_FIELD_CHARS", "MAX_MESSAGE_CHARS", "PenumbraError", "ValidationError", "cut"]

#: The longest field path and message an error keeps: what they quote of the input is cut,
#: so that an error (an answer's body, a dead letter's reason) never repeats a huge input.
MAX_FIELD_CHARS = 256
MAX_MESSAGE_CHARS = 1024


def cut(text: str, limit: int) -> str:
    """``text`` at most ``limit`` characters long, saying how long it was when it is cut.

    >>> cut("x" * 10, 40) == "x" * 10, cut("y" * 100, 40)
    (True, 'yyyyyyyyyyyyy... (100 characters in all)')
    """
    if len(text) <= limit:
        return text
    tail = f"... ({len(text):,} characters in all)"
    return text[:max(0, limit - len(tail))] + tail


class PenumbraError(ValueError):
    """Base class of every input error Penumbra raises on purpose."""


class ValidationError(PenumbraError):
    """Invalid event, timestamp or stream parameter.

    ``field`` is a dotted path to the offending value (``ts.edges[2]``,
    ``seismic.templates.s1.probs``), so a client can point at it.
    """

    def __init__(self, field: str, message: str):
        self.field = cut(field, MAX_FIELD_CHARS)
        self.message = cut(message, MAX_MESSAGE_CHARS)
        super().__init__(f"{self.field}: {self.message}" if self.field else self.message)

    def within(self, prefix: str) -> ValidationError:
        """The same error, with its field nested under ``prefix``."""
        if not prefix:
            return self
        field = f"{prefix}{self.field}" if self.field.startswith("[") else (
            f"{prefix}.{self.field}" if self.field else prefix)
        return ValidationError(field, self.message)
