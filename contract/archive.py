"""The archive: every match, and every join's near misses by probability, kept past the live cap.

The job writes it (:class:`ArchiveWriter`, from the sink), the service and ``penumbra
export`` read it (:func:`files`), a background pass of the job compacts and expires it
(:func:`maintain`). Layout, under the archive's root (``PENUMBRA_ARCHIVE``, default
``<home>/var/archive``), Hive style::

    query=<query id>/date=<YYYY-MM-DD>/b-<job>-<batch>.parquet      one micro-batch's rows
    query=<query id>/date=<YYYY-MM-DD>/c-<job>-<first>-<last>.parquet  batches first..last, compacted

``date`` is the UTC day of the rows' ``at`` (the time the batch was written). One row per
match (``kind`` = ``match``) with the fields of its live entry (:data:`SCHEMA`), its
``id`` the very cursor of its entry in the result stream; and per batch one row per
hundredth of probability holding near misses (``kind`` = ``near``, ``prob`` the bin's
lower edge, ``count`` how many), down to the archive's floor.

Exactly once: a batch's files are named by the batch, written under a temporary name and
renamed (atomic), and all of them before the batch's Redis transaction. A batch that
Spark runs again after a crash writes the same rows to the same names (its time is kept
in Redis, :meth:`ArchiveWriter.batch_time`); a batch id is never written twice otherwise.

Compaction merges a day's batch files of one job into one ``c-`` file naming the batches
it holds; a reader takes, per job, the compacted files no other contains and the batch
files none covers (:func:`live`), so a file compacted and not yet deleted counts once. The
covered files are deleted by a later pass, after a grace period (a reader that listed them
has read them by then; one that has not lists again). Only committed batches are compacted.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence
from urllib.parse import quote, unquote

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from .alarms import instance_id, key_json, key_mark

__all__ = ["ArchiveFile", "ArchiveWriter", "SCHEMA", "day_of", "files", "live", "maintain", "queries",
           "query_dir", "started"]

SCHEMA = pa.schema([
    pa.field("id", pa.string()),        # the match's cursor, "<at>-<seq>": its live entry's id (null: near)
    pa.field("at", pa.int64()),         # milliseconds since the epoch at which the batch was written
    pa.field("seq", pa.int64()),        # the row's place in its batch (matches first, in the live order)
    pa.field("batch", pa.int64()),
    pa.field("job", pa.string()),
    pa.field("kind", pa.string()),      # match | near
    pa.field("events", pa.string()),    # JSON {variable: event id}, in the query's order
    pa.field("prob", pa.float64()),     # a near row: its bin's lower edge
    pa.field("count", pa.int64()),      # 1 for a match; a near row: candidates in its bin
    pa.field("range_lo", pa.float64()),  # a pattern match's time range
    pa.field("range_hi", pa.float64()),
    pa.field("times", pa.string()),     # JSON {variable: [earliest, latest]}: the events' time supports
    pa.field("partition", pa.string()),  # a join match's probing range: lpr, sr or rpr
    pa.field("key", pa.string()),       # the key's canonical JSON (null: a query without one)
    pa.field("alarm", pa.string()),     # the alarm instance
    pa.field("group", pa.int32()),      # the key group
    pa.field("records", pa.string()),   # JSON {variable: event}: the matched events (Match.records)
    pa.field("factors", pa.string()),   # JSON [factor]: a lossy match's probability taken apart
])

_JOB = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
_BATCH = re.compile(r"^b-(?P<job>[A-Za-z0-9_.\-]+)-(?P<lo>\d{12,})\.parquet$")
_COMPACTED = re.compile(r"^c-(?P<job>[A-Za-z0-9_.\-]+)-(?P<lo>\d{12,})-(?P<hi>\d{12,})\.parquet$")
_DAY = re.compile(r"^date=(\d{4}-\d{2}-\d{2})$")
#: rows per Parquet row group: a reader skips the groups outside the times it asks for
ROW_GROUP = 65_536
#: the file holding when the archive began (ms): its first batch's time
STARTED = "_started"
#: seconds a file covered by a compacted one is kept before it is deleted
GRACE_SECONDS = 60.0


def day_of(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).strftime("%Y-%m-%d")


def started(root: Path) -> int | None:
    """When the archive began (its first batch's time, ms), or None: nothing archived yet."""
    try:
        return int((Path(root) / STARTED).read_text())
    except (FileNotFoundError, ValueError):
        return None


def query_dir(root: Path, query: str) -> Path:
    return Path(root) / f"query={quote(query, safe='')}"


def queries(root: Path) -> list[str]:
    """The query ids the archive holds rows of."""
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted(unquote(p.name[6:]) for p in root.iterdir() if p.name.startswith("query=") and p.is_dir())


def _text(value) -> str | None:
    """A match's times, records or factors as JSON text (None for none); given as their JSON
    or as values."""
    if not value:
        return None
    return value.decode() if type(value) is bytes else orjson.dumps(value).decode()


@dataclass(frozen=True)
class ArchiveFile:
    path: Path
    job: str
    lo: int
    hi: int

    @property
    def compacted(self) -> bool:
        return self.path.name.startswith("c-")

    def covers(self, other: ArchiveFile) -> bool:
        return (self.job == other.job and self.lo <= other.lo and other.hi <= self.hi
                and (self.lo, self.hi) != (other.lo, other.hi))


def _parse(path: Path) -> ArchiveFile | None:
    m = _BATCH.match(path.name)
    if m:
        return ArchiveFile(path, m["job"], int(m["lo"]), int(m["lo"]))
    m = _COMPACTED.match(path.name)
    if m:
        return ArchiveFile(path, m["job"], int(m["lo"]), int(m["hi"]))
    return None


def live(day: Path) -> tuple[list[ArchiveFile], list[ArchiveFile]]:
    """A day folder's files that count, and those a compacted file covers (to delete)."""
    found = [f for f in (_parse(p) for p in day.iterdir()) if f is not None] if day.is_dir() else []
    counted = [f for f in found if not any(other.covers(f) for other in found if other.compacted)]
    covered = [f for f in found if f not in counted]
    return sorted(counted, key=lambda f: (f.job, f.lo)), covered


def days(root: Path, query: str) -> list[str]:
    folder = query_dir(root, query)
    if not folder.is_dir():
        return []
    return sorted(m[1] for m in (_DAY.match(p.name) for p in folder.iterdir()) if m)


def files(root: Path, query: str, since_ms: int | None = None, until_ms: int | None = None) -> list[Path]:
    """The files holding a query's rows written between ``since_ms`` and ``until_ms``
    (whole days: a reader still filters on ``at``), each row in exactly one of them."""
    first = day_of(since_ms) if since_ms is not None else None
    last = day_of(until_ms) if until_ms is not None else None
    out = []
    for day in days(root, query):
        if (first and day < first) or (last and day > last):
            continue
        out += [f.path for f in live(query_dir(root, query) / f"date={day}")[0]]
    return out


def _atomic_write(table: pa.Table, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.parent / f".tmp-{uuid.uuid4().hex}.parquet"
    try:
        pq.write_table(table, temporary, compression="zstd", row_group_size=ROW_GROUP)
        with open(temporary, "rb") as written:
            os.fsync(written.fileno())
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)


def _float(value) -> float | None:
    return None if value is None else float(value)


class ArchiveWriter:
    """The sink's writer: :meth:`write` one batch's rows of every query."""

    def __init__(self, root: Path, job: str, floor: float = 0.0):
        if not _JOB.match(job):
            raise ValueError(f"a job id names files: letters, digits, '_', '.', '-'; got {job!r}")
        self.root, self.job, self.floor = Path(root), job, floor

    def batch_time(self, client, keys, batch: int, now_ms: int) -> int:
        """The batch's time in milliseconds: the one its first attempt took (kept in
        ``pn:archive:attempts``), else ``now_ms``, later than the job's previous batch's."""
        raw = client.hget(keys.archive_attempts, self.job)
        if raw is not None:
            seen, at = (int(x) for x in raw.split(b" "))
            if seen == batch:
                return at
            now_ms = max(now_ms, at + 1)
        client.hset(keys.archive_attempts, self.job, f"{batch} {now_ms}")
        return now_ms

    def write(self, batch: int, at: int, matches: dict[str, Sequence[tuple]],
              near: dict[str, dict[str, int]]) -> list[Path]:
        """Writes each query's rows of the batch: ``matches[q]`` as ``(match JSON, key
        group, key, probability[, times[, partition[, records[, factors]]]])`` in their live order
        (times, records and factors as values or as their JSON), ``near[q]`` the batch's near-miss
        histogram (bin's lower edge as text -> count). Returns the files written."""
        written = []
        day = day_of(at)
        if not (self.root / STARTED).exists():
            self.root.mkdir(parents=True, exist_ok=True)
            temporary = self.root / f".tmp-{uuid.uuid4().hex}"
            temporary.write_text(str(at))
            os.replace(temporary, self.root / STARTED)
        for query in sorted({*matches, *near}):
            rows = list(matches.get(query, ()))
            bins = sorted((float(edge), int(n)) for edge, n in (near.get(query) or {}).items()
                          if n and float(edge) >= self.floor - 1e-12)
            if not rows and not bins:
                continue
            count = len(rows) + len(bins)
            ids, events, probs, lo, hi, keys, alarms, groups, times, parts = [], [], [], [], [], [], [], [], [], []
            records: list[str | None] = []
            factors: list[str | None] = []
            spelled_of: dict[tuple | None, tuple[str | None, str]] = {}
            for seq, (data, group, key, prob, *known) in enumerate(rows):
                match = orjson.loads(data)
                # a batch's matches share few keys: each spelled once
                marker = key_mark(key)
                spelled, alarm = spelled_of.get(marker) or spelled_of.setdefault(
                    marker, (key_json(key), instance_id(query, key)))
                rng = match.get("range")
                ids.append(f"{at}-{seq}")
                events.append(orjson.dumps(match["events"]).decode())
                probs.append(float(match["prob"]))
                lo.append(_float(rng[0]) if rng else None)
                hi.append(_float(rng[1]) if rng else None)
                keys.append(spelled)
                alarms.append(alarm)
                groups.append(int(group))
                times.append(_text(known[0]) if known else None)
                parts.append(known[1] if len(known) > 1 and known[1] else None)
                records.append(_text(known[2]) if len(known) > 2 else None)
                factors.append(_text(known[3]) if len(known) > 3 else None)
            for edge, _ in bins:
                ids.append(None)
                events.append(None)
                probs.append(edge)
                lo.append(None)
                hi.append(None)
                keys.append(None)
                alarms.append(None)
                groups.append(None)
                times.append(None)
                parts.append(None)
                records.append(None)
                factors.append(None)
            table = pa.table({
                "id": ids, "at": [at] * count, "seq": list(range(count)), "batch": [batch] * count,
                "job": [self.job] * count, "kind": ["match"] * len(rows) + ["near"] * len(bins),
                "events": events, "prob": probs, "count": [1] * len(rows) + [n for _, n in bins],
                "range_lo": lo, "range_hi": hi, "times": times, "partition": parts, "key": keys, "alarm": alarms,
                "group": groups, "records": records, "factors": factors},
                schema=SCHEMA)
            target = query_dir(self.root, query) / f"date={day}" / f"b-{self.job}-{batch:012d}.parquet"
            _atomic_write(table, target)
            written.append(target)
        return written


def _compact(day: Path, counted: list[ArchiveFile], committed: dict[str, int], whole_day: bool,
             min_files: int) -> Path | None:
    """Merges a day's committed files of one job into one, when worth it."""
    by_job: dict[str, list[ArchiveFile]] = {}
    for f in counted:
        if f.hi <= committed.get(f.job, -1):
            by_job.setdefault(f.job, []).append(f)
    made = None
    for job, group in by_job.items():
        small = [f for f in group if not f.compacted]
        if len(group) < 2 or (not whole_day and len(small) < min_files):
            continue
        if not whole_day:
            group = small  # today: the batch files into one more compacted file, earlier ones kept
        lo, hi = min(f.lo for f in group), max(f.hi for f in group)
        # a batch file of the range not in the group (not committed) would be hidden: leave the range
        if any(f.job == job and lo <= f.lo <= hi and f not in group for f in counted):
            continue
        table = pa.concat_tables([pq.read_table(f.path, schema=SCHEMA) for f in group]).sort_by(
            [("at", "ascending"), ("seq", "ascending")])
        made = day / f"c-{job}-{lo:012d}-{hi:012d}.parquet"
        _atomic_write(table, made)
    return made


def maintain(root: Path, committed: dict[str, int], *, now: float | None = None, retention_days: float = 0,
             min_files: int = 50, grace: float = GRACE_SECONDS) -> dict[str, int]:
    """One background pass over the archive: deletes what retention and compaction left
    behind, then compacts each query's past days into one file per job and today's batch
    files once there are ``min_files`` of them. Safe against a concurrent reader (see the
    module) and a crash at any point (a pass reruns from what it finds)."""
    wall = time.time()   # files' ages (grace) on the clock that stamped them; ``now`` decides days
    now = wall if now is None else now
    root = Path(root)
    today = day_of(int(now * 1000))
    cutoff = day_of(int((now - retention_days * 86400) * 1000)) if retention_days > 0 else None
    done = {"deleted": 0, "compacted": 0, "expired": 0}
    for query in queries(root):
        folder = query_dir(root, query)
        for day in days(root, query):
            where = folder / f"date={day}"
            if cutoff is not None and day < cutoff:
                for path in where.iterdir():
                    path.unlink(missing_ok=True)
                where.rmdir()
                done["expired"] += 1
                continue
            for path in where.glob(".tmp-*"):
                if path.stat().st_mtime < wall - max(grace, 3600):
                    path.unlink(missing_ok=True)  # left by a crash mid-write
            counted, covered = live(where)
            for f in covered:
                try:
                    if _newest_cover(f, counted) < wall - grace:
                        f.path.unlink()
                        done["deleted"] += 1
                except FileNotFoundError:
                    pass
            if _compact(where, counted, committed, day < today, min_files) is not None:
                done["compacted"] += 1
    return done


def _newest_cover(f: ArchiveFile, counted: Iterable[ArchiveFile]) -> float:
    """When the compacted file covering ``f`` was made (the grace runs from then)."""
    return max((c.path.stat().st_mtime for c in counted if c.covers(f)), default=0.0)
