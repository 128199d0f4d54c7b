"""A PySpark streaming data source over the Redis ingest stream.

Offsets are Redis stream ids, with the count of entries consumed so far and the
registry version the micro-batch is planned with::

    {"id": "1732360000000-3", "n": 1200, "registry": 4, "splits": [["1732...-0", 1100], ...]}

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

from .store import Keys

__all__ = ["IngestSource", "SCHEMA"]

#: One row per ingest entry: its ordinal, id, field (``e`` event, ``c`` control) and
#: payload, and the registry version of the micro-batch.
SCHEMA = "seq long, entry string, field string, data binary, registry long"
READ_CHUNK = 10_000

# Walks at most ARGV[2] entries after ARGV[1] (exclusive); returns their count and the
# ids that end each of ARGV[3] nearly equal parts (the last one ends the batch).
_PLAN = """
local entries = redis.call('XRANGE', KEYS[1], '(' .. ARGV[1], '+', 'COUNT', ARGV[2])
local count = #entries
local out = {count}
if count == 0 then return out end
local parts = math.max(1, math.min(tonumber(ARGV[3]), count))
for part = 1, parts do
  out[#out + 1] = entries[math.floor(count * part / parts)][1]
end
return out
"""

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
        return SCHEMA

    def streamReader(self, schema) -> IngestReader:
        return IngestReader(self.options)


class IngestReader(DataSourceStreamReader):
    def __init__(self, options):
        self.url = options["url"]
        self.keys = Keys(options.get("prefix", "pn"))
        self.max_rows = int(options.get("maxrows", 100_000))
        self.parts = int(options.get("parts", 1))
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
        registry = int(client.get(self.keys.version) or 0)
        found = self.plan(keys=[self.keys.ingest], args=[start["id"], rows, self.parts])
        count = int(found[0])
        if count == 0:
            return start if registry == start["registry"] else {**start, "registry": registry, "splits": []}
        stops = [s.decode() for s in found[1:]]
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
        if partition.start == partition.stop:
            yield pa.RecordBatch.from_pydict({"seq": [], "entry": [], "field": [], "data": [], "registry": []},
                                             schema=_ARROW)
            return
        client = redis.Redis.from_url(self.url)
        try:
            after, seq = partition.start, partition.first
            while True:
                entries = client.xrange(self.keys.ingest, f"({after}", partition.stop, count=READ_CHUNK)
                if not entries:
                    break
                ids, fields, data = [], [], []
                for entry_id, values in entries:
                    field, payload = next(iter(values.items())) if values else (b"?", b"")
                    ids.append(entry_id.decode())
                    fields.append(field.decode("ascii", "replace"))
                    data.append(payload)
                yield pa.RecordBatch.from_pydict({
                    "seq": list(range(seq, seq + len(ids))), "entry": ids, "field": fields, "data": data,
                    "registry": [partition.registry] * len(ids)}, schema=_ARROW)
                seq += len(ids)
                after = ids[-1]
                if len(entries) < READ_CHUNK:
                    break
        finally:
            client.close()

    def commit(self, end: dict) -> None:
        """Entries before a committed batch's end are never read again: trim them."""
        if end["id"] != "0-0":
            _client(self.url).xtrim(self.keys.ingest, minid=end["id"], approximate=True)


_ARROW = pa.schema([("seq", pa.int64()), ("entry", pa.string()), ("field", pa.string()),
                    ("data", pa.binary()), ("registry", pa.int64())])
