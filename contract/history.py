"""A query's history: the archive (:mod:`contract.archive`) read with DuckDB, and the live
tail in Redis.

Every read names its files (those that count, :func:`contract.archive.files`) and lets
DuckDB filter, order, count and stream them; nothing loads a period into Python. The
live tail (the result stream) is merged in by entry id, so what the job has written
and not yet archived (or before the archive began) is there too, each match once.

Times are milliseconds since the epoch; a period is ``[since, until)``. A cursor is a
match's id, ``<at>-<seq>``: the id of its entry in the result stream and of its row in
the archive, ordered by time and place in the batch.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from penumbra.probability import meets

from .alarms import key_json
from .archive import day_of, days, files, queries as archived_queries, started
from .entries import read_match

__all__ = ["Filters", "History", "Period", "parse_cursor", "parse_time", "period_of"]

_MATCH_COLUMNS = 'id, "at", seq, batch, events, prob, range_lo, range_hi, "key", alarm, times, "partition"'
_DAY_MS = 86_400_000


_LAST = re.compile(r"^(\d+(?:\.\d+)?)\s*(m|h|d)$")
_UNIT_MS = {"m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_time(raw: str | None, field: str) -> int | None:
    """A time given as ISO 8601 (UTC unless it names its zone) or milliseconds since the
    epoch, in milliseconds; a ValueError names ``field``."""
    if raw is None or raw.strip() == "":
        return None
    text = raw.strip()
    if re.fullmatch(r"\d{1,16}", text):
        return int(text)
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ValueError(f"{field} must be an ISO 8601 time (2026-11-24T03:00:00Z) or milliseconds since the "
                         f"epoch; got {raw!r}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    return int(when.timestamp() * 1000)


def period_of(since: str | None, until: str | None, last: str | None, now_ms: int) -> Period:
    """``since``/``until`` or ``last`` (90m, 24h, 7d up to until or now) as a period; a
    ValueError says what is wrong and starts with the field's name."""
    start, end = parse_time(since, "since"), parse_time(until, "until")
    if last is not None:
        if since is not None:
            raise ValueError("last: give since or last, not both")
        found = _LAST.match(last.strip())
        if not found:
            raise ValueError(f"last must be minutes, hours or days, e.g. 90m, 24h, 7d; got {last!r}")
        amount, unit = found.groups()
        start = max(0, (end if end is not None else now_ms) - int(float(amount) * _UNIT_MS[unit]))
    if start is not None and end is not None and start >= end:
        raise ValueError("since must be before until")
    return Period(start, end)


def parse_cursor(cursor: str) -> tuple[int, int]:
    at, seq = cursor.split("-", 1)
    return int(at), int(seq)


def key_matches(spelled: str | None, wanted: dict | None) -> bool:
    """Whether an instance's key (canonical JSON) has the attributes ``wanted`` asks for."""
    if wanted is None:
        return True
    key = json.loads(spelled) if spelled else None
    if not isinstance(key, dict):
        return False
    return all(name in key and key_json({name: key[name]}) == key_json({name: value})
               for name, value in wanted.items())


@dataclass(frozen=True)
class Period:
    since: int | None = None
    until: int | None = None

    def holds(self, at: int) -> bool:
        return (self.since is None or at >= self.since) and (self.until is None or at < self.until)


@dataclass(frozen=True)
class Filters:
    period: Period = field(default_factory=Period)
    key: dict | None = None
    min_prob: float | None = None

    def match(self, item: dict) -> bool:
        return (self.period.holds(round(item["at"] * 1000))
                and (self.min_prob is None or item["prob"] >= self.min_prob)
                and key_matches(key_json(item.get("key")), self.key))


