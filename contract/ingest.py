"""The one writer of the ingest stream ``pn:in``: events in arrival order, each identity once
(contract/identity.py), and end marks.

The service, ``penumbra simulate --redis``, ``penumbra eval --engine spark``, the tests
and the benchmarks all append through here, so every entry has the shape the job reads
(:func:`contract.entries.event_entry`, :func:`contract.entries.block_entry`,
:func:`contract.entries.control_entry`) and no identity reaches the job twice. One Lua
script checks and appends a whole call's events atomically: two clients sending the same
event at once append it once, and a crash of the caller leaves all of a call's events
appended or none.
"""

from __future__ import annotations

import json
import time
from typing import Iterable, Sequence

import redis

from penumbra.events import Event, Streams, parse_event_lines, parse_streams

from .dead import queue_dead
from .entries import BLOCK_FIELD, BLOCK_MAX, COUNT_FIELD, EVENT_FIELD, control_entry, rejected_letter
from .identity import (CONFLICT_REASON, DEFAULT_HORIZON_HOURS, DIGEST_BYTES, IDENTITY_BYTES, Identified,
                       identified)
from .keys import Keys

__all__ = ["CONFLICT", "DUPLICATE", "Appended", "append_events", "end_of_input", "ingest", "note_sources", "seen_sources"]

#: What :func:`ingest` answers for an event it did not append: remembered with the same
#: content (a duplicate), or with another (a conflict).
DUPLICATE, CONFLICT = 0, -1
#: Events per script call of :func:`append_events` (the API's requests go in one call).
SCRIPT_CHUNK = 2000
#: The most events one ingest entry (a block) holds: the job's admission control
#: (``PENUMBRA_MAX_ROWS_PER_BATCH``) and its read partitions split a batch at entries, so
#: they are this fine; an entry's own cost in Redis and in the reader is small beside
#: 1,000 events'.
BLOCK_EVENTS = 1000
#: The dead-letter stream's cap for the conflicts :func:`append_events` keeps (the
#: settings' default; the service and the job pass theirs).
DEAD_MAXLEN = 100_000
#: Bytes of an event's record in the ingest script's arguments: bucket (two bytes: at most
#: 65,536 buckets), flag, identity, digest, and the length of its JSON (four bytes).
RECORD = 3 + IDENTITY_BYTES + DIGEST_BYTES + 4
_LENGTH_AT = 3 + IDENTITY_BYTES + DIGEST_BYTES
#: The record of an entry without an identity (not a valid event: appended as it is).
_NO_IDENTITY = bytes(RECORD)

