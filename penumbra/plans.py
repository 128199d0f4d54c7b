"""Joins that differ only in one-source conditions and thresholds, run as one plan.

A deployment registers dozens of joins over the same streams, key and window, each keeping
its own slice (``A.zone % 40 = 0``, ``A.zone % 40 = 1``, ...). Run apart, every one of them
buffers and probes each event of the side its conditions leave open. A :class:`Plan` runs
them as one join over the events any of them keeps, at the lowest of their thresholds
(and so the lowest floor), and gives each member its share (:meth:`Plan.split`): the pairs
whose two events pass its conditions and reach its threshold, its near misses (down to its
own floor) and its late events. The work is one join's, plus a pass of each member's
conditions over the block's matches and near misses, decided on numpy columns read once.

A member's matches, near misses and late events are exactly those of its own join fed
the same events, for input whose disorder stays within the streams' max delay (the
condition under which key groups already equal one operator; tests/unit/test_plans.py).
Its other observations (events, pairs, buffers, evictions, samples of newly buffered events)
are the plan's; the plan's samples of probing ranges go to the members at its threshold.

>>> from penumbra.engine import build_operator
>>> from penumbra.events import Streams
>>> from penumbra.query import parse
>>> text = "SELECT * FROM S A, T B WHERE WINDOW(A, B) = 5 AND A.k = B.k AND A.zone = {z} WITH THRESHOLD {t}"
>>> members = [Member(f"q{z}", build_operator(parse(text.format(z=z, t=t)), Streams())) for z, t in ((1, 0.5), (2, 0.8))]
>>> plan_key(members[0].operator) == plan_key(members[1].operator)
True
>>> Plan(members).query.threshold, Plan(members).query.filters
(0.5, {})
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from functools import cached_property
from typing import Sequence

import numpy as np

from .errors import ValidationError
from .events import Event, Streams
from .joins.inspection import NEAR_MISS_SAMPLES, near_miss_bins, near_miss_histogram
from .joins.matches import FoundPairs, JoinMatches, gather
from .joins.operator import JoinOperator
from .keygroups import KeyGroup
from .keyed import GroupState, step
from .operator import BlockResult, Clock
from .probability import meets
from .query import JoinQuery
from .query.block import block_filter

__all__ = ["Member", "Plan", "is_plan", "members_plan", "plan_key"]

#: A plan's key begins with it; a query's id never does.
PLAN_PREFIX = "~"


def plan_key(operator: JoinOperator) -> str:
    """What a join is apart from its one-source conditions and threshold (its sources'
    variables, streams and parameters, key, window, strategy and buffer floor): joins with
    the same key run as one plan. A short, stable name (``~`` and 16 hex digits). The
    floor is part of it so that a plan keeps one floor whoever joins or leaves it."""
    shape = (tuple((side.var, side.stream, repr(side.params), side.key) for side in operator.sides),
             operator.d, operator.strategy, operator.floor)
    return PLAN_PREFIX + hashlib.sha1(repr(shape).encode()).hexdigest()[:16]


def is_plan(name: str) -> bool:
    """Whether ``name`` is a plan's key (not a query's id)."""
    return name.startswith(PLAN_PREFIX)


@dataclass(frozen=True)
class Member:
    """A join of a plan: its id, its own operator (conditions, floor and threshold as
    written; used only to read them) and the threshold registered now (None: its own)."""

    id: str
    operator: JoinOperator
    threshold: float | None = None


class Plan:
    """Members sharing one :func:`plan_key`, run as one join without their conditions."""

    def __init__(self, members: Sequence[Member]):
        if not members:
            raise ValueError("a plan needs a member")
        self.members = list(members)
        first: JoinQuery = members[0].operator.query
        self.query = dataclasses.replace(first, filters={},
                                         threshold=min(m.operator.query.threshold for m in members))
        # each member's threshold now, and why a registered one was refused
        self.thresholds: dict[str, float] = {}
        self.refused: dict[str, str] = {}
        for member in members:
            member_join = member.operator
            try:
                wanted = member_join.query.threshold if member.threshold is None else member.threshold
                self.thresholds[member.id] = member_join.checked_threshold(wanted)
            except ValidationError as error:
                self.thresholds[member.id] = member_join.query.threshold
                self.refused[member.id] = str(error)
        self.threshold = min(self.thresholds.values())
        # a match's probing range (Theorem 3) is read at its join's threshold: a member at
        # another threshold than the plan's has tables of its own for it
        self._partition_of = {}
        for member in members:
            if self.thresholds[member.id] != self.threshold:
                at_member_threshold = JoinOperator(member.operator.query, member.operator.streams)
                at_member_threshold.set_threshold(self.thresholds[member.id])
                self._partition_of[member.id] = at_member_threshold.pair_partitions

    def concerned(self, events: Sequence[Event]) -> np.ndarray:
        """Events some member is concerned with (:meth:`JoinOperator.concerned`)."""
        out = np.zeros(len(events), dtype=bool)
        for member in self.members:
            out |= member.operator.concerned(events)
        return out

    def step(self, streams: Streams, key_group: KeyGroup, state: GroupState | None, events: Sequence[Event],
             clock: Clock, *, end: bool = False, prior=None) -> tuple[dict[str, BlockResult | Exception] | None,
                                                                    GroupState]:
        """:func:`~penumbra.keyed.step` of the plan's join, split among the members."""
        result, state = step(self.query, streams, key_group, state, events, clock, threshold=self.threshold, end=end,
                             prior=prior)
        return (None if result is None else self.split(result)), state

    def split(self, result: BlockResult) -> dict[str, BlockResult | Exception]:
        """Each member's share of one block's result of the plan's join (the error, for a
        member whose conditions fail on it)."""
        if len(self.members) == 1 and not self.refused and not any(s.filters for s in self.members[0].operator.sides):
            return {self.members[0].id: result}     # the plan is the member's own join: its result is the member's
        block = _Block(result)
        out: dict[str, BlockResult | Exception] = {}
        for member in self.members:
            try:
                out[member.id] = self._share(member, block)
            except Exception as error:  # noqa: BLE001 - one member's conditions must not stop the others
                out[member.id] = error
        return out

    def _share(self, member: Member, block: _Block) -> BlockResult:
        member_join, threshold = member.operator, self.thresholds[member.id]
        # one floor for the plan (it is in the plan's key): what the plan keeps below the
        # member's threshold are the member's near misses
        keep = meets(block.probs, threshold)
        below = ~keep
        in_near = ~meets(block.near.probs, threshold)
        for k, side in enumerate(member_join.sides):
            if side.filters:
                passing, passing_near = block.passing(k, side)
                keep &= passing
                below &= passing
                in_near &= passing_near
        matches = block.matches.select(keep, self._partition_of.get(member.id)) if block.matches is not None else []
        share = BlockResult(matches, _late_of(member_join, block.result.late), dict(block.result.observations))
        _observe(share, member_join, threshold, block, in_near, below)
        if member.id in self._partition_of and "partitions" in share.observations:
            share.observations["partitions"] = []    # samples at the plan's threshold, not the member's
        if member.id in self.refused:
            share.observations["threshold_refused"] = self.refused[member.id]
        return share