class History:
    """Reads of one archive root (and, when given, the Redis holding the live tail)."""

    def __init__(self, root: Path, redis=None, keys=None, retention_days: float = 0):
        self.root, self.redis, self.keys, self.retention_days = Path(root), redis, keys, retention_days
        self._local = threading.local()
        self._opened: list[duckdb.DuckDBPyConnection] = []
        self._lock = threading.Lock()

    @property
    def db(self) -> duckdb.DuckDBPyConnection:
        con = getattr(self._local, "db", None)
        if con is None:
            con = self._local.db = _connect()
            with self._lock:
                self._opened.append(con)
        return con

    def close(self) -> None:
        """Closes every thread's connection (their worker threads end with them)."""
        with self._lock:
            opened, self._opened = self._opened, []
        for con in opened:
            try:
                con.close()
            except duckdb.Error:
                pass
        self._local = threading.local()

    def knows(self, query: str) -> bool:
        return query in archived_queries(self.root)

    # --- the part of SQL every read shares ----------------------------------------------------

    def _source(self, query: str, filters: Filters, kind: str = "match") -> tuple[str, list] | None:
        """``FROM ... WHERE ...`` over the query's files of the period, or None (no file)."""
        paths = files(self.root, query, filters.period.since, filters.period.until)
        if not paths:
            return None
        where, args = ["kind = ?"], [kind]
        if filters.period.since is not None:
            where.append('"at" >= ?')
            args.append(filters.period.since)
        if filters.period.until is not None:
            where.append('"at" < ?')
            args.append(filters.period.until)
        if filters.min_prob is not None and kind == "match":
            where.append("prob >= ?")
            args.append(filters.min_prob)
        if filters.key is not None and kind == "match":
            sample = self._sample_key(paths)
            if sample is not None and set(json.loads(sample)) == set(filters.key):
                # every attribute of the query's key named: one canonical key, compared as it is stored
                where.append('"key" = ?')
                args.append(key_json(filters.key))
            else:
                keys = [k for k in self._keys(paths) if key_matches(k, filters.key)]
                if not keys:
                    return None
                where.append('"key" IN (' + ", ".join("?" for _ in keys) + ")")
                args += keys
        listed = _listed(paths)
        return f"FROM read_parquet([{listed}], union_by_name = true) WHERE {' AND '.join(where)}", args

    def _sample_key(self, paths: Sequence[Path]) -> str | None:
        """One key of the files (a query's keys all have the same attributes), or None."""
        found = self.db.execute(f"SELECT \"key\" FROM read_parquet([{_listed(paths)}], union_by_name = true) "
                                f"WHERE kind = 'match' AND \"key\" IS NOT NULL LIMIT 1").fetchall()
        return found[0][0] if found else None

    def _keys(self, paths: Sequence[Path]) -> list[str]:
        listed = _listed(paths)
        return [k for (k,) in self.db.execute(
            f"SELECT DISTINCT \"key\" FROM read_parquet([{listed}], union_by_name = true) WHERE kind = 'match' AND \"key\" IS NOT NULL").fetchall()]

    def _run(self, build):
        """Runs a read; a file compacted away under it is listed again (twice at most)."""
        for attempt in range(3):
            try:
                return build()
            except (duckdb.IOException, duckdb.InvalidInputException, FileNotFoundError):
                if attempt == 2:
                    raise
                time.sleep(0.05)

    # --- a page ---------------------------------------------------------------------------

    def page(self, query: str, filters: Filters, limit: int, after: str | None = None) -> tuple[list[dict], str | None]:
        """Matches in time order after the cursor ``after``: ``limit`` of them and the
        cursor of the next page (None: the period holds no more now)."""
        cursor = parse_cursor(after) if after else None
        archived = self._run(lambda: self._archived_page(query, filters, limit + 1, cursor))
        live = self._live_page(query, filters, limit + 1, after)
        merged: dict[str, dict] = {}
        for item in archived + live:
            merged.setdefault(item["id"], item)
        items = sorted(merged.values(), key=lambda item: parse_cursor(item["id"]))
        more = len(items) > limit
        items = items[:limit]
        return items, (items[-1]["id"] if more and items else None)

    def find(self, query: str, match: str) -> dict | None:
        """One archived match by its id, with its events (``records``) and factors when
        the archive has them."""
        at, seq = parse_cursor(match)
        source = self._source(query, Filters(Period(at, at + 1)))
        if source is None:
            return None
        sql, args = source

        def read() -> list:
            try:
                return self.db.execute(f"SELECT {_MATCH_COLUMNS}, records, factors {sql} AND seq = ?",
                                       [*args, seq]).fetchall()
            except duckdb.BinderException:       # files written before matches kept their events
                return [(*row, None, None) for row in self.db.execute(
                    f"SELECT {_MATCH_COLUMNS} {sql} AND seq = ?", [*args, seq]).fetchall()]

        rows = self._run(read)
        if not rows:
            return None
        *row, records, factors = rows[0]
        return {**_item(row), "records": json.loads(records) if records else None,
                "factors": json.loads(factors) if factors else None}

    def _archived_page(self, query: str, filters: Filters, count: int, cursor) -> list[dict]:
        """The archive's next ``count`` matches after ``cursor``, a day's files at a time
        (a row's day is its time's), each day in two steps: the page's places ordered on
        the narrow columns, then its rows read within their time span only."""
        since, until = filters.period.since, filters.period.until
        if cursor is not None:
            since = max(since, cursor[0]) if since is not None else cursor[0]
        first = day_of(since) if since is not None else None
        last = day_of(until - 1) if until is not None else None
        out: list[dict] = []
        for day in days(self.root, query):
            if (first and day < first) or (last and day > last):
                continue
            start = _day_start(day)
            lo = start if since is None else max(since, start)
            hi = start + _DAY_MS if until is None else min(until, start + _DAY_MS)
            source = self._source(query, Filters(Period(lo, hi), filters.key, filters.min_prob))
            if source is None:
                continue
            sql, args = source
            if cursor is not None:
                sql += ' AND "at" >= ? AND ("at" > ? OR seq > ?)'
                args = [*args, cursor[0], cursor[0], cursor[1]]
            need = count - len(out)
            places = self.db.execute(f'SELECT "at" {sql} ORDER BY "at", seq LIMIT {int(need)}', args).fetchall()
            if not places:
                continue
            rows = self.db.execute(f'SELECT {_MATCH_COLUMNS} {sql} AND "at" BETWEEN ? AND ? ORDER BY "at", seq '
                                   f'LIMIT {int(need)}', [*args, places[0][0], places[-1][0]]).fetchall()
            out += [_item(row) for row in rows]
            if len(out) >= count:
                break
        return out

    def _live_page(self, query: str, filters: Filters, count: int, after: str | None) -> list[dict]:
        """The result stream's matches after the cursor (a read of at most a few pages)."""
        bounds = _stream_range(filters.period, after)
        if self.redis is None or bounds is None:
            return []
        low, high = bounds
        out: list[dict] = []
        for _ in range(5):
            found = self.redis.xrange(self.keys.matches(query), low, high, count=count)
            out += [item for item in (read_match(i, f) for i, f in found) if filters.match(item)]
            if len(out) >= count or len(found) < count:
                break
            low = f"({found[-1][0].decode()}"
        return out[:count]

    # --- what the archive holds ------------------------------------------------------------

    def unavailable(self, query: str, filters: Filters, created: float | None, now_ms: int) -> list[dict]:
        """Parts of the period the history cannot serve: past the archive's retention, and
        before the archive began (its first batch) where the live tail does not reach back
        either. A query's matches begin when it was registered (``created``, seconds)."""
        out = []
        since = filters.period.since
        until = filters.period.until if filters.period.until is not None else now_ms
        if created is not None:
            since = max(since, round(created * 1000)) if since is not None else round(created * 1000)
        if since is None or since >= until:
            return out
        if self.retention_days > 0:
            cutoff = now_ms - round(self.retention_days * _DAY_MS)
            cutoff -= cutoff % _DAY_MS
            if since < cutoff:
                out.append({"since": since, "until": min(cutoff, until),
                            "reason": f"past the archive's retention of {self.retention_days:g} days"})
                since = cutoff
        began = started(self.root)
        if began is None or since < began:
            oldest_live = self._oldest_live(query)
            # the live tail reaches back to its oldest entry when the stream holds any (else not at all)
            known = [x for x in (began, oldest_live) if x is not None]
            reach = min(known) if known else until
            if since < reach:
                out.append({"since": since, "until": min(reach, until),
                            "reason": "before the archive began, and past what the live tail holds"})
        return out

    def _oldest_live(self, query: str) -> int | None:
        """How far back the live tail reaches (ms): its oldest entry's time, 0 when the
        stream was never trimmed (it holds every match), None when it holds nothing."""
        if self.redis is None:
            return None
        try:
            info = self.redis.xinfo_stream(self.keys.matches(query))
        except Exception:  # noqa: BLE001 - no stream, or Redis away: the archive alone answers
            return None
        if not info.get("length"):
            return None
        if int(info.get("entries-added", -1)) == int(info["length"]):
            return 0
        first = info.get("first-entry")
        return parse_cursor(first[0].decode() if isinstance(first[0], bytes) else first[0])[0] if first else None

    # --- summaries ----------------------------------------------------------------------------

    def count(self, query: str, filters: Filters) -> int:
        """The period's matches (archive and live tail)."""
        total, top = 0, None
        source = self._run(lambda: self._source(query, filters))
        if source is not None:
            sql, args = source
            total, top = self.db.execute(f'SELECT count(*), max("at" * 1000000 + seq) {sql}', args).fetchall()[0]
        if filters.key is not None or filters.min_prob is not None or self.redis is None:
            return int(total) + sum(1 for _ in self._tail(query, filters, top))
        # a period alone: the live tail's entries beyond the archive's newest are counted in Redis
        bounds = _stream_range(filters.period, f"{top // 1000000}-{top % 1000000}" if top is not None else None)
        if bounds is None:
            return int(total)
        return int(total) + int(self.redis.eval(_COUNT_RANGE, 1, self.keys.matches(query), *bounds))

    def summary(self, query: str, filters: Filters, bucket_ms: int) -> dict:
        """Matches per time bucket and per key over the period (archive and live tail)."""
        buckets: dict[int, int] = {}
        by_key: dict[str | None, int] = {}
        top = None
        source = self._run(lambda: self._source(query, filters))
        if source is not None:
            sql, args = source
            for start, n in self.db.execute(
                    f'SELECT "at" - "at" % {int(bucket_ms)} AS b, count(*) {sql} GROUP BY b', args).fetchall():
                buckets[int(start)] = int(n)
            for key, n in self.db.execute(f'SELECT "key", count(*) {sql} GROUP BY "key"', args).fetchall():
                by_key[key] = int(n)
            top = self._newest(sql, args)
        for item in self._tail(query, filters, top):
            at = round(item["at"] * 1000)
            buckets[at - at % bucket_ms] = buckets.get(at - at % bucket_ms, 0) + 1
            spelled = key_json(item.get("key"))
            by_key[spelled] = by_key.get(spelled, 0) + 1
        return {"total": sum(buckets.values()),
                "buckets": [{"start": b, "matches": n} for b, n in sorted(buckets.items())],
                "keys": [{"key": json.loads(k) if k else None, "matches": n}
                         for k, n in sorted(by_key.items(), key=lambda kv: (-kv[1], kv[0] or ""))]}

    def _tail(self, query: str, filters: Filters, top: int | None) -> Iterator[dict]:
        """The live tail's matches after the archive's newest (``at * 10**6 + seq``)."""
        after = f"{top // 1000000}-{top % 1000000}" if top is not None else None
        while True:
            page = self._live_page(query, filters, 10_000, after)
            yield from page
            if len(page) < 10_000:
                return
            after = page[-1]["id"]

    def _newest(self, sql: str, args: list) -> int | None:
        return self.db.execute(f'SELECT max("at" * 1000000 + seq) {sql}', args).fetchall()[0][0]

    # --- export -------------------------------------------------------------------------------

    def export(self, query: str, filters: Filters, fmt: str, rows_per_chunk: int = 65_536) -> Iterator[bytes]:
        """The period's matches in time order as CSV or Parquet, chunk by chunk."""
        source = self._source(query, filters)
        sink = io.BytesIO()
        schema = pa.schema([("id", pa.string()), ("at", pa.int64()), ("time", pa.string()), ("batch", pa.int64()),
                            ("events", pa.string()), ("prob", pa.float64()), ("range_lo", pa.float64()),
                            ("range_hi", pa.float64()), ("key", pa.string()), ("alarm", pa.string()),
                            ("times", pa.string()), ("partition", pa.string())])
        writer = (pq.ParquetWriter(sink, schema, compression="zstd") if fmt == "parquet"
                  else pacsv.CSVWriter(sink, schema))
        top = None
        if source is not None:
            sql, args = source
            top = self._newest(sql, args)
            # a connection of its own: the stream is read on whatever thread consumes it
            reader = _connect().sql(
                f"SELECT id, \"at\", strftime(make_timestamp(\"at\" * 1000), '%Y-%m-%dT%H:%M:%S.%gZ') AS time, batch, "
                f"events, prob, range_lo, range_hi, \"key\", alarm, times, \"partition\" {sql} ORDER BY \"at\", seq",
                params=args
            ).to_arrow_reader(rows_per_chunk)
            for batch in reader:
                writer.write_table(pa.Table.from_batches([batch]).cast(schema))
                yield _drain(sink)
        tail = [_row(item) for item in self._tail(query, filters, top)]
        if tail:
            writer.write_table(pa.Table.from_pylist(tail, schema=schema))
        writer.close()
        yield _drain(sink)

    # --- backtest -----------------------------------------------------------------------------

    def backtest(self, query: str, filters: Filters, thresholds: Sequence[float], quiet_ms: int | None) -> dict:
        """At each threshold: the period's matches (archived matches and near misses at or
        above it), the alarms that would have opened (an episode per key at its first
        match, and again after ``quiet_ms`` without one: counted over the archived matches,
        so a lower bound where near misses reach the threshold, ``near_at_least``), the
        period's matches (archive and live tail) and near misses."""
        t = np.asarray(thresholds, dtype=float)
        matches = np.zeros(len(t))
        alarms = np.zeros(len(t))
        near_at_least = np.zeros(len(t))
        near_total = archived = 0
        matched = Filters(filters.period, filters.key)
        source = self._run(lambda: self._source(query, matched))
        parts, args = [], []
        top = None
        if source is not None:
            sql, args = source
            parts.append(f'SELECT "key", "at", prob {sql}')
            top = self._newest(sql, args)
        tail = [_row(item) for item in self._tail(query, matched, top)]
        db = self.db
        if tail:
            db.register("live_tail", pa.Table.from_pylist([{"key": r["key"], "at": r["at"], "prob": r["prob"]}
                                                           for r in tail]))
            parts.append("SELECT \"key\", \"at\", prob FROM live_tail")
        if parts:
            union = " UNION ALL ".join(parts)
            probs = db.execute(f"SELECT prob FROM ({union})", args).fetchnumpy()["prob"]
            archived = len(probs)
            matches += [int(np.count_nonzero(meets(probs, x))) for x in t]
            if quiet_ms is None:
                # no auto-resolve: a key opens once, at its first match at or above t
                high = db.execute(f'SELECT max(prob) AS high FROM ({union}) GROUP BY "key"', args).fetchnumpy()["high"]
                alarms += [int(np.count_nonzero(meets(high, x))) for x in t]
            else:
                frame = f"RANGE BETWEEN {max(0, int(quiet_ms) - 1)} PRECEDING AND 1 PRECEDING"
                opened = db.execute(
                    f'SELECT high, coalesce(max(high) OVER (PARTITION BY "key" ORDER BY "at" {frame}), -1.0) AS before '
                    f'FROM (SELECT "key", "at", max(prob) AS high FROM ({union}) GROUP BY "key", "at")',
                    args).fetchnumpy()
                high, before = opened["high"], opened["before"]
                # a (key, batch) opens an episode at t when its highest reaches t and no batch of
                # the key within the quiet time before it does
                alarms += [int((meets(high, x) & ~meets(before, x)).sum()) for x in t]
        if tail:
            db.unregister("live_tail")
        near = self._run(lambda: self._source(query, Filters(filters.period), kind="near"))
        if near is not None and filters.key is None:
            sql, args = near
            bins = self.db.execute(f'SELECT prob, sum("count") AS n {sql} GROUP BY prob', args).fetchnumpy()
            edges, counts = bins["prob"], bins["n"].astype(np.int64)
            near_total = int(counts.sum())
            near_at_least += [int(counts[edges >= x - 1e-9].sum()) for x in t]
            matches += near_at_least
        return {"matches": matches.tolist(), "alarms": alarms.tolist(), "near_at_least": near_at_least.tolist(),
                "near_misses": near_total, "archived": archived}


