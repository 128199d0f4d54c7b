"""The one interface every Penumbra operator shares.

Join, pattern and lossy-CEP operators all take a *block* of events (a micro-batch)
and return what that block made final: matches, late events, and observations for the
dashboard. Spark, the CLI and the tests drive every operator the same way::

    op = compile_query(text, streams)
    for block in blocks:
        out = op.feed(block)          # matches, late events, observations
    out = op.flush()                  # end of input: emit what was waiting
    state = op.snapshot()             # bytes; Operator.restore(state) continues exactly

Time is driven by the data: each operator keeps a watermark (the largest max time
seen, less the streams' max delay), so replaying a file gives the result a live run gives.

On a cluster a query runs as several operators, one per key group
(:mod:`penumbra.keygroups`), each seeing only the events of its keys. Time must still
reach all of them: :meth:`Operator.clock_of` tells what a block says of time from its
events alone, the clocks of every group's share merge by maximum
(:func:`merge_clocks`), and :meth:`Operator.advance` moves a group to the merged time.
:meth:`Operator.wake` says how far time may move before an idle group has anything to
do, so a host can leave it unrestored until then (:func:`is_due`).
"""

from __future__ import annotations

import abc
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping, Sequence

import numpy as np

from .errors import ValidationError
from .events import Event
from .events.columns import EventColumns
from .keygroups import KeyGroup
from .state import Migration, dump, load

__all__ = ["BlockResult", "Clock", "Late", "Match", "Operator", "check_threshold", "is_due", "merge_clocks"]

#: What a block of events says of time (named figures, each merged by maximum).
Clock = dict[str, float]


@dataclass(frozen=True)
class Match:
    """One result: the matched events' ids by query variable (in the query's order),
    the probability (join probability, pattern confidence or lossy-CEP probability),
    and for patterns the match's time range ``[lo, hi]`` (the imprecise-timestamps
    paper's Table 1: from the earliest first-event instant to the latest last-event
    instant over the match's possible worlds).

    ``key`` is what the match is about: the values of the query's equality key (a join's
    ``A.region = B.region``, a pattern's partition attribute, a lossy query's hash
    attribute) by the attribute names of the query's first keyed variable, e.g.
    ``{"region": 17}``; ``None`` for a query without one. Alarms are kept per query and
    key. ``times`` gives each matched event's time support by variable, ``(earliest,
    latest)`` (a histogram's first edge and max time, an interval's bounds, in the events'
    own unit). ``partition`` is a join match's probing range (the PTJoin paper's Theorem 3,
    or Eqs. 4-6 for intervals): the one of its first event's ranges, ``lpr``, ``sr`` or
    ``rpr``, that holds its second event's max time. ``records`` gives the matched events
    themselves by variable, in the input's shape (stream, id, timestamp as read, attributes),
    so a match can be explained after its events left the input; ``factors`` is a lossy
    match's probability taken apart: one factor per run of unobserved components (see
    :mod:`penumbra.explain`). None of these is part of the match's JSON (``penumbra eval``
    prints events and probability), and two matches that differ only in them are equal."""

    events: dict[str, str]
    prob: float
    range: tuple[float, float] | None = None
    key: dict[str, Any] | None = field(default=None, compare=False, repr=False)
    times: dict[str, tuple[float, float]] | None = field(default=None, compare=False, repr=False)
    partition: str | None = field(default=None, compare=False, repr=False)
    records: dict[str, dict[str, Any]] | None = field(default=None, compare=False, repr=False)
    factors: list[dict[str, Any]] | None = field(default=None, compare=False, repr=False)

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

    def extend(self, later: BlockResult) -> BlockResult:
        """This result followed by ``later``: matches and late events in order; the
        observations of ``later`` describe the state after it, so they replace this
        result's, except samples (lists), which accumulate, and per-block ``counters``, which add."""
        if not len(later.matches):
            pass
        elif not len(self.matches) and not isinstance(later.matches, list):
            self.matches = later.matches    # a block's own sequence (never changed in place) is kept as it is
        else:
            self.matches = [*self.matches, *later.matches]
        self.late = [*self.late, *later.late]
        for name, value in later.observations.items():
            mine = self.observations.get(name)
            if isinstance(value, list) and isinstance(mine, list):
                self.observations[name] = mine + value
            elif name == "counters" and isinstance(mine, dict):
                self.observations[name] = {k: mine.get(k, 0) + value.get(k, 0) for k in {*mine, *value}}
            else:
                self.observations[name] = value
        return self


