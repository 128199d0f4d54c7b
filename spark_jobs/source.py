"""A PySpark streaming data source over the Redis ingest stream.

Offsets are Redis stream ids, with the count of events consumed so far (a block entry
counts as the events it holds, any other entry as one: the events' ordinals), of entries,
and the registry version the micro-batch is planned with::

    {"id": "1732360000000-3", "n": 1200, "entries": 40, "registry": 4, "splits": [["1732...-0", 1100], ...]}

With the option ``groups`` (the job's key-group count) the reader also routes what it
reads (:class:`~spark_jobs.routing.Router`) and its rows are the routed ones
(:data:`~spark_jobs.routing.ROUTED`); without it, the raw entries (:data:`SCHEMA`). The
option ``placed`` (the job's shuffle partitions) gives each group the slot that places it
evenly on them (:mod:`spark_jobs.placement`).

``latestOffset`` finds the end of the next micro-batch without reading it on the
driver: one server-side script walks the entries that hold ``max_rows`` events (more by
at most the last block's) and returns only the last id and the ids that split the batch
into read partitions; after a full batch, the next one is walked in the background while
it runs (:class:`_NextPlan`). Executors read their id range in ``read`` (connections are
opened there, never pickled). A restart from the checkpoint replays a planned batch with
its own end offset and registry version, so it reads exactly the same rows and routes
them by the same registry.
"""

from __future__ import annotations

import logging
import threading
from typing import Iterator

import pyarrow as pa
import redis
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

from contract.connection import riding_out
from contract.entries import BLOCK_FIELD, COUNT_FIELD, EVENT_FIELD, block_count
from contract.keys import DEFAULT_PREFIX, Keys
from contract.registry import Registry
from penumbra.events import collector_paused

from .routing import ROUTED, Router, settle_heap

__all__ = ["IngestSource", "SCHEMA"]

#: One row per event or other ingest entry (a block's events one by one): its ordinal, id
#: (``<id>/<place>`` for a block's event), field (``e`` event, ``c`` control) and payload,
#: and the registry version of the micro-batch.
SCHEMA = "seq long, entry string, field string, data binary, registry long"
#: Events a read task takes from Redis at a time (about: in entries, at their mean so far).
READ_CHUNK = 10_000
WALK_CHUNK = 500
#: Entries the walk reads first, before it knows how many events an entry holds.
FIRST_TAKE = 4

log = logging.getLogger("penumbra.source")

