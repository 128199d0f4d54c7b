"""The one interface every Penumbra operator shares.

Join, pattern and lossy-CEP operators all take a *block* of events (a micro-batch)
and return what that block made final: matches, late events, and observations for the
dashboard. Spark, the CLI and the tests drive every operator the same way::

    op = compile_query(text, streams).operator()
    for block in blocks:
        out = op.feed(block)          # matches, late events, observations
    out = op.flush()                  # end of input: emit what was waiting
    state = op.snapshot()             # bytes; Operator.restore(state) continues exactly

Time is driven by the data: each operator keeps a watermark (the largest max time
seen, less the streams' max delay), so replaying a file gives the result a live run gives.
"""

from __future__ import annotations

import abc
import math
from dataclasses import dataclass, field
from typing import Any, Sequence

from .errors import ValidationError
from .events import Event

__all__ = ["BlockResult", "Late", "Match", "Operator", "check_threshold"]


@dataclass(frozen=True)
class Match:
    """One result: the matched events' ids by query variable (in the query's order),
    the probability (join probability, pattern confidence or lossy-CEP probability),
    and for patterns the match's time range ``[lo, hi]`` (the imprecise-timestamps
    paper's Table 1: from the earliest first-event instant to the latest last-event
    instant over the match's possible worlds)."""

    events: dict[str, str]
    prob: float
    range: tuple[float, float] | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"events": dict(self.events), "prob": self.prob}
        if self.range is not None:
            out["range"] = [self.range[0], self.range[1]]
        return out


@dataclass(frozen=True)
class Late:
    """An event that was not processed, with the reason (e.g. later than the stream's max delay)."""

    event: Event
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"stream": self.event.stream, "id": self.event.id, "reason": self.reason}


@dataclass
class BlockResult:
    """What one block produced."""

    matches: list[Match] = field(default_factory=list)
    late: list[Late] = field(default_factory=list)
    observations: dict[str, Any] = field(default_factory=dict)


class Operator(abc.ABC):
    """A stateful streaming operator for one registered query."""

    @abc.abstractmethod
    def feed(self, events: Sequence[Event]) -> BlockResult:
        """Process one block of events (any order within the block)."""

    def flush(self) -> BlockResult:
        """End of input: emit every match still waiting for more input. Default: nothing waits."""
        return BlockResult()

    @abc.abstractmethod
    def set_threshold(self, threshold: float) -> None:
        """Move the confidence threshold; takes effect for the next block, loses no state."""

    @abc.abstractmethod
    def evict(self, watermark: float) -> int:
        """Drop state no event at or after ``watermark`` can match; returns how many events went."""

    @abc.abstractmethod
    def snapshot(self) -> bytes:
        """The operator's whole state, compactly."""

    @classmethod
    @abc.abstractmethod
    def restore(cls, data: bytes) -> Operator:
        """An operator that continues exactly where the snapshot was taken."""

    @property
    @abc.abstractmethod
    def counters(self) -> dict[str, int | float]:
        """Running totals for ``--stats`` and the dashboard (events, matches, late, ...)."""


def check_threshold(value: float, name: str = "threshold") -> float:
    """A probability threshold in (0, 1], or a clear error."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValidationError(name, f"must be a number in (0, 1], got {value!r}")
    if not 0 < value <= 1:
        raise ValidationError(name, f"must be in (0, 1], got {value!r}")
    return float(value)