class Operator(abc.ABC):
    """A stateful streaming operator for one registered query.

    Its state is saved as its declared fields (:data:`STATE_FIELDS`, version
    :data:`STATE_VERSION`) in the one format of :mod:`penumbra.state`: an operator says
    what its fields are (:meth:`state_fields`) and how to continue from them
    (:meth:`from_state`); :meth:`snapshot` and :meth:`restore` are the same for all."""

    #: the query form this operator evaluates (``join``, ``pattern`` or ``sequence``)
    kind: ClassVar[str]
    #: the version of the fields a snapshot holds, and their names
    STATE_VERSION: ClassVar[int]
    STATE_FIELDS: ClassVar[tuple[str, ...]]
    #: version -> the migration of that version's fields to the next one's (0: a state
    #: written before the versioned format; see :mod:`penumbra.state`)
    STATE_MIGRATIONS: ClassVar[Mapping[int, Migration]] = {}

    #: The key group this operator hosts: it keeps the state of the keys the group owns
    #: and ignores the rest. None: every key.
    key_group: KeyGroup | None = None
    #: The confidence threshold a result must reach (None: a pattern query without
    #: ``WITH CONFIDENCE`` reports every match).
    threshold: float | None
    #: The lowest threshold the operator accepts (:meth:`set_threshold`): a join keeps
    #: the buffers and tables this floor needs, so a threshold moved down to it loses
    #: nothing; 0 for operators that accept any threshold in (0, 1].
    floor: float = 0.0
    #: Whether its observations count the candidates between its floor and its threshold
    #: (``near_misses``, ``near_miss_histogram``): what a threshold moved down to the floor
    #: would have added (:mod:`penumbra.tuning`).
    reports_near_misses: ClassVar[bool] = False

    @abc.abstractmethod
    def feed(self, events: Sequence[Event], prior: np.ndarray | None = None) -> BlockResult:
        """Process one block of events (any order within the block). ``prior`` gives
        each event the clock of the events before it that other key groups saw in the
        same micro-batch (:meth:`clocks_before`), so a key group judges lateness as one
        operator fed the whole micro-batch would; None: the block is the whole batch."""

    def flush(self) -> BlockResult:
        """End of input: emit every match still waiting for more input. Default: nothing waits."""
        return BlockResult()

    @abc.abstractmethod
    def set_threshold(self, threshold: float) -> None:
        """Move the confidence threshold; takes effect for the next block, loses no state."""

    @abc.abstractmethod
    def evict(self, watermark: float) -> int:
        """Drop state no event at or after ``watermark`` can match; returns how many events went."""

    def snapshot(self) -> bytes:
        """The operator's whole state, compactly (:mod:`penumbra.state`)."""
        return dump(self.kind, self.STATE_VERSION, self.state_fields())

    @classmethod
    def restore(cls, data: bytes) -> Operator:
        """An operator that continues exactly where the snapshot was taken; a snapshot
        of an older version is migrated, one this Penumbra cannot continue from raises
        :class:`~penumbra.state.StateError` (trusted bytes only: the fields are pickled)."""
        return cls.from_state(load(data, cls.kind, cls.STATE_VERSION, cls.STATE_FIELDS, cls.STATE_MIGRATIONS))

    @abc.abstractmethod
    def state_fields(self) -> dict[str, Any]:
        """The operator's state as its :data:`STATE_FIELDS`, by name."""

    @classmethod
    @abc.abstractmethod
    def from_state(cls, fields: dict[str, Any]) -> Operator:
        """The operator whose :meth:`state_fields` were ``fields``."""

    @property
    @abc.abstractmethod
    def counters(self) -> dict[str, int | float]:
        """Running totals for ``--stats`` and the dashboard (events, matches, late, ...)."""

    @abc.abstractmethod
    def partition_keys(self) -> dict[str, list[tuple[str, ...]]]:
        """For every stream the query reads (case-folded), the attributes whose values
        key the state in each role the stream plays; ``()`` for a role that is not keyed
        (see :class:`~penumbra.keygroups.Routing`)."""

    def concerned(self, events: Sequence[Event] | EventColumns) -> np.ndarray:
        """Which of ``events`` (or of a block's columns) can play a part in this query:
        false only for an event that every role its stream plays refuses by a condition on
        the event alone (a join side's one-source filter). Such an event changes nothing but
        time, so a host may keep it from the operator as long as the clock still counts it
        (:meth:`clock_of`, which takes a block's columns too)."""
        return np.ones(len(events), dtype=bool)

    def clocks_before(self, events: Sequence[Event] | EventColumns) -> np.ndarray | None:
        """For each event of a block, the part of the clock the events before it give,
        when the operator judges an event late by the events before it in its block (a
        join; see :meth:`feed`'s ``prior``); None when it judges a block as a whole."""
        return None

    @abc.abstractmethod
    def clock_of(self, events: Sequence[Event] | EventColumns) -> Clock:
        """What ``events`` say of time, from the events alone (no state), so a host can
        compute it for a whole micro-batch before splitting it into key groups; the same
        from a block's columns (the pipeline's router makes no events)."""

    @abc.abstractmethod
    def advance(self, clock: Clock) -> BlockResult:
        """Move time to at least ``clock`` as if the events it came from had been fed
        (to another key group): evict, and emit what that makes final."""

    @abc.abstractmethod
    def wake(self) -> Clock:
        """How far time may move with nothing to do: :meth:`advance` to a clock that is not
        :func:`due` evicts nothing and emits nothing (it may leave memory to a later call)."""


def check_threshold(value: float, name: str = "threshold") -> float:
    """A probability threshold in (0, 1], or a clear error."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValidationError(name, f"must be a number in (0, 1], got {value!r}")
    if not 0 < value <= 1:
        raise ValidationError(name, f"must be in (0, 1], got {value!r}")
    return float(value)


def merge_clocks(*clocks: Clock) -> Clock:
    """The clocks of several blocks (or key groups' shares of one) as one."""
    merged: Clock = {}
    for clock in clocks:
        for name, value in clock.items():
            if name not in merged or value > merged[name]:
                merged[name] = value
    return merged


def is_due(wake: Clock, clock: Clock) -> bool:
    """Whether advancing an operator whose :meth:`~Operator.wake` was ``wake`` to ``clock`` may do anything."""
    return any(clock.get(name, -math.inf) > value for name, value in wake.items())