# KEYS[1]: the ingest stream. ARGV[1]: the prefix of the identity hashes; ARGV[2]: the
# horizon in seconds; ARGV[3]: the most events a block holds; ARGV[4]: one record of
# RECORD bytes per entry (its bucket, two bytes big-endian; 1 if it has an identity, else
# 0; the identity; the digest; the length of its JSON, four bytes big-endian); ARGV[5]:
# the JSON of the entries with an identity, one a line; then the JSON of each entry
# without one, in order. One string of records and one of events rather than arguments
# per event: Redis makes a Lua string of every argument, and they took a third of the
# script's time.
# Each run of consecutive events appended goes in one entry, a block (``b``, ``n``), up to
# ARGV[3] events a block, a single event in an ``e`` entry; an entry without an identity
# ends the run and goes alone. A block is a piece of ARGV[5] as it came (string.sub), so
# the common call, every event new, appends one entry per ARGV[3] events. Generations are
# numbered by Redis's clock. Answers per entry: the id of the entry that holds it, 0 for a
# duplicate, -1 for a conflict.
_INGEST = """
local horizon = tonumber(ARGV[2])
local generation = math.floor(tonumber(redis.call('TIME')[1]) / horizon)
local current = ARGV[1] .. string.format('%%d', generation) .. ':'
local previous = ARGV[1] .. string.format('%%d', generation - 1) .. ':'
local expire = string.format('%%d', math.floor((generation + 2) * horizon) + 60)
local most, records, lines = tonumber(ARGV[3]), ARGV[4], ARGV[5]
local out = {}
local run_from, run_to, run = 0, 0, {}
local function flush()
  if #run == 0 then return end
  local text = string.sub(lines, run_from, run_to)
  local id
  if #run == 1 then
    id = redis.call('XADD', KEYS[1], '*', '%(event)s', text)
  else
    id = redis.call('XADD', KEYS[1], '*', '%(block)s', text, '%(count)s', #run)
  end
  for _, n in ipairs(run) do out[n] = id end
  run = {}
end
local at_line, alone = 1, 6
for n = 1, #records / %(record)d do
  local at = (n - 1) * %(record)d
  if string.byte(records, at + 3) == 0 then
    flush()
    out[n] = redis.call('XADD', KEYS[1], '*', '%(event)s', ARGV[alone])
    alone = alone + 1
  else
    local l1, l2, l3, l4 = string.byte(records, at + %(length_from)d, at + %(record)d)
    local from = at_line
    local to = from + ((l1 * 256 + l2) * 256 + l3) * 256 + l4 - 1
    at_line = to + 2
    local number = string.format('%%d', string.byte(records, at + 1) * 256 + string.byte(records, at + 2))
    local key = string.sub(records, at + 4, at + %(digest_at)d)
    local digest = string.sub(records, at + %(digest_from)d, at + %(length_at)d)
    local bucket = current .. number
    local known = redis.call('HGET', bucket, key)
    if not known then known = redis.call('HGET', previous .. number, key) end
    if not known then
      if #run == 0 then run_from = from end
      run[#run + 1] = n
      run_to = to
      if #run == most then flush() end
      redis.call('HSET', bucket, key, digest)
      if redis.call('HLEN', bucket) == 1 then redis.call('EXPIREAT', bucket, expire) end
    else
      flush()
      if known == digest then out[n] = 0 else out[n] = -1 end
    end
  end
end
flush()
return out
""" % {"event": EVENT_FIELD, "block": BLOCK_FIELD, "count": COUNT_FIELD, "record": RECORD,
       "digest_at": 3 + IDENTITY_BYTES, "digest_from": 4 + IDENTITY_BYTES, "length_at": _LENGTH_AT,
       "length_from": _LENGTH_AT + 1}


def ingest(client: redis.Redis, keys: Keys, events: Sequence[Identified], horizon: float,
           block: int = BLOCK_EVENTS) -> list[bytes | int]:
    """Append ``events`` to the ingest stream in order, each identity once, in one atomic
    call; per event the id of the entry that holds it (a run of consecutive events appended
    shares one entry, a block of at most ``block``), or :data:`DUPLICATE` or
    :data:`CONFLICT`. ``horizon``: seconds an identity is remembered at least (every writer
    must use the same). An event with an identity is valid JSON, so a line break in it is
    white space: a block holds it as a space."""
    if not 0 < block <= BLOCK_MAX:
        raise ValueError(f"a block holds one event or more, at most {BLOCK_MAX:,}, not {block}")
    if not events:
        return []
    records, lines, alone = [], [], []
    for event in events:
        if event.identity:
            line = event.payload.replace(b"\n", b" ")
            lines.append(line)
            records.append(event.bucket.to_bytes(2, "big") + b"\x01" + event.identity + event.digest
                           + len(line).to_bytes(4, "big"))
        else:
            alone.append(event.payload)
            records.append(_NO_IDENTITY)
    return client.register_script(_INGEST)(keys=[keys.ingest], args=[keys.identities, repr(float(horizon)), block,
                                                                       b"".join(records), b"\n".join(lines), *alone])


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
                  horizon: float = DEFAULT_HORIZON_HOURS * 3600.0, streams: Streams | None = None,
                  block: int = BLOCK_EVENTS) -> Appended:
    """Append events (JSON each) to the ingest stream in order, each identity once; the entry
    ids of those appended. Each is parsed by the core against ``streams`` (default: those
    registered): a valid event has its identity, an invalid entry none (it goes as it is:
    the job rejects it, and it takes no identity from a valid event sent later). Another
    content under a known identity is a conflict, kept as a dead letter (``source`` =
    ``ingest``). The events go in blocks of at most ``block`` (:func:`ingest`)."""
    streams = registered_streams(client, keys) if streams is None else streams
    ids = Appended()
    chunk: list[bytes] = []

    def flush() -> None:
        parsed = parse_event_lines(chunk, streams)
        items = [identified(event if isinstance(event, Event) else None, payload)
                 for event, payload in zip(parsed, chunk)]
        found = ingest(client, keys, items, horizon, block)
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
