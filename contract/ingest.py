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

from penumbra.events import Event, Streams, parse_event_lines, parse_streams

from .dead import queue_dead
from .entries import EVENT_FIELD, control_entry, rejected_letter
from .identity import (CONFLICT_REASON, DEFAULT_HORIZON_HOURS, DIGEST_BYTES, IDENTITY_BYTES, Identified,
                       identified)
from .keys import Keys

__all__ = ["CONFLICT", "DUPLICATE", "Appended", "append_events", "end_of_input", "ingest", "note_sources", "seen_sources"]

#: What :func:`ingest` answers for an event it did not append: remembered with the same
#: content (a duplicate), or with another (a conflict).
DUPLICATE, CONFLICT = 0, -1
#: Events per script call of :func:`append_events` (the API's requests go in one call).
SCRIPT_CHUNK = 2000
#: The dead-letter stream's cap for the conflicts :func:`append_events` keeps (the
#: settings' default; the service and the job pass theirs).
DEAD_MAXLEN = 100_000
#: Bytes of an event's record in the ingest script's arguments: bucket (two bytes: at most
#: 65,536 buckets), flag, identity, digest.
RECORD = 3 + IDENTITY_BYTES + DIGEST_BYTES
#: The record of an entry without an identity (not a valid event: appended as it is).
_NO_IDENTITY = bytes(RECORD)

# KEYS[1]: the ingest stream. ARGV[1]: the prefix of the identity hashes; ARGV[2]: the
# horizon in seconds; ARGV[3]: one record of RECORD bytes per event (its bucket, two bytes
# big-endian; 1 if it has an identity, else 0; the identity; the digest); then each event's
# JSON. One string of records rather than three arguments per event: Redis makes a Lua
# string of every argument, and three per event took a third of the script's time.
# Generations are numbered by Redis's clock. Answers per event: its entry id, 0 for a
# duplicate, -1 for a conflict.
_INGEST = """
local horizon = tonumber(ARGV[2])
local generation = math.floor(tonumber(redis.call('TIME')[1]) / horizon)
local current = ARGV[1] .. string.format('%%d', generation) .. ':'
local previous = ARGV[1] .. string.format('%%d', generation - 1) .. ':'
local expire = string.format('%%d', math.floor((generation + 2) * horizon) + 60)
local records = ARGV[3]
local out = {}
for n = 1, #ARGV - 3 do
  local at = (n - 1) * %(record)d
  if string.byte(records, at + 3) == 0 then
    out[n] = redis.call('XADD', KEYS[1], '*', '%(field)s', ARGV[n + 3])
  else
    local number = string.format('%%d', string.byte(records, at + 1) * 256 + string.byte(records, at + 2))
    local key = string.sub(records, at + 4, at + %(digest_at)d)
    local digest = string.sub(records, at + %(digest_from)d, at + %(record)d)
    local bucket = current .. number
    local known = redis.call('HGET', bucket, key)
    if not known then known = redis.call('HGET', previous .. number, key) end
    if not known then
      out[n] = redis.call('XADD', KEYS[1], '*', '%(field)s', ARGV[n + 3])
      redis.call('HSET', bucket, key, digest)
      if redis.call('HLEN', bucket) == 1 then redis.call('EXPIREAT', bucket, expire) end
    elseif known == digest then
      out[n] = 0
    else
      out[n] = -1
    end
  end
end
return out
""" % {"field": EVENT_FIELD, "record": RECORD, "digest_at": 3 + IDENTITY_BYTES, "digest_from": 4 + IDENTITY_BYTES}


def ingest(client: redis.Redis, keys: Keys, events: Sequence[Identified], horizon: float) -> list[bytes | int]:
    """Append ``events`` to the ingest stream in order, each identity once, in one atomic
    call; per event its entry id, or :data:`DUPLICATE` or :data:`CONFLICT`. ``horizon``:
    seconds an identity is remembered at least (every writer must use the same)."""
    if not events:
        return []
    records = b"".join(event.bucket.to_bytes(2, "big") + b"\x01" + event.identity + event.digest
                       if event.identity else _NO_IDENTITY for event in events)
    return client.register_script(_INGEST)(keys=[keys.ingest], args=[keys.identities, repr(float(horizon)), records,
                                                                       *(event.payload for event in events)])