def _late_of(member_join: JoinOperator, late: list) -> list:
    """The late and rejected events of the block that ``member_join`` would report: one per side
    reading the event's stream whose conditions it passes (the plan reports one per side)."""
    out, seen = [], {}
    for item in late:
        sides = [k for k, side in enumerate(member_join.sides) if side.stream == item.event.stream.casefold()]
        nth = seen.get(id(item.event), 0)
        seen[id(item.event)] = nth + 1
        side = member_join.sides[sides[min(nth, len(sides) - 1)]]
        if not side.filters or bool(block_filter(list(side.filters), side.var, [item.event.attrs])[0]):
            out.append(item)
    return out


def _observe(share: BlockResult, member_join: JoinOperator, threshold: float, block: _Block, in_near: np.ndarray,
             below: np.ndarray) -> None:
    """The member's own figures in place of the plan's: matches, near misses (those of the
    plan's near misses and of its matches below the member's threshold), late counts,
    threshold and floor."""
    observations = share.observations
    observations["threshold"], observations["floor"] = threshold, member_join.floor
    if "counters" in observations:
        counters = observations["counters"] = dict(observations["counters"])
        counters["matches"] = len(share.matches)
        counters["late"] = sum(1 for item in share.late if item.reason.startswith("late:"))
        counters["rejected"] = len(share.late) - counters["late"]
        counters["near_misses"] = int(in_near.sum() + below.sum())
    if "near_miss_histogram" not in observations:
        return
    a, b = member_join.names
    near, matches = block.near, block.matches
    picked = np.flatnonzero(in_near)
    samples = [{"events": {a: near.ids[0][i], b: near.ids[1][i]}, "prob": float(near.probs[i])}
               for i in picked[:NEAR_MISS_SAMPLES].tolist()]
    missed = np.flatnonzero(below)[:max(0, NEAR_MISS_SAMPLES - len(samples))]
    samples += [{"events": {a: matches.a_ids[i], b: matches.b_ids[i]}, "prob": float(block.probs[i])}
                for i in missed.tolist()]
    observations["near_misses"] = samples
    found = np.concatenate([near.probs[in_near], block.probs[below]])
    observations["near_miss_histogram"] = near_miss_histogram(near_miss_bins(found))


