"""The one writer of the ingest stream ``pn:in``: events in arrival order, each identity once
(contract/identity.py), and end marks.

The service, ``penumbra simulate --redis``, ``penumbra eval --engine spark``, the tests
and the benchmarks all append through here, so every entry has the shape the job reads
(:func:`contract.entries.event_entry`, :func:`contract.entries.control_entry`) and no
identity reaches the job twice. One Lua script checks and appends a whole call's events
atomically: two clients sending the same event at once append it once, and a crash of
the caller leaves all of a call's events appended or none.
"""

from __future__ import annotations

import json
import time
from typing import Iterable, Sequence

import redis

from .dead import queue_dead
from .entries import EVENT_FIELD, control_entry, rejected_letter
from .identity import CONFLICT_REASON, DEFAULT_HORIZON_HOURS, Identified, generation, identified
from .keys import Keys

__all__ = ["CONFLICT", "DUPLICATE", "append_events", "end_of_input", "ingest"]

#: What :func:`ingest` answers for an event it did not append: remembered with the same
#: content (a duplicate), or with another (a conflict).
DUPLICATE, CONFLICT = 0, -1
#: Events per script call of :func:`append_events` (the API's requests go in one call).
SCRIPT_CHUNK = 2000
#: The dead-letter stream's cap for the conflicts :func:`append_events` keeps (the
#: settings' default; the service and the job pass theirs).
DEAD_MAXLEN = 100_000

# KEYS[1]: the ingest stream. ARGV[1], ARGV[2]: the key prefixes of the current and the
# previous generation of identities; ARGV[3]: when the current one expires (seconds since
# the epoch); then four per event: bucket, identity ("" for none), digest, JSON.
# Answers per event: its entry id, 0 for a duplicate, -1 for a conflict.
_INGEST = """
local out = {}
for i = 4, #ARGV, 4 do
  local key = ARGV[i + 1]
  if key == '' then
    out[#out + 1] = redis.call('XADD', KEYS[1], '*', '%(field)s', ARGV[i + 3])
  else
    local current = ARGV[1] .. ARGV[i]
    local known = redis.call('HGET', current, key)
    if not known then known = redis.call('HGET', ARGV[2] .. ARGV[i], key) end
    if not known then
      out[#out + 1] = redis.call('XADD', KEYS[1], '*', '%(field)s', ARGV[i + 3])
      redis.call('HSET', current, key, ARGV[i + 2])
      if redis.call('HLEN', current) == 1 then redis.call('EXPIREAT', current, ARGV[3]) end
    elseif known == ARGV[i + 2] then
      out[#out + 1] = 0
    else
      out[#out + 1] = -1
    end
  end
end
return out
""" % {"field": EVENT_FIELD}


def ingest(client: redis.Redis, keys: Keys, events: Sequence[Identified], horizon: float,
           now: float | None = None) -> list[bytes | int]:
    """Append ``events`` to the ingest stream in order, each identity once, in one atomic
    call; per event its entry id, or :data:`DUPLICATE` or :data:`CONFLICT`. ``horizon``:
    seconds an identity is remembered at least."""
    if not events:
        return []
    current = generation(horizon, now)
    args: list = [keys.identities(current), keys.identities(current - 1), int((current + 2) * horizon) + 60]
    for event in events:
        args += (event.bucket, event.identity or b"", event.digest, event.payload)
    return client.register_script(_INGEST)(keys=[keys.ingest], args=args)


def append_events(client: redis.Redis, events: Iterable[bytes | str], keys: Keys = Keys(),
                  horizon: float = DEFAULT_HORIZON_HOURS * 3600.0) -> list[bytes]:
    """Append events (JSON each) to the ingest stream in order, each identity once; the entry
    ids of those appended. Nothing is validated here (the job rejects what is invalid), so
    the first content of an identity is the one kept, valid or not: another content under
    it later is a conflict, kept as a dead letter (``source`` = ``ingest``)."""
    ids: list[bytes] = []
    chunk: list[Identified] = []

    def flush() -> None:
        found = ingest(client, keys, chunk, horizon)
        ids.extend(entry for entry in found if isinstance(entry, bytes))
        conflicts = [event.payload for event, entry in zip(chunk, found) if entry == CONFLICT]
        if conflicts:
            pipe = client.pipeline(transaction=True)
            queue_dead(pipe, keys, (rejected_letter(CONFLICT_REASON, payload, time.time(), source="ingest")
                                    for payload in conflicts), DEAD_MAXLEN)
            pipe.hincrby(keys.counts, "rejected", len(conflicts))
            pipe.execute()
        chunk.clear()

    for line in events:
        payload = line.encode() if isinstance(line, str) else line
        try:
            event = json.loads(payload)
        except ValueError:
            event = None
        chunk.append(identified(event, payload))
        if len(chunk) == SCRIPT_CHUNK:
            flush()
    if chunk:
        flush()
    return ids


def end_of_input(client: redis.Redis, queries: Iterable[str], keys: Keys = Keys()) -> bytes:
    """Mark the end of the input of these queries: the job flushes them (emits every
    match still waiting for more input) once the events before the mark are processed.
    Returns the mark's entry id (it appears in ``ended`` once done)."""
    return client.xadd(keys.ingest, control_entry(queries))