# Walks the entries after ARGV[1] (exclusive) until they hold ARGV[2] events or the stream
# ends (an entry counts as the events it holds: a block's ``n`` (contract.entries.block_count),
# else one), and returns the registry version (KEYS[2]), the events walked, the entries
# walked, the last id walked, then pairs (id, events up to and with it) that end parts: with
# ARGV[3] parts, the ends of that many nearly equal parts of ARGV[2] events, or of those
# walked if fewer (the last one ends the batch; the background walk splits alike);
# with ARGV[3] = 0, the entries that reach the positions ARGV[5], ARGV[6], ... (those
# walked). A part ends at the entry that reaches its position, so a block is never split.
# One script, so the version is the one in force when the last entry of the batch was
# appended: an event appended after a registry change is routed by it.
# The walk goes in chunks of at most ARGV[4] (WALK_CHUNK) entries: Redis hands a script
# every entry it reads as Lua tables, and one table of a whole batch took twice as long (a
# batch of 100,000: 120-150 ms against 65-70 ms). A full batch's part ends are taken as the
# walk reaches them; when the stream holds less, the walk keeps where each chunk starts,
# its entries and the events before it, and finds each end in its chunk after (a short
# stream: a few entries). Every entry read is handed over whole, a block's events too, so the walk reads no
# more than it needs: a first chunk of FIRST_TAKE entries, then as many as the events still
# wanted take at the mean of the entries walked (in chunks of 500 entries, a batch of
# 100,000 events in blocks of 1,000 read 500 blocks where it needs 100: the drain fell by a
# third).
_PLAN = """
local version = redis.call('GET', KEYS[2]) or '0'
local wanted, parts, chunk = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local function weight(fields)
  local count = fields[4]
  if fields[1] == '%(block)s' and fields[3] == '%(count)s' and #count <= 9 and string.find(count, '^[1-9]%%d*$') then
    return tonumber(count)
  end
  return 1
end
-- where the parts end: at shares of ``total`` events (ARGV[3] parts), or at ARGV[5], ...
local function positions(total)
  local found = {}
  if parts > 0 then
    local share = math.min(parts, total)
    for part = 1, share do found[part] = math.floor(total * part / share) end
  else
    for i = 5, #ARGV do found[#found + 1] = tonumber(ARGV[i]) end
  end
  return found
end
-- a full batch's ends are known before the walk: each is taken as the walk reaches it
local targets, target, stops = positions(wanted), 1, {}
local starts, before, sizes, after, count, walked = {}, {}, {}, ARGV[1], 0, 0
local take = math.min(%(first)d, wanted)
while count < wanted do
  local entries = redis.call('XRANGE', KEYS[1], '(' .. after, '+', 'COUNT', take)
  if #entries == 0 then break end
  starts[#starts + 1] = after
  before[#before + 1] = count
  local used = #entries
  for i, entry in ipairs(entries) do
    count = count + weight(entry[2])
    while targets[target] and targets[target] <= count do
      stops[#stops + 1] = entry[1]
      stops[#stops + 1] = count
      target = target + 1
    end
    if count >= wanted then
      used = i
      break
    end
  end
  sizes[#sizes + 1] = used
  walked = walked + used
  after = entries[used][1]
  if #entries < take then break end
  -- as many entries as the events still wanted take at the mean so far, within a chunk
  take = math.max(1, math.min(chunk, math.ceil((wanted - count) * walked / count)))
end
local out = {version, count, walked, after}
if count == 0 then return out end
if count < wanted and parts > 0 then
  -- the stream held less than a batch: its parts end at shares of what was walked, each
  -- found in its chunk
  stops = {}
  for _, last in ipairs(positions(count)) do
    local index = #before
    while before[index] >= last do index = index - 1 end
    local reached = before[index]
    for _, entry in ipairs(redis.call('XRANGE', KEYS[1], '(' .. starts[index], '+', 'COUNT', sizes[index])) do
      reached = reached + weight(entry[2])
      if reached >= last then
        stops[#stops + 1] = entry[1]
        stops[#stops + 1] = reached
        break
      end
    end
  end
end
for _, value in ipairs(stops) do out[#out + 1] = value end
return out
""" % {"block": BLOCK_FIELD, "count": COUNT_FIELD, "first": FIRST_TAKE}
#: Events a batch read with no limit (``Trigger.AvailableNow``) may take: all there are.
_ALL = 1 << 50
_BLOCK = BLOCK_FIELD.encode()
#: Events one call of the plan's script walks when the next batch is planned in the
#: background (:class:`_NextPlan`): Redis serves the readers and the sink between calls.
SEGMENT = 5_000

_clients: dict[str, redis.Redis] = {}


def _client(url: str) -> redis.Redis:
    """The driver's connection (never part of a pickled reader)."""
    if url not in _clients:
        _clients[url] = riding_out(url)
    return _clients[url]


class Range(InputPartition):
    """Entries after ``start`` up to ``stop`` (ids), the first numbered ``first``."""

    def __init__(self, start: str, stop: str, first: int, registry: int):
        self.start, self.stop, self.first, self.registry = start, stop, first, registry


class IngestSource(DataSource):
    """``spark.readStream.format("penumbra_ingest").option("url", ...).load()``"""

    @classmethod
    def name(cls) -> str:
        return "penumbra_ingest"

    def schema(self) -> str:
        return ROUTED if "groups" in self.options else SCHEMA

    def streamReader(self, schema) -> IngestReader:
        return IngestReader(self.options)