def note_sources(client: redis.Redis, keys: Keys, events: Iterable[Event], now: float | None = None) -> None:
    """Remember what the events appended say of their streams: the attribute names each
    stream's events carry (``pn:stream-attrs:<stream>``, what the query editor checks a
    query's attributes against) and when each stream was last heard from
    (``pn:stream-seen``, what flags an idle source). Advisory: written after the events."""
    names: dict[str, set[str]] = {}
    for event in events:
        names.setdefault(event.stream.casefold(), set()).update(event.attrs)
    if not names:
        return
    now = time.time() if now is None else now
    pipe = client.pipeline(transaction=False)
    for stream, attrs in names.items():
        if attrs:
            pipe.sadd(keys.stream_attrs(stream), *sorted(attrs))
    pipe.hset(keys.stream_seen, mapping={stream: repr(float(now)) for stream in names})
    pipe.execute()


def seen_sources(client: redis.Redis, keys: Keys, streams: Iterable[str]) -> dict[str, dict]:
    """Per stream: the attribute names its events carried and when it was last heard from
    (None: never since it was registered or the notes began)."""
    streams = sorted({s.casefold() for s in streams})
    if not streams:
        return {}
    pipe = client.pipeline(transaction=False)
    for stream in streams:
        pipe.smembers(keys.stream_attrs(stream))
    pipe.hmget(keys.stream_seen, streams)
    found = pipe.execute()
    seen = found[-1]
    return {stream: {"attrs": sorted(a.decode() for a in attrs), "seen": float(at) if at else None}
            for stream, attrs, at in zip(streams, found[:-1], seen)}


def registered_streams(client: redis.Redis, keys: Keys) -> Streams:
    """The stream parameters registered now (what the job validates events with)."""
    return parse_streams({name.decode(): json.loads(params) for name, params in client.hgetall(keys.streams).items()})


class Appended(list):
    """The entry ids of the events appended, and how many were refused as conflicts (the
    rest of those given were duplicates)."""

    conflicts: int = 0


def append_events(client: redis.Redis, events: Iterable[bytes | str], keys: Keys = Keys(),
                  horizon: float = DEFAULT_HORIZON_HOURS * 3600.0, streams: Streams | None = None) -> Appended:
    """Append events (JSON each) to the ingest stream in order, each identity once; the entry
    ids of those appended. Each is parsed by the core against ``streams`` (default: those
    registered): a valid event has its identity, an invalid entry none (it goes as it is:
    the job rejects it, and it takes no identity from a valid event sent later). Another
    content under a known identity is a conflict, kept as a dead letter (``source`` =
    ``ingest``)."""
    streams = registered_streams(client, keys) if streams is None else streams
    ids = Appended()
    chunk: list[bytes] = []

    def flush() -> None:
        parsed = parse_event_lines(chunk, streams)
        items = [identified(event if isinstance(event, Event) else None, payload)
                 for event, payload in zip(parsed, chunk)]
        found = ingest(client, keys, items, horizon)
        ids.extend(entry for entry in found if isinstance(entry, bytes))
        note_sources(client, keys, (event for event, entry in zip(parsed, found)
                                    if isinstance(event, Event) and isinstance(entry, bytes)))
        conflicts = [item.payload for item, entry in zip(items, found) if entry == CONFLICT]
        if conflicts:
            ids.conflicts += len(conflicts)
            pipe = client.pipeline(transaction=True)
            queue_dead(pipe, keys, (rejected_letter(CONFLICT_REASON, payload, time.time(), source="ingest")
                                    for payload in conflicts), DEAD_MAXLEN)
            pipe.hincrby(keys.counts, "rejected", len(conflicts))
            pipe.execute()
        chunk.clear()

    for line in events:
        chunk.append(line.encode() if isinstance(line, str) else line)
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
