"""One step of a key group: what a cluster runs for each (query, key group) in each micro-batch.

A host (the Spark job) splits a micro-batch of a query's events by key group
(:class:`~penumbra.keygroups.Routing`), computes the clock of the whole batch
(:meth:`~penumbra.operator.Operator.clock_of`, merged over the batch's partitions with
:func:`~penumbra.operator.merge_clocks`), and calls :func:`step` for every group with
its share, its state and that clock. The state is the operator's snapshot plus two
small clocks, so a group with no rows and nothing due is not restored at all: the time
it missed waits in ``pending`` and is given to the operator before its next events.

For input whose disorder stays within the streams' max delay, the union of the
groups' results equals one operator fed every event (tests/unit/test_keyed.py).

>>> from penumbra.events import parse_event, Streams
>>> from penumbra.query import parse
>>> query = parse("SELECT * FROM S A, T B WHERE WINDOW(A, B) = 5 AND A.k = B.k WITH THRESHOLD 0.5")
>>> event = parse_event({"stream": "S", "id": "s1", "ts": {"lo": 0, "hi": 1}, "attrs": {"k": 1}})
>>> result, state = step(query, Streams(), KeyGroup(0, 1), None, [event], {"watermark": 1.0})
>>> state.kind, len(state.snapshot) > 0
('join', True)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from .engine import build_operator, operator_class
from .errors import ValidationError
from .events import Event, Streams
from .keygroups import KeyGroup
from .operator import BlockResult, Clock, is_due, merge_clocks

__all__ = ["GroupState", "PER_BLOCK", "SHARED", "combine", "state_part", "step"]

#: Observations about one block (samples and per-block counts); the others describe an
#: operator's state after it.
PER_BLOCK = frozenset({"counters", "evicted", "near_misses", "near_miss_histogram", "partitions",
                       "newly_buffered", "matches"})
#: Figures every key group of a query shares (time and settings): the query's is the largest.
SHARED = frozenset({"watermark", "buffer_bounds", "safe_time", "clock", "threshold", "floor", "method",
                    "threshold_refused"})


@dataclass
class GroupState:
    """What a host keeps per (query, key group) between micro-batches."""

    kind: str
    #: the operator's snapshot; empty before the group's first events
    snapshot: bytes
    #: time learned while idle, not yet given to the operator
    pending: Clock = field(default_factory=dict)
    #: the operator's :meth:`~penumbra.operator.Operator.wake` when last snapshotted
    wake: Clock = field(default_factory=dict)


def step(query, streams: Streams, key_group: KeyGroup, state: GroupState | None, events: Sequence[Event],
         clock: Clock, *, threshold: float | None = None, end: bool = False,
         prior=None) -> tuple[BlockResult | None, GroupState]:
    """Run one micro-batch of one key group of ``query``.

    ``events`` are the group's share of the batch in arrival order, ``clock`` the
    batch's merged clock, ``threshold`` the one registered now (None: the query's own),
    ``end`` the end of input (flush). ``prior`` gives each event the clock of
    the batch's events before it in every group (:meth:`~penumbra.operator.Operator.clocks_before`
    over the batch, a partition's share merged with the clocks of the partitions before
    it): the group then judges each event late exactly as one operator fed the whole
    batch would. Returns the group's result, or None when the group had nothing to do
    and was not restored, and its new state.
    """
    state = state or GroupState(query.kind, b"")
    if not events and not end:
        pending = merge_clocks(state.pending, clock)
        if not state.snapshot or not is_due(state.wake, pending):
            return None, GroupState(state.kind, state.snapshot, pending, state.wake)
    if state.snapshot:
        operator = operator_class(state.kind).restore(state.snapshot)
    else:
        operator = build_operator(query, streams, key_group)
    result = operator.advance(state.pending)
    refused = None
    if threshold is not None and threshold != operator.threshold:
        try:
            operator.set_threshold(threshold)
        except ValidationError as error:
            refused = str(error)
    result.extend(operator.feed(events, prior))
    result.extend(operator.advance(clock))
    if end:
        result.extend(operator.flush())
    if refused is not None:
        result.observations["threshold_refused"] = refused
    return result, GroupState(query.kind, operator.snapshot(), {}, operator.wake())


def state_part(observations: dict) -> dict:
    """The observations that describe the state (what a host keeps per group to total
    the groups that slept through a batch)."""
    return {name: value for name, value in observations.items() if name not in PER_BLOCK}


def combine(observations: Sequence[dict], samples: int = 50) -> dict:
    """The observations of a query's key groups as the query's: counts add (numbers, and
    dicts of them), samples (lists) concatenate up to ``samples``, shared figures take
    the largest (element by element for lists; None, an infinite time, counts as none).

    >>> combine([{"buffers": {"A": 2}, "watermark": 5.0, "near_misses": [1]},
    ...          {"buffers": {"A": 1, "B": 4}, "watermark": 7.0, "near_misses": [2, 3]}])
    {'buffers': {'A': 3, 'B': 4}, 'watermark': 7.0, 'near_misses': [1, 2, 3]}
    """
    out: dict = {}
    for observation in observations:
        for name, value in observation.items():
            if name not in out:
                out[name] = _copy(value, samples)
            elif name in SHARED:
                out[name] = _largest(out[name], value)
            else:
                out[name] = _add(out[name], value, samples)
    return out


def _copy(value, samples: int):
    if isinstance(value, list):
        return value[:samples]
    if isinstance(value, dict):
        return dict(value)
    return value


def _largest(mine, theirs):
    if isinstance(mine, list) and isinstance(theirs, list):
        return [_largest(a, b) for a, b in zip(mine, theirs)]
    if mine is None or not isinstance(theirs, (int, float)) or isinstance(theirs, bool):
        return theirs if mine is None else mine
    if not isinstance(mine, (int, float)):
        return mine
    return max(mine, theirs)


def _add(mine, theirs, samples: int):
    if isinstance(mine, list) and isinstance(theirs, list):
        return (mine + theirs)[:samples]
    if isinstance(mine, dict) and isinstance(theirs, dict):
        return {k: _add(mine[k], theirs[k], samples) if k in mine and k in theirs else mine.get(k, theirs.get(k))
                for k in {**mine, **theirs}}
    if isinstance(mine, (int, float)) and isinstance(theirs, (int, float)) \
            and not isinstance(mine, bool) and not isinstance(theirs, bool):
        return mine + theirs
    return theirs if mine is None else mine
