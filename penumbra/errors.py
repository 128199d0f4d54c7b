"""Errors for bad input: each names what is wrong and where."""

from __future__ import annotations

__all__ = ["PenumbraError", "ValidationError"]


class PenumbraError(ValueError):
    """Base class of every input error Penumbra raises on purpose."""


class ValidationError(PenumbraError):
    """Invalid event, timestamp or stream parameter.

    ``field`` is a dotted path to the offending value (``ts.edges[2]``,
    ``seismic.templates.s1.probs``), so a client can point at it.
    """

    def __init__(self, field: str, message: str):
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}" if field else message)

    def within(self, prefix: str) -> ValidationError:
        """The same error, with its field nested under ``prefix``."""
        if not prefix:
            return self
        field = f"{prefix}{self.field}" if self.field.startswith("[") else (
            f"{prefix}.{self.field}" if self.field else prefix)
        return ValidationError(field, self.message)