def _stream_range(period: Period, after: str | None) -> tuple[str, str] | None:
    """XRANGE's bounds for a period's entries after a cursor (None: the period holds none)."""
    if period.until is not None and period.until <= 0:
        return None
    since = period.since
    low = f"({after}" if after else (f"{since}-0" if since is not None else "-")
    if after and since is not None and parse_cursor(after)[0] < since:
        low = f"{since}-0"
    high = f"{period.until - 1}-18446744073709551615" if period.until is not None else "+"
    return low, high


#: The entries of a stream between two ids (XRANGE's forms), counted where they are.
_COUNT_RANGE = """
local n, low = 0, ARGV[1]
while true do
  local found = redis.call('XRANGE', KEYS[1], low, ARGV[2], 'COUNT', 10000)
  n = n + #found
  if #found < 10000 then return n end
  low = '(' .. found[#found][1]
end
"""


def _listed(paths: Sequence[Path]) -> str:
    """Paths as SQL string literals, comma separated."""
    return ", ".join("'" + str(p).replace("'", "''") + "'" for p in paths)


def _connect() -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB that reads Parquet and never fetches an extension."""
    return duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False,
                                  "threads": 2})


def _drain(sink: io.BytesIO) -> bytes:
    data = sink.getvalue()
    sink.seek(0)
    sink.truncate()
    return data


def _row(item: dict) -> dict:
    """A live match as an export row."""
    at = round(item["at"] * 1000)
    rng = item.get("range") or (None, None)
    return {"id": item["id"], "at": at, "time": dt.datetime.fromtimestamp(at / 1000, dt.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z", "batch": item.get("batch"),
        "events": json.dumps(item["events"], separators=(",", ":")), "prob": item["prob"], "range_lo": rng[0],
        "range_hi": rng[1], "key": key_json(item.get("key")), "alarm": item.get("alarm"),
        "times": json.dumps(item["times"], separators=(",", ":")) if item.get("times") else None,
        "partition": item.get("partition")}


def _day_start(day: str) -> int:
    return int(dt.datetime.strptime(day, "%Y-%m-%d").replace(tzinfo=dt.timezone.utc).timestamp() * 1000)


def _item(row: Sequence[Any]) -> dict:
    match_id, at, seq, batch, events, prob, lo, hi, key, alarm, times, partition = row
    return {"id": match_id, "events": json.loads(events), "prob": prob,
            "range": [lo, hi] if lo is not None else None, "batch": batch, "at": at / 1000.0,
            "alarm": alarm, "key": json.loads(key) if key else None, "times": json.loads(times) if times else None,
            "partition": partition}