class _Block:
    """One block's result of the plan's join, as every member reads it: the matches'
    probabilities, the near misses, and each side's attribute columns, read once."""

    def __init__(self, result: BlockResult):
        self.result = result
        self.matches = result.matches if isinstance(result.matches, JoinMatches) else None
        self.probs = self.matches.probs if self.matches is not None else np.empty(0)
        self.near = _Near(self.matches.near if self.matches is not None else [])
        self._attrs: list[list | None] = [None, None]
        self._columns: tuple[dict, dict, dict, dict] = ({}, {}, {}, {})

    def passing(self, k: int, side) -> tuple[np.ndarray, np.ndarray]:
        """Which matches and which near misses pass ``side``'s conditions (side ``k``)."""
        if self._attrs[k] is None:
            self._attrs[k] = self.matches.column(k, "attrs").tolist() if len(self.probs) else []
        terms = list(side.filters)
        return (block_filter(terms, side.var, self._attrs[k], self._columns[k]),
                block_filter(terms, side.var, self.near.attrs(k), self._columns[2 + k]))


class _Near:
    """A block's near misses as columns: probabilities, and each side's ids and attributes
    (gathered when first read: only the members with conditions read attributes, and only
    the samples read ids)."""

    def __init__(self, parts: list[FoundPairs]):
        self._parts = parts
        self._attrs: dict[int, list] = {}
        self.probs = np.concatenate([part.probs for part in parts]) if parts else np.empty(0)

    @cached_property
    def ids(self) -> tuple[list, list]:
        return gather(self._parts, 0, "ids").tolist(), gather(self._parts, 1, "ids").tolist()

    def attrs(self, k: int) -> list:
        if k not in self._attrs:
            self._attrs[k] = gather(self._parts, k, "attrs").tolist()
        return self._attrs[k]


def members_plan(members: Sequence[Member]) -> dict[str, Plan]:
    """The members grouped into plans, by :func:`plan_key`."""
    grouped: dict[str, list[Member]] = {}
    for member in members:
        grouped.setdefault(plan_key(member.operator), []).append(member)
    return {key: Plan(found) for key, found in grouped.items()}