class IngestReader(DataSourceStreamReader):
    def __init__(self, options):
        self.url = options["url"]
        self.keys = Keys(options.get("prefix", DEFAULT_PREFIX))
        self.max_rows = int(options.get("maxrows", 100_000))
        self.parts = int(options.get("parts", 1))
        self.groups = int(options["groups"]) if "groups" in options else None
        self.placed = int(options.get("placed", 0))
        self.plan = None
        self.next_plan: _NextPlan | None = None

    def initialOffset(self) -> dict:
        return {"id": "0-0", "n": 0, "entries": 0, "registry": 0, "splits": []}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_rows)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        client = _client(self.url)
        if self.plan is None:
            self.plan = client.register_script(_PLAN)
        rows = self.max_rows if not isinstance(limit, ReadMaxRows) else limit.max_rows
        if isinstance(limit, ReadAllAvailable):
            rows = max(rows, _ALL)
        planned = self.next_plan.stops(start["id"], rows, self.parts) if self.next_plan is not None else None
        self.next_plan = None
        if planned is not None:
            # walked while the batch before ran; the version is read now, after its last entry
            registry, (count, walked, stops) = int(client.get(self.keys.version) or 0), planned
        else:
            found = self.plan(keys=[self.keys.ingest, self.keys.version],
                              args=[start["id"], rows, self.parts, WALK_CHUNK])
            registry, count, walked, stops = int(found[0]), int(found[1]), int(found[2]), _stops(found[4:])
        if count == 0:
            return start if registry == start["registry"] else {**start, "registry": registry, "splits": []}
        if count >= rows:
            # a backlog: walk the next batch while this one is read, routed and written
            self.next_plan = _NextPlan(self.plan, self.keys, stops[-1][0], rows, self.parts)
        return {"id": stops[-1][0], "n": start["n"] + count, "entries": start.get("entries", start["n"]) + walked,
                "registry": registry, "splits": [[s, start["n"] + n] for s, n in stops]}

    def stop(self) -> None:
        if self.next_plan is not None:
            self.next_plan.cancel()

    def partitions(self, start: dict, end: dict) -> list[Range]:
        if start == end:
            return []
        if not end["splits"]:
            # the registry moved with no new entries: one empty range still routes its changes
            return [Range(start["id"], start["id"], start["n"], end["registry"])]
        bounds = [[start["id"], start["n"]]] + end["splits"]
        return [Range(lo[0], hi[0], lo[1] + 1, end["registry"]) for lo, hi in zip(bounds, bounds[1:])]

    def read(self, partition: Range) -> Iterator[pa.RecordBatch]:
        settle_heap()
        router = Router(self.url, self.keys.prefix, self.groups, self.placed, partition.first) \
            if self.groups is not None else None
        for seqs, ids, fields, data in self._entries(partition):
            if router is None:
                yield pa.RecordBatch.from_pydict({"seq": seqs, "entry": ids, "field": fields, "data": data,
                                                  "registry": [partition.registry] * len(ids)}, schema=_ARROW)
            else:
                yield _routed(router.route(partition.registry, zip(seqs, ids, fields, data)))
        if router is not None:
            yield _routed(router.close(partition.registry))

    def _entries(self, partition: Range) -> Iterator[tuple[list, list, list, list]]:
        """The partition's events and other entries in chunks: ordinals, ids, fields and
        payloads. A block's events come one by one, each with its entry's id and its place
        in the block (``<id>/<place>``, what a dead letter names) and the next ordinals (the
        plan counted them by the block's ``n``); a block whose lines are not ``n`` comes
        whole, field ``b``, to be rejected. XRANGE's reply is taken as it comes (no dict per
        entry), with the collector paused while a chunk is taken apart
        (:func:`~penumbra.events.collector_paused`)."""
        if partition.start == partition.stop:
            return
        client = riding_out(self.url)
        client.set_response_callback("XRANGE", _as_sent)
        try:
            after, seq, take = partition.start, partition.first, FIRST_TAKE
            while True:
                with collector_paused():
                    entries = client.xrange(self.keys.ingest, f"({after}", partition.stop, count=take)
                    if not entries:
                        break
                    seqs, ids, fields, data = [], [], [], []
                    for entry_id, values in entries:
                        text = entry_id.decode()
                        # an entry has one field (``e`` or ``c``) or a block's two; of others, the first counts
                        field = values[0] if values else b"?"
                        count = block_count(values) if field == _BLOCK else None
                        lines = values[1].split(b"\n") if count is not None else None
                        if lines is not None and len(lines) == count:
                            seqs += range(seq, seq + count)
                            ids += [f"{text}/{place}" for place in range(count)]
                            fields += [EVENT_FIELD] * count
                            data += lines
                        else:
                            seqs.append(seq)
                            ids.append(text)
                            fields.append(field.decode("ascii", "replace"))
                            data.append(values[1] if len(values) > 1 else b"")
                        seq += count or 1
                    after = entries[-1][0].decode()
                    more = len(entries) == take
                    take = max(1, READ_CHUNK * len(entries) // len(seqs))
                    del entries
                yield seqs, ids, fields, data
                if not more:
                    break
        finally:
            client.close()

    def commit(self, end: dict) -> None:
        """Entries before a committed batch's end are never read again: trim them. Nor are
        registry versions before the one it was planned with: release them."""
        client = _client(self.url)
        if end["id"] != "0-0":
            client.xtrim(self.keys.ingest, minid=end["id"], approximate=True)
        if end.get("registry"):
            Registry(client, self.keys).release(end["registry"])


class _NextPlan:
    """The split ids of the full batch of ``rows`` events after ``after``, walked in a
    background thread of the driver while the batch before it runs (the walk of a batch of
    100,000 entries takes Redis some 80 ms, during which the executors would otherwise
    wait). The walk goes :data:`SEGMENT` events per call of the script; if the stream holds
    fewer than ``rows`` events after ``after``, there is no plan and the batch is walked
    when it is planned, so it takes every entry there is by then."""

    def __init__(self, plan, keys: Keys, after: str, rows: int, parts: int):
        self.plan, self.keys, self.after, self.rows, self.parts = plan, keys, after, rows, parts
        self.found: tuple[int, int, list[tuple[str, int]]] | None = None
        self.cancelled = threading.Event()
        self.thread = threading.Thread(target=self._walk, name="penumbra-next-plan", daemon=True)
        self.thread.start()

    def _walk(self) -> None:
        try:
            parts = min(self.parts, self.rows)
            # the positions the plan of a full batch splits at (as the script computes them)
            ends = [self.rows * part // parts for part in range(1, parts + 1)]
            after, done, walked, found = self.after, 0, 0, []
            while done < self.rows:
                if self.cancelled.is_set():
                    return
                take = min(SEGMENT, self.rows - done)
                reply = self.plan(keys=[self.keys.ingest, self.keys.version],
                                  args=[after, take, 0, WALK_CHUNK, *[end - done for end in ends if end > done]])
                if int(reply[1]) < take:
                    return
                found += [(stop, done + n) for stop, n in _stops(reply[4:])]
                after, done, walked = reply[3].decode(), done + int(reply[1]), walked + int(reply[2])
            self.found = done, walked, found
        except redis.RedisError as error:
            log.warning("walking the next batch in the background failed (%s); it is walked when planned", error)

    def stops(self, after: str, rows: int, parts: int) -> tuple[int, int, list[tuple[str, int]]] | None:
        """The events and entries walked and the split ids with the events up to each, if
        this is the plan of that batch and the stream held all of it."""
        if (after, rows, parts) != (self.after, self.rows, self.parts):
            self.cancel()
            return None
        self.thread.join()
        return self.found

    def cancel(self) -> None:
        self.cancelled.set()


def _stops(reply: list) -> list[tuple[str, int]]:
    """The plan's pairs (id, events up to and with it), each id once (several positions may
    fall in one block)."""
    stops: list[tuple[str, int]] = []
    for at in range(0, len(reply) - 1, 2):
        stop = reply[at].decode()
        if not stops or stops[-1][0] != stop:
            stops.append((stop, int(reply[at + 1])))
    return stops


def _as_sent(response, **options):
    return response


def _routed(rows: list[tuple]) -> pa.RecordBatch:
    columns = list(zip(*rows)) or [[] for _ in _ROUTED_ARROW.names]
    return pa.RecordBatch.from_arrays([pa.array(column, type=field.type)
                                       for column, field in zip(columns, _ROUTED_ARROW)], schema=_ROUTED_ARROW)


_ROUTED_ARROW = pa.schema([("qid", pa.string()), ("grp", pa.int32()), ("seq", pa.int64()), ("kind", pa.string()),
                           ("data", pa.binary()), ("raw", pa.binary()), ("registry", pa.int64()),
                           ("slot", pa.int32())])
_ARROW = pa.schema([("seq", pa.int64()), ("entry", pa.string()), ("field", pa.string()),
                    ("data", pa.binary()), ("registry", pa.int64())])
