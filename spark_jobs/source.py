"""A PySpark streaming data source over the Redis ingest stream.

Offsets are Redis stream ids, with the count of entries consumed so far and the
registry version the micro-batch is planned with::

    {"id": "1732360000000-3", "n": 1200, "registry": 4, "splits": [["1732...-0", 1100], ...]}

With the option ``groups`` (the job's key-group count) the reader also routes what it
reads (:class:`~spark_jobs.routing.Router`) and its rows are the routed ones
(:data:`~spark_jobs.routing.ROUTED`); without it, the raw entries (:data:`SCHEMA`). The
option ``placed`` (the job's shuffle partitions) gives each group the slot that places it
evenly on them (:mod:`spark_jobs.placement`).

``latestOffset`` finds the end of the next micro-batch without reading it on the
driver: one server-side script walks at most ``max_rows`` entries and returns only the
last id and the ids that split the batch into read partitions. Executors read their
id range in ``read`` (connections are opened there, never pickled). A restart from the
checkpoint replays a planned batch with its own end offset and registry version, so it
reads exactly the same rows and routes them by the same registry.
"""

from __future__ import annotations

from typing import Iterator

import pyarrow as pa
import redis
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

from penumbra.events import collector_paused

from .routing import ROUTED, Router, settle_heap
from .store import Keys

__all__ = ["IngestSource", "SCHEMA"]

#: One row per ingest entry: its ordinal, id, field (``e`` event, ``c`` control) and
#: payload, and the registry version of the micro-batch.
SCHEMA = "seq long, entry string, field string, data binary, registry long"
READ_CHUNK = 10_000

# Walks at most ARGV[2] entries after ARGV[1] (exclusive); returns the registry version
# (KEYS[2]), their count and the ids that end each of ARGV[3] nearly equal parts (the last
# one ends the batch). One script, so the version is the one in force when the last entry
# of the batch was appended: an event appended after a registry change is routed by it.
# The walk goes in chunks of WALK_CHUNK entries and keeps only where each chunk starts:
# Redis hands a script every entry it reads as Lua tables, and one table of a whole batch
# took twice as long (a batch of 100,000: 120-150 ms against 65-70 ms). A part's last id is
# then read from its chunk.
_PLAN = """
local version = redis.call('GET', KEYS[2]) or '0'
local wanted, chunk = tonumber(ARGV[2]), tonumber(ARGV[4])
local starts, after, count = {}, ARGV[1], 0
while count < wanted do
  local take = math.min(chunk, wanted - count)
  local entries = redis.call('XRANGE', KEYS[1], '(' .. after, '+', 'COUNT', take)
  if #entries == 0 then break end
  starts[#starts + 1] = after
  count = count + #entries
  after = entries[#entries][1]
  if #entries < take then break end
end
local out = {version, count}
if count == 0 then return out end
local parts = math.max(1, math.min(tonumber(ARGV[3]), count))
for part = 1, parts do
  local last = math.floor(count * part / parts)
  local index = math.floor((last - 1) / chunk)
  local within = last - index * chunk
  local entries = redis.call('XRANGE', KEYS[1], '(' .. starts[index + 1], '+', 'COUNT', within)
  out[#out + 1] = entries[within][1]
end
return out
"""
WALK_CHUNK = 500

_clients: dict[str, redis.Redis] = {}


def _client(url: str) -> redis.Redis:
    """The driver's connection (never part of a pickled reader)."""
    if url not in _clients:
        _clients[url] = redis.Redis.from_url(url)
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
        self.keys = Keys(options.get("prefix", "pn"))
        self.max_rows = int(options.get("maxrows", 100_000))
        self.parts = int(options.get("parts", 1))
        self.groups = int(options["groups"]) if "groups" in options else None
        self.placed = int(options.get("placed", 0))
        self.plan = None

    def initialOffset(self) -> dict:
        return {"id": "0-0", "n": 0, "registry": 0, "splits": []}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_rows)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        client = _client(self.url)
        if self.plan is None:
            self.plan = client.register_script(_PLAN)
        rows = self.max_rows if not isinstance(limit, ReadMaxRows) else limit.max_rows
        if isinstance(limit, ReadAllAvailable):
            rows = max(rows, int(client.xlen(self.keys.ingest)))
        found = self.plan(keys=[self.keys.ingest, self.keys.version], args=[start["id"], rows, self.parts, WALK_CHUNK])
        registry, count = int(found[0]), int(found[1])
        if count == 0:
            return start if registry == start["registry"] else {**start, "registry": registry, "splits": []}
        stops = [s.decode() for s in found[2:]]
        ordinals = [start["n"] + count * (part + 1) // len(stops) for part in range(len(stops))]
        return {"id": stops[-1], "n": start["n"] + count, "registry": registry,
                "splits": [[s, n] for s, n in zip(stops, ordinals)]}

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
        router = Router(self.url, self.keys.prefix, self.groups, self.placed) if self.groups is not None else None
        for seqs, ids, fields, data in self._entries(partition):
            if router is None:
                yield pa.RecordBatch.from_pydict({"seq": seqs, "entry": ids, "field": fields, "data": data,
                                                  "registry": [partition.registry] * len(ids)}, schema=_ARROW)
            else:
                yield _routed(router.route(partition.registry, zip(seqs, ids, fields, data)))
        if router is not None:
            yield _routed(router.close(partition.registry))

    def _entries(self, partition: Range) -> Iterator[tuple[list, list, list, list]]:
        """The partition's entries in chunks: ordinals, ids, fields and payloads. XRANGE's
        reply is taken as it comes (no dict per entry), with the collector paused while a
        chunk is taken apart (:func:`~penumbra.events.collector_paused`)."""
        if partition.start == partition.stop:
            return
        client = redis.Redis.from_url(self.url)
        client.set_response_callback("XRANGE", _as_sent)
        try:
            after, seq = partition.start, partition.first
            while True:
                with collector_paused():
                    entries = client.xrange(self.keys.ingest, f"({after}", partition.stop, count=READ_CHUNK)
                    ids = [entry_id.decode() for entry_id, _ in entries]
                    # an entry has one field (``e`` or ``c``); of several, the first counts
                    fields = [values[0].decode("ascii", "replace") if values else "?" for _, values in entries]
                    data = [values[1] if values else b"" for _, values in entries]
                    del entries
                if not ids:
                    break
                yield list(range(seq, seq + len(ids))), ids, fields, data
                seq += len(ids)
                after = ids[-1]
                if len(ids) < READ_CHUNK:
                    break
        finally:
            client.close()

    def commit(self, end: dict) -> None:
        """Entries before a committed batch's end are never read again: trim them."""
        if end["id"] != "0-0":
            _client(self.url).xtrim(self.keys.ingest, minid=end["id"], approximate=True)


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
