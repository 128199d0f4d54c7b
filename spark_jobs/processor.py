"""The stateful step: every (unit, key group) of the job in one transformWithStateInPandas.

For each key with rows in a micro-batch, Spark calls :meth:`GroupProcessor.handleInputRows`
with the group's events and ticks. The key is a unit's (:class:`~spark_jobs.routing.Unit`):
a query, or the joins run as one plan. The work itself is the core's
(:func:`penumbra.keyed.step`, or :meth:`penumbra.plans.Plan.step` for a plan, whose
result is split among its queries); this module only moves its state in and out of Spark's
state store (RocksDB) and turns its results into rows for the sink, each under its query.

Output rows: ``(qid, grp, kind, seq, data, raw)`` with kind ``m`` (a match's JSON, and
in ``raw`` its key, probability, events' time supports and probing range:
``[key, prob, times, partition, records, factors]``),
``l`` (an event the operator did not process, with the reason), ``o`` (the group's
observations), ``g`` (the group's state: snapshot size and the shuffle partition that ran
it, or dropped), ``f`` (the query failed on this group's block: its error; the group keeps
the state it had, and the sink quarantines the query), and the control key's ``r``
(rejected entries), ``x`` (end marks) and ``f`` (queries the router could not run)
passed through. The key of a group may carry its placement slot as a third part
(:mod:`spark_jobs.placement`); the processor reads only the first two.
"""

from __future__ import annotations

import json
from typing import Iterator

import pandas as pd
from pyspark import TaskContext
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.types import BinaryType, StringType, StructField, StructType

from contract.entries import encode
from contract.results import match_payload
from penumbra.events import collector_paused
from penumbra.keyed import GroupState, step
from penumbra.plans import is_plan
from penumbra.keygroups import KeyGroup
from penumbra.operator import merge_clocks

from .routing import CONTROL, compiled, failure, settle_heap, unpack_columns, unpack_events

__all__ = ["GroupProcessor", "OUTPUT"]

OUTPUT = "qid string, grp int, kind string, seq long, data binary, raw binary"
_STATE = StructType([StructField("kind", StringType()), StructField("snapshot", BinaryType()),
                     StructField("pending", StringType()), StructField("wake", StringType())])
_COLUMNS = ["qid", "grp", "kind", "seq", "data", "raw"]


class GroupProcessor(StatefulProcessor):
    """Hosts every query's key groups; ``url``/``prefix`` locate the registry, ``groups``
    is the job's key-group count."""

    def __init__(self, url: str, prefix: str, groups: int):
        self.url, self.prefix, self.groups = url, prefix, groups

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.state = handle.getValueState("group", _STATE)
        settle_heap()

    def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:
        # the group's events and its operator are gone, freed as they go out of use,
        # before the collector runs again (:func:`~penumbra.events.collector_paused`)
        with collector_paused():
            out = self._handle(str(key[0]), int(key[1]), pd.concat(list(rows), ignore_index=True))
        if out is not None:
            yield out

    def _handle(self, unit_id: str, group: int, frame: pd.DataFrame) -> pd.DataFrame | None:
        """The output rows of one key's rows of the batch (``None``: nothing to say)."""
        if (unit_id, group) == CONTROL:
            return frame[_COLUMNS]
        kinds = frame["kind"]
        if (kinds == "d").any():
            self.state.clear()
            # a removed query's groups are said dropped (for a join, its plan's state may live
            # on for the others, or go under the plan's key, which is no query's)
            return None if is_plan(unit_id) else _frame([(unit_id, group, "g", -1, encode({"dropped": True}), None)])
        registry = compiled(self.url, self.prefix, int(frame["registry"].max()), self.groups)
        unit = registry.units.get(unit_id)
        if unit is None:
            return None
        ticks = [json.loads(data) for data in frame.loc[kinds == "t", "data"]]
        clock = merge_clocks(*(tick["clock"] for tick in ticks))
        ended = {query_id for tick in ticks for query_id in tick["end"]}
        # one call to the state server, None when the group holds no state: each call has the
        # JVM build an encoder and generate a projection for it
        # (docs/measurements/2026-11-27-batch-cost.md)
        held, state = self.state.get(), None
        if held is not None:
            kind, snapshot, pending, wake = held
            state = GroupState(kind, snapshot, json.loads(pending), json.loads(wake))
        lead = unit.lead
        key_group = KeyGroup(group, lead.routing.count)
        try:
            if unit.plan is None:
                events = unpack_events(frame.loc[kinds == "b", "data"], registry.streams)
                result, state = step(lead.query, lead.streams, key_group, state, events, clock,
                                     threshold=lead.entry.get("threshold"), end=bool(ended))
                results = None if result is None else {lead.entry["id"]: result}
            else:
                # each event with the clock of the batch's events before it, every group's
                columns, prior = unpack_columns(frame.loc[kinds == "b", "data"], ticks)
                results, state = unit.plan.step(lead.streams, key_group, state, columns, clock, end=bool(ended),
                                                prior=prior)
        except Exception as error:  # noqa: BLE001 - the queries are quarantined; the group keeps its state
            return _frame([_failed(query, group, error) for query in unit.members])
        self.state.update((state.kind, state.snapshot, json.dumps(state.pending), json.dumps(state.wake)))
        if results is None:
            return None
        partition = TaskContext.get().partitionId()
        out = []
        for query in unit.members:
            query_id = query.entry["id"]
            result = results[query_id]
            if isinstance(result, Exception):
                out.append(_failed(query, group, result))
                continue
            # a match's row carries its key and probability for the sink's alarm instances
            out += [(query_id, group, "m", -1, encode(m.to_json()),
                     match_payload(m.key, m.prob, m.times, m.partition, m.records, m.factors)) for m in result.matches]
            out += [(query_id, group, "l", -1, encode({"stream": late.event.stream, "id": late.event.id,
                                                       "reason": late.reason}), None) for late in result.late]
            out.append((query_id, group, "o", -1, encode(result.observations), None))
            out.append((query_id, group, "g", -1, encode({"snapshot_bytes": len(state.snapshot),
                                                         "end": query_id in ended, "partition": partition}), None))
        return _frame(out)

    def close(self) -> None:
        pass


def _failed(query, group: int, error: BaseException) -> tuple:
    """The row quarantining ``query``: its run-time error on this group's block."""
    query_id = query.entry["id"]
    return (query_id, group, "f", -1, encode({"query": query_id, "error": failure(error),
                                              "version": query.entry.get("version")}), None)


def _frame(rows: list[tuple]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=_COLUMNS)
