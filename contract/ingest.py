"""The one writer of the ingest stream ``pn:in``: events in arrival order, and end marks.

The service, ``penumbra simulate --redis``, ``penumbra eval --engine spark``, the tests
and the benchmarks all append through here, so every entry has the shape the job reads
(:func:`contract.entries.event_entry`, :func:`contract.entries.control_entry`).
"""

from __future__ import annotations

from typing import Iterable

import redis

from .entries import control_entry, event_entry
from .keys import Keys

__all__ = ["PIPELINE_CHUNK", "append_events", "end_of_input", "queue_events"]

#: Entries per pipelined round trip when appending to a stream.
PIPELINE_CHUNK = 2000


def queue_events(pipe: redis.client.Pipeline, keys: Keys, events: Iterable[bytes | str]) -> int:
    """Queue events (JSON each) for the ingest stream on ``pipe``, in order, so that they
    go with whatever else the caller's transaction writes; how many were queued."""
    count = 0
    for event in events:
        pipe.xadd(keys.ingest, event_entry(event))
        count += 1
    return count


def append_events(client: redis.Redis, events: Iterable[bytes | str], keys: Keys = Keys()) -> list[bytes]:
    """Append events (JSON each) to the ingest stream in order, pipelined; their entry ids."""
    ids: list[bytes] = []
    pipe = client.pipeline(transaction=False)
    chunk: list[bytes | str] = []
    for event in events:
        chunk.append(event)
        if len(chunk) == PIPELINE_CHUNK:
            queue_events(pipe, keys, chunk)
            ids += pipe.execute()
            chunk = []
    if chunk:
        queue_events(pipe, keys, chunk)
        ids += pipe.execute()
    return ids


def end_of_input(client: redis.Redis, queries: Iterable[str], keys: Keys = Keys()) -> bytes:
    """Mark the end of the input of these queries: the job flushes them (emits every
    match still waiting for more input) once the events before the mark are processed.
    Returns the mark's entry id (it appears in ``ended`` once done)."""
    return client.xadd(keys.ingest, control_entry(queries))
