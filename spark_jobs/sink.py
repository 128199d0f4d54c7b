"""The foreachBatch sink: a micro-batch's results into Redis, exactly once.

Everything a batch writes goes in one MULTI/EXEC together with the job's
committed-batch marker, and a batch id at or below the marker is skipped: a batch
that Spark re-runs after a crash (same id, same rows) writes nothing twice, and one
that crashed before EXEC is written in full by the re-run.

Per query: its matches (``pn:out:matches:<qid>``: the match JSON, batch id, key
group and alarm instance) and the records of the alarm instances they touch
(``pn:instances:<qid>``, :mod:`contract.results`), its observations combined over its key groups (``pn:out:obs:<qid>``; groups that
slept through the batch count with their last state, kept in ``pn:groups:<qid>``), and
its late events with their reasons in the dead-letter stream ``pn:dead``, beside the
entries the router rejected; running totals in ``pn:counts``. A PUBLISH on ``pn:live``
names what changed. Before the transaction, the batch's matches and near misses go to the
archive (:mod:`contract.archive`), under the batch's time that names its entries too. A query that failed in the batch (its error in an ``f`` row) is
quarantined in the registry first (:meth:`~contract.registry.Registry.fail`).

The sink writes behind: ``foreachBatch`` collects the batch, stores its rows in Redis
(``pn:pending:<job>``, Arrow IPC, one SET) and returns, and a thread writes them while
Spark commits and runs the next batch; the batch's MULTI/EXEC deletes the stored rows.
Spark commits a batch only once its rows are stored, so a crash at any point leaves them
either written or stored: the next start writes stored rows first
(:meth:`Sink.recover`), and Spark's re-run of the batch then finds the marker. One batch
is written at a time, in order: the next ``foreachBatch`` waits for the write before
storing its own rows (and raises its error). A batch in which a query failed is written
before ``foreachBatch`` returns, so the next batch is planned with the query quarantined.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import defaultdict

import pyarrow as pa
import pyarrow.compute as pc
import redis

from contract.archive import ArchiveWriter
from contract.connection import asking_once, patiently, riding_out
from contract.dead import DEAD_MAX_MB, queue_dead, trim_dead
from contract.entries import late_letter, live_batch, observation_entry, rejected_letter
from contract.keys import Keys
from contract.registry import Registry
from contract.results import queue_matches, read_match_payload
from penumbra.events import collector_paused
from penumbra.keyed import PER_BLOCK, combine, state_part

__all__ = ["Sink"]

log = logging.getLogger("penumbra.job")

#: Transactions a batch's write tries while the marker moves under it (other jobs' batches)
WATCH_TRIES = 20


class Sink:
    """``writeStream.foreachBatch(Sink(...))``; ``job`` names the checkpoint whose batch
    ids the marker counts (a new checkpoint starts again from batch 0)."""

    def __init__(self, url: str, keys: Keys, job: str, result_maxlen: int, dead_maxlen: int, obs_maxlen: int,
                 dead_max_bytes: int = DEAD_MAX_MB * 1024 * 1024, archive: ArchiveWriter | None = None):
        self.url, self.keys, self.job = url, keys, job
        self.archive = archive
        self.result_maxlen, self.dead_maxlen, self.obs_maxlen = result_maxlen, dead_maxlen, obs_maxlen
        self.dead_max_bytes = dead_max_bytes
        self._client: redis.Redis | None = None
        #: per batch id, milliseconds of the plan's execution (read, route, state: ``sink_plan``),
        #: of waiting for the write before it (``sink_wait``), of storing its rows
        #: (``sink_store``) and of its writes (``sink_archive``, ``sink_redis``); the metrics
        #: listener takes them (:meth:`pop_timings`; the last few are kept)
        self.timings: dict[int, dict[str, float]] = {}
        self._writing: threading.Thread | None = None
        #: the error of the last write behind, raised by the next call (the job stops on it too)
        self.failure: BaseException | None = None

    @property
    def client(self) -> redis.Redis:
        if self._client is None:
            # a call is never sent again by the client: a MULTI/EXEC Redis ran before the
            # connection broke would write twice; write_once finds out what took effect
            self._client = asking_once(self.url)
        return self._client

    def __call__(self, frame, batch_id: int) -> None:
        if self._written(batch_id):
            # written before a crash, not yet committed by Spark: the plan still runs, so every
            # state store commits this batch's state (Spark refuses a batch that skips them)
            frame.write.format("noop").mode("overwrite").save()
            log.info("batch %d: already written; state committed, nothing written again", batch_id)
            return
        # the batch's rows and what is made of them are freed as they go out of use: the collector
        # would only scan them, in pauses of tens of milliseconds (a batch of 12,090 matches
        # written in 246-320 ms with it on, 245-259 with it paused)
        with collector_paused():
            started = time.perf_counter()
            rows = frame.toArrow()
            collected = time.perf_counter()
            self.wait()
            timings = self.timings.setdefault(batch_id, {})
            timings["sink_plan"] = round((collected - started) * 1000, 1)
            timings["sink_wait"] = round((time.perf_counter() - collected) * 1000, 1)
            if pc.any(pc.equal(rows.column("kind"), "f")).as_py():
                self.write_once(rows, batch_id)      # the quarantine before the next batch is planned
                return
            patiently(f"batch {batch_id}: storing its rows", lambda: self.store(rows, batch_id))
        self._writing = threading.Thread(target=self._write_behind, args=(rows, batch_id),
                                         name=f"penumbra-sink-{batch_id}", daemon=True)
        self._writing.start()

    def store(self, rows: pa.Table, batch_id: int) -> None:
        """Keeps a collected batch's rows in Redis until :meth:`write` has written them: what
        Spark commits once ``foreachBatch`` returns is then never lost."""
        stored = time.perf_counter()
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, rows.schema, options=pa.ipc.IpcWriteOptions(compression="lz4")) as writer:
            writer.write_table(rows)
        self.client.set(self.keys.pending(self.job), str(batch_id).encode() + b"\n" + sink.getvalue().to_pybytes())
        self.timings.setdefault(batch_id, {})["sink_store"] = round((time.perf_counter() - stored) * 1000, 1)

    def recover(self) -> int | None:
        """Writes the batch stored before a crash, if Redis has not got it yet (the id of the
        batch written, if any); the job calls it before it starts its streaming query."""
        stored = patiently("the stored batch", lambda: self.client.get(self.keys.pending(self.job)))
        if stored is None:
            return None
        head, _, body = stored.partition(b"\n")
        batch_id = int(head)
        if self._written(batch_id):
            patiently("the stored batch", lambda: self.client.delete(self.keys.pending(self.job)))
            return None
        rows = pa.ipc.open_stream(body).read_all()
        with collector_paused():
            self.write_once(rows, batch_id)
        log.info("batch %d: written on restart from the rows stored before a crash", batch_id)
        return batch_id

    def _write_behind(self, rows: pa.Table, batch_id: int) -> None:
        try:
            with collector_paused():
                self.write_once(rows, batch_id)
        except BaseException as error:     # noqa: BLE001 - raised by the next call; the job stops on it
            log.error("batch %d: writing failed (its rows stay stored for the next start): %s", batch_id, error)
            self.failure = error

    def wait(self) -> None:
        """Until the batch being written behind is written; raises its error."""
        if self._writing is not None:
            self._writing.join()
            self._writing = None
        if self.failure is not None:
            raise RuntimeError(f"the sink's last write failed: {self.failure}") from self.failure

    def close(self) -> None:
        """Waits for the write behind (on stop); an error is logged, its rows stay stored."""
        try:
            self.wait()
        except RuntimeError as error:
            log.warning("%s", error)

    def pop_timings(self, batch_id: int) -> dict[str, float]:
        """A batch's timings, with those of the writes that finished since the batch before
        (a batch's write runs during the next one): what the metrics report of the batch."""
        out = self.timings.pop(batch_id, {})
        for earlier in sorted(b for b in list(self.timings) if b < batch_id):
            written = self.timings[earlier]
            if "sink_redis" not in written:
                continue
            for name in ("sink_archive", "sink_redis"):
                if name in written:
                    out[name] = round(out.get(name, 0.0) + written.pop(name), 1)
            if not written:
                self.timings.pop(earlier, None)
        return out

    def _written(self, batch_id: int) -> bool:
        """The batch is written (the job's marker is at it or beyond)."""
        committed = patiently(f"batch {batch_id}: the marker", lambda: self.client.hget(self.keys.batches, self.job))
        return committed is not None and batch_id <= int(committed)

    def write_once(self, rows: pa.Table, batch_id: int) -> None:
        """:meth:`write`; after a lost connection, again once Redis answers (for up to
        :data:`~contract.connection.OUTAGE_SECONDS`: a Redis restart costs a pause), and
        :meth:`write` finds the batch written if the write under way took effect."""
        def step() -> None:
            for _ in range(WATCH_TRIES):
                try:
                    return self.write(rows, batch_id)
                except redis.WatchError:
                    # the marker moved under the transaction: another job's batch, or this
                    # one's from an attempt whose connection broke; the next try finds out
                    continue
            raise RuntimeError(f"batch {batch_id}: the job's marker kept moving under {WATCH_TRIES} transactions")
        patiently(f"batch {batch_id}: writing", step)

    def write(self, rows: pa.Table, batch_id: int) -> None:
        """Writes the rows of a batch (an Arrow table of :data:`~spark_jobs.processor.OUTPUT`)
        and the committed-batch marker in one MULTI/EXEC, unless the marker covers the batch
        (watched until EXEC: raises WatchError if it moved)."""
        keys, client = self.keys, self.client
        rows = {name: rows.column(name).to_pylist() for name in ("qid", "grp", "kind", "data", "raw")}
        executed = time.perf_counter()
        now = time.time()
        # the batch's time: its entries' ids and its archived rows name it, the same when Spark runs it again
        at = self.archive.batch_time(client, keys, batch_id, int(now * 1000)) if self.archive else int(now * 1000)
        matches: dict[str, list] = defaultdict(list)
        observations: dict[str, dict[int, dict]] = defaultdict(dict)
        states: dict[str, dict[int, dict | None]] = defaultdict(dict)
        dead, ended = [], []
        # an event that reaches several key groups (roles keyed on different attributes, or
        # a role not keyed) is judged by each alike: each report counts once, as many times
        # as one group makes it (once a side), as one operator fed every event would
        late_reports: dict[tuple[str, str, str, str], dict[int, int]] = {}
        failed: dict[str, dict] = {}
        for query, group, kind, data, raw in zip(rows["qid"], rows["grp"], rows["kind"], rows["data"], rows["raw"]):
            group = int(group)
            if kind == "m":
                matches[query].append((data, group, *read_match_payload(raw)))
            elif kind == "o":
                observations[query][group] = json.loads(data)
            elif kind == "g":
                info = json.loads(data)
                states[query][group] = None if info.get("dropped") else info
            elif kind == "l":
                late = json.loads(data)
                by_group = late_reports.setdefault((query, late["stream"], late["id"], late["reason"]), {})
                by_group[group] = by_group.get(group, 0) + 1
            elif kind == "r":
                rejected = json.loads(data)
                dead.append(rejected_letter(rejected["reason"], raw if raw is not None else b"", now,
                                            entry=rejected["entry"], **({"index": rejected["index"]}
                                                                        if "index" in rejected else {})))
            elif kind == "x":
                ended.append(json.loads(data)["entry"])
            elif kind == "f":
                failure = json.loads(data)
                failed.setdefault(failure["query"], failure)
        not_processed: dict[str, dict[str, int]] = defaultdict(lambda: {"late": 0, "rejected": 0})
        for (query, stream, event_id, reason), by_group in late_reports.items():
            times = max(by_group.values())
            dead += [late_letter(query, stream, event_id, reason, now) for _ in range(times)]
            not_processed[query]["late" if reason.startswith("late:") else "rejected"] += times
        self._quarantine(failed, batch_id)
        if self.archive is not None:
            # before the batch's transaction: a crash in between writes the same files again
            archived = time.perf_counter()
            self.archive.write(batch_id, at, matches, {q: _near_histogram(o.values()) for q, o in observations.items()})
            self.timings.setdefault(batch_id, {})["sink_archive"] = round((time.perf_counter() - archived) * 1000, 1)
        kept = {query: {int(g): json.loads(v) for g, v in client.hgetall(keys.groups(query)).items()}
                for query in observations}
        pipe = client.pipeline(transaction=True)
        # the marker is watched from here to EXEC: should Redis run a transaction of this batch
        # whose connection broke after all, whichever of the two comes second aborts
        pipe.watch(keys.batches)
        committed = pipe.hget(keys.batches, self.job)
        if committed is not None and batch_id <= int(committed):
            pipe.reset()
            log.info("batch %d: written already; nothing written again", batch_id)
            return
        pipe.multi()
        for query, found in matches.items():
            queue_matches(pipe, keys, query, batch_id, found, self.result_maxlen, at)
        for query, by_group in observations.items():
            groups = kept[query]
            for group, observed in by_group.items():
                groups[group] = {"state": state_part(observed), **(states[query].get(group) or {})}
            record = combine([{k: v for k, v in o.items() if k in PER_BLOCK} for o in by_group.values()]
                             + [g["state"] for g in groups.values()])
            if "counters" in record:
                # the groups' own counts take an event that reached several of them once a group
                record["counters"].update(not_processed.get(query, {"late": 0, "rejected": 0}))
            record.update(groups=len(groups), ran=len(by_group),
                          snapshot_bytes=sum(g.get("snapshot_bytes", 0) for g in groups.values()))
            pipe.xadd(keys.observations(query), observation_entry(record, batch_id), maxlen=self.obs_maxlen,
                      approximate=True)
            pipe.hset(keys.groups(query), mapping={g: json.dumps(v) for g, v in groups.items()})
        for query, by_group in states.items():
            gone = [g for g, info in by_group.items() if info is None]
            if gone:
                pipe.hdel(keys.groups(query), *gone)
        queue_dead(pipe, keys, dead, self.dead_maxlen)
        for kind in ("rejected", "late"):
            count = sum(1 for entry in dead if entry["kind"] == kind)
            if count:
                pipe.hincrby(keys.counts, kind, count)
        pipe.hincrby(keys.counts, "matches", sum(map(len, matches.values())))
        for entry in ended:
            pipe.hset(keys.ended, entry, batch_id)
        pipe.hset(keys.batches, self.job, batch_id)
        pipe.delete(keys.pending(self.job))
        pipe.publish(keys.live, live_batch(batch_id, now, {q: len(m) for q, m in matches.items()}, observations,
                                           len(dead)))
        pipe.execute()
        if dead:
            trim_dead(client, keys, self.dead_max_bytes)
        timings = self.timings.setdefault(batch_id, {})
        timings["sink_redis"] = round((time.perf_counter() - executed) * 1000 - timings.get("sink_archive", 0.0), 1)
        for old in [b for b in list(self.timings) if b < batch_id - 16]:
            self.timings.pop(old, None)
        log.info("batch %d: %d matches, %d dead letters written", batch_id,
                 sum(map(len, matches.values())), len(dead))

    def _quarantine(self, failed: dict[str, dict], batch_id: int) -> None:
        """Marks the queries that failed in the batch as failed in the registry, before the
        batch is written (whoever sees the batch sees the marks): the next micro-batches
        skip them while the rest go on. A batch replayed after a crash fails the same way
        and finds its marks made."""
        # the registry's changes are watched transactions, which redis-py never sends again
        # (a lost connection is a WatchError, and the change is tried afresh): a client that
        # waits for Redis, rather than the sink's, which would retry without a pause
        client = riding_out(self.url)
        try:
            registry = Registry(client, self.keys)
            for query, failure in failed.items():
                if registry.fail(query, failure["error"], seen_version=failure["version"], batch=batch_id) is not None:
                    log.warning("batch %d: query %s quarantined: %s", batch_id, query, failure["error"])
        finally:
            client.close()


def _near_histogram(observed) -> dict[str, int]:
    """A query's near misses of the batch by hundredth of probability, over its key groups."""
    out: dict[str, int] = {}
    for record in observed:
        for edge, n in (record.get("near_miss_histogram") or {}).items():
            out[edge] = out.get(edge, 0) + int(n)
    return out
