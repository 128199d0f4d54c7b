"""The Spark Structured Streaming job: Redis in, every registered query as keyed state, Redis out.

::

    Redis pn:in --(IngestSource: read and route on executors)--> rows keyed by (query, key group), ticks
        --(groupBy + transformWithStateInPandas: GroupProcessor, RocksDB)--> matches, observations
        --(foreachBatch: Sink, one MULTI/EXEC per batch)--> Redis pn:out:*, pn:dead, pn:live

Run it with ``python -m spark_jobs`` (or the same module under ``spark-submit``); the
settings come from ``PENUMBRA_*`` environment variables (:class:`JobSettings`).
SIGTERM or Ctrl-C stops it between micro-batches and keeps the checkpoint, so the next
start resumes exactly where this one stopped.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
import uuid
from pathlib import Path

import redis
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery, StreamingQueryListener
from pyspark.sql.streaming.listener import JStreamingQueryListener

from contract.archive import ArchiveWriter, maintain
from contract.entries import live_metrics, metrics_entry
from contract.keys import Keys
from contract.logs import configure
from contract.settings import masked_url

from . import scratch
from .processor import OUTPUT, GroupProcessor
from .settings import JobSettings
from .sink import Sink
from .source import IngestSource

__all__ = ["Job", "build_session", "main"]

log = logging.getLogger("penumbra.job")

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
#: The checkpoint (always a local folder, :attr:`JobSettings.checkpoint_dir`) written through
#: Hadoop's FileSystem API: one rename(2) per file, atomic on a local file system. Spark's
#: default, the FileContext API, starts a ``readlink`` process for every file it renames
#: (offset and commit logs, each state store's changelog): some 90 processes a batch, and
#: 40 of a steady batch's 1,100 ms (bench/pipeline.py, docs/pipeline.md).
LOCAL_CHECKPOINTS = "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
#: Hadoop's local file system with permissions set through java.nio (spark_jobs/hadoop), built
#: by ``make setup`` into the venv. Without Hadoop's native library, which pip's PySpark lacks,
#: its own starts a ``chmod`` process for every file it creates.
LOCAL_FILE_SYSTEM = "penumbra.hadoop.LocalFileSystem"
LOCAL_FILE_SYSTEM_JAR = Path(sys.prefix) / "share" / "penumbra" / "penumbra-hadoop.jar"
#: The longest folder Spark's sockets to the Python workers fit in (a Unix socket's path holds
#: 107 bytes, and Spark names them ``/.<uuid>.sock``, 43)
SOCKET_FOLDER_CHARS = 64
HEARTBEAT_SECONDS = 1.0


def build_session(settings: JobSettings) -> SparkSession:
    """A SparkSession (bound to loopback unless the settings say otherwise), with RocksDB
    state, few shuffle partitions, Unix sockets to its Python workers, the settings' JVM
    options, and its temporary files in this process's scratch folder (spark_jobs/scratch.py)."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    folder = scratch.claim()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    package_root = str(Path(__file__).resolve().parent.parent)
    builder = (SparkSession.builder.master(settings.spark_master).appName("penumbra")
               .config("spark.driver.host", settings.driver_host)
               .config("spark.driver.bindAddress", settings.driver_bind)
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", str(settings.shuffle_partitions))
               .config("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
               .config("spark.sql.streaming.checkpointFileManagerClass", LOCAL_CHECKPOINTS)
               .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
               .config("spark.sql.execution.arrow.pyspark.enabled", "true")
               # the Python workers and the driver's collects talk to the JVM over Unix sockets: over
               # loopback TCP a small batch took 307-327 ms against 233-234 (docs/pipeline.md)
               .config("spark.python.unix.domain.socket.enabled", "true")
               .config("spark.executorEnv.PYTHONPATH", package_root)
               .config("spark.sql.streaming.noDataMicroBatches.enabled", "false"))
    if settings.state_memory_mb:
        # one memory budget for every state store of the process, write buffers within it
        builder = (builder.config("spark.sql.streaming.stateStore.rocksdb.boundedMemoryUsage", "true")
                   .config("spark.sql.streaming.stateStore.rocksdb.maxMemoryUsageMB", str(settings.state_memory_mb)))
    if settings.spark_master.startswith("local") and LOCAL_FILE_SYSTEM_JAR.exists():
        # the checkpoint's files with their permissions set in the JVM, not by a chmod process
        # each (3.5 ms; six or seven a batch). On a cluster the executors' JVMs lack the class.
        builder = (builder.config("spark.driver.extraClassPath", str(LOCAL_FILE_SYSTEM_JAR))
                   .config("spark.hadoop.fs.file.impl", LOCAL_FILE_SYSTEM))
    # the native libraries the JVM unpacks, Spark's sockets to the Python workers, and its
    # local folders (spark.local.dir, whose default is java.io.tmpdir: temporary files and
    # shuffle blocks): gone with the process, or at the next start if it was killed. On a
    # cluster each worker keeps its executors' files where it is set up to.
    driver_options = settings.java_options
    if "-Djava.io.tmpdir=" not in driver_options and not any(c.isspace() for c in str(folder)):
        driver_options = f"{driver_options} -Djava.io.tmpdir={folder}".strip()
        if len(str(folder)) > SOCKET_FOLDER_CHARS:
            # a Unix socket's path holds 107 bytes; Spark's are named .<uuid>.sock
            builder = builder.config("spark.python.unix.domain.socket.dir", "/tmp")
    archive = Path(settings.class_archive) if settings.class_archive else None
    if archive and archive.exists() and "ArchiveClasses" not in driver_options and "SharedArchive" not in driver_options:
        # Spark's classes mapped from the archive make setup built, not loaded and verified one
        # by one: the session starts in about half the time (docs/pipeline.md)
        driver_options = f"{driver_options} -XX:SharedArchiveFile={archive}"
    if driver_options:
        # the driver's take effect when this process starts the JVM (not under spark-submit)
        builder = builder.config("spark.driver.extraJavaOptions", driver_options)
    if settings.java_options:
        builder = builder.config("spark.executor.extraJavaOptions", settings.java_options)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    spark.dataSource.register(IngestSource)
    return spark


class Job:
    """One running job: its streaming query, its metrics listener and its heartbeat."""

    def __init__(self, spark: SparkSession, settings: JobSettings):
        self.spark = spark
        self.settings = settings
        self.keys = settings.keys
        self.client = redis.Redis.from_url(settings.redis_url)
        self.identity = self._identity()
        self.query: StreamingQuery | None = None
        self.sink: Sink | None = None
        self.listener: _Metrics | None = None
        self._stopped = threading.Event()

    def _identity(self) -> dict:
        """The checkpoint's job id, key-group count and the shuffle partitions its groups
        are placed on, kept beside Spark's checkpoint so a restart keeps them (the groups
        of existing state must not change; Spark keeps a checkpoint's shuffle partitions
        too). A checkpoint without ``placed`` keeps Spark's own placement by (qid, grp)."""
        folder = self.settings.checkpoint_dir
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "penumbra.json"
        placed = self.settings.shuffle_partitions if self.settings.place_groups else 0
        if path.exists():
            identity = json.loads(path.read_text())
            if identity["key_groups"] != self.settings.groups:
                log.warning("checkpoint %s has %d key groups; keeping them (setting asks for %d)",
                            folder, identity["key_groups"], self.settings.groups)
            if identity.get("placed", 0) != placed:
                log.warning("checkpoint %s places key groups on %s; keeping that (settings ask for %s)", folder,
                            _placement(identity.get("placed", 0)), _placement(placed))
            return identity
        identity = {"job": uuid.uuid4().hex, "key_groups": self.settings.groups, "placed": placed}
        path.write_text(json.dumps(identity))
        return identity

    def start(self) -> StreamingQuery:
        settings, keys = self.settings, self.keys
        groups = self.identity["key_groups"]
        url = settings.redis_url
        routed = (self.spark.readStream.format("penumbra_ingest")
                  .option("url", url).option("prefix", keys.prefix).option("groups", groups)
                  .option("placed", self.identity.get("placed", 0))
                  .option("maxRows", settings.max_rows_per_batch).option("parts", settings.read_partitions).load())
        # the slot is a function of (qid, grp): one state key per group, on the partition chosen
        keys_of_state = ("qid", "grp", "slot") if self.identity.get("placed") else ("qid", "grp")
        results = routed.groupBy(*keys_of_state).transformWithStateInPandas(
            GroupProcessor(url, keys.prefix, groups), OUTPUT, "Update", "None")
        sink = Sink(url, keys, self.identity["job"], settings.result_maxlen, settings.dead_maxlen, settings.obs_maxlen,
                    settings.dead_max_bytes, ArchiveWriter(settings.archive_dir, self.identity["job"],
                                                           settings.archive_floor) if settings.archive_write else None)
        self.sink = sink
        # rows stored before a crash are written before anything else, even with no new input
        sink.recover()
        self.listener = _Metrics(url, keys, sink, settings.metrics_maxlen, self.spark)
        self.spark.streams.addListener(self.listener)
        writer = (results.writeStream.foreachBatch(sink).queryName("penumbra")
                  .option("checkpointLocation", str(settings.checkpoint_dir / "spark")))
        if settings.trigger_seconds > 0:
            writer = writer.trigger(processingTime=f"{settings.trigger_seconds} seconds")
        self.query = writer.start()
        log.info("job %s started: redis %s, master %s, %d key groups, checkpoint %s", self.identity["job"],
                 masked_url(url), settings.spark_master, groups, settings.checkpoint_dir)
        threading.Thread(target=self._heartbeat, name="penumbra-heartbeat", daemon=True).start()
        if settings.archive_write:
            threading.Thread(target=self._maintain_archive, name="penumbra-archive", daemon=True).start()
        return self.query

    def _heartbeat(self) -> None:
        started = time.time()
        while not self._stopped.is_set():
            try:
                progress = self.listener.last if self.listener else {}
                self.client.hset(self.keys.heartbeat, mapping={
                    "job": self.identity["job"], "pid": os.getpid(), "started": started, "at": time.time(),
                    "master": self.settings.spark_master, "active": int(bool(self.query and self.query.isActive)),
                    "last_batch": progress.get("batch", -1), "last_batch_at": progress.get("at", 0)})
                self.client.expire(self.keys.heartbeat, int(10 * HEARTBEAT_SECONDS))
            except redis.RedisError as error:
                log.warning("heartbeat: %s", error)
            self._stopped.wait(HEARTBEAT_SECONDS)

    def _maintain_archive(self) -> None:
        """Compacts and expires the archive in the background (committed batches only)."""
        settings = self.settings
        while not self._stopped.wait(settings.archive_compact_seconds):
            try:
                committed = {job.decode(): int(batch) for job, batch in self.client.hgetall(self.keys.batches).items()}
                done = maintain(settings.archive_dir, committed, retention_days=settings.archive_retention_days,
                                min_files=settings.archive_compact_files)
                if any(done.values()):
                    log.info("archive: %(compacted)d days compacted, %(deleted)d files deleted, "
                             "%(expired)d days expired", done)
            except Exception as error:  # noqa: BLE001 - the next pass tries again; the job goes on
                log.warning("archive maintenance: %s", error)

    def stop(self) -> None:
        """Stop between micro-batches; the checkpoint stays for the next start."""
        self._stopped.set()
        if self.query is not None and self.query.isActive:
            self.query.stop()
        if self.sink is not None:
            self.sink.close()
        if self.listener is not None:
            self.spark.streams.removeListener(self.listener)
        try:
            self.client.hset(self.keys.heartbeat, "active", 0)
        except redis.RedisError:
            pass


class _Metrics(StreamingQueryListener):
    """Each micro-batch's progress into ``pn:metrics`` (at most ``maxlen`` reports) and the
    log: ingest entries read (``rows``; Spark's own count is of routed rows, a few per key
    group), duration, rates, lag behind the ingest stream (entries and seconds), state
    size, and the running totals of matches, rejected and late events."""

    def __init__(self, url: str, keys: Keys, sink: Sink, maxlen: int, spark: SparkSession | None = None):
        if spark is not None:
            # the JVM's listener thread hands each progress report over as one JSON text
            jvm = spark.sparkContext._jvm
            self._jlistenerobj = jvm.org.apache.spark.sql.streaming.PythonStreamingQueryListenerWrapper(
                _ProgressAsJson(self))
        self.client = redis.Redis.from_url(url)
        self.sink = sink
        self.keys = keys
        self.maxlen = maxlen
        self.last: dict = {}

    def onQueryStarted(self, event) -> None:
        pass

    def onQueryIdle(self, event) -> None:
        pass

    def onQueryTerminated(self, event) -> None:
        pass

    def onQueryProgress(self, event) -> None:
        self.report(json.loads(event.progress.json))

    def report(self, progress: dict) -> None:
        """One micro-batch's progress report, as Spark writes it in JSON (a rate it cannot
        say, NaN or infinite, is left out)."""
        batch = progress.get("batchId", -1)
        try:
            source = (progress.get("sources") or [{}])[0]
            start, end = _offset(source.get("startOffset")), _offset(source.get("endOffset"))
            # the source's rows are routed rows (a few per key group); what came in is events
            # (and marks): the offsets' n
            rows = max(0, int(end.get("n", 0)) - int(start.get("n", 0)))
            durations = dict(progress.get("durationMs") or {})
            duration_ms = durations.get("triggerExecution", 0)
            routed = progress.get("numInputRows") or 0
            info = self.client.xinfo_stream(self.keys.ingest) if self.client.exists(self.keys.ingest) else {}
            consumed = int(end.get("entries", end.get("n", 0)))   # offsets before blocks counted entries as n
            behind = max(0, int(info.get("entries-added", 0)) - consumed) if info else 0
            oldest = self.client.xrange(self.keys.ingest, f"({end['id']}", "+", count=1) if end and behind else []
            lag_seconds = max(0.0, time.time() - int(oldest[0][0].split(b"-")[0]) / 1000) if oldest else 0.0
            state = (progress.get("stateOperators") or [{}])[0]
            totals = {k.decode(): int(v) for k, v in self.client.hgetall(self.keys.counts).items()}
            metrics = {
                "batch": batch, "at": time.time(), "rows": rows, "routed_rows": routed,
                "duration_ms": duration_ms,
                "input_rate": rows * progress.get("inputRowsPerSecond", 0.0) / routed if routed else 0.0,
                "processed_rate": rows * 1000 / duration_ms if duration_ms else 0.0,
                "lag_entries": behind, "lag_seconds": round(lag_seconds, 3),
                "state_rows": state.get("numRowsTotal", 0), "state_bytes": state.get("memoryUsedBytes", 0),
                "rejected_total": totals.get("rejected", 0), "late_total": totals.get("late", 0),
                "matches_total": totals.get("matches", 0), "durations": durations,
                "sink_ms": self.sink.pop_timings(batch)}
            self.last = metrics
            pipe = self.client.pipeline(transaction=False)
            pipe.xadd(self.keys.metrics, metrics_entry(metrics), maxlen=self.maxlen, approximate=True)
            pipe.publish(self.keys.live, live_metrics(metrics))
            pipe.execute()
            # the ingest entries the batch read, (from_id, to_id]: what follows a request's
            # first_id and last_id (the API logs them with its request id) to its batch
            log.info("batch %d: %d rows in %.2f s (%.0f rows/s), lag %d entries / %.1f s", batch,
                     rows, duration_ms / 1000, metrics["processed_rate"], behind, lag_seconds,
                     extra={"batch": batch, "from_id": start.get("id"), "to_id": end.get("id"),
                            "rows": rows, "lag_entries": behind})
        except (redis.RedisError, ValueError, KeyError, IndexError, TypeError) as error:
            log.warning("metrics of batch %d: %s", batch, error)


class _ProgressAsJson(JStreamingQueryListener):
    """PySpark's bridge from the JVM's listener to a Python one, but a progress report
    comes over as one JSON text. PySpark's own reads each of its fields, and each entry of
    their maps, by a call into the JVM: some hundreds of calls a micro-batch, 4.5 s of the
    JVM's listener thread in 20 s at 10,000 events/s
    (docs/measurements/2026-11-26-end-to-end-by-process.md)."""

    def onQueryProgress(self, jevent) -> None:
        self.pylistener.report(json.loads(jevent.progress().json()))


def _offset(value) -> dict:
    """A source offset of the progress report, as Spark writes it (the offset's JSON, or its
    text when that is not JSON); none before the first batch."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    return value if isinstance(value, dict) else {}


def main() -> int:
    configure("job")
    # py4j logs every call between Python and the JVM at INFO
    logging.getLogger("py4j").setLevel(logging.WARNING)
    settings = JobSettings()
    spark = build_session(settings)
    job = Job(spark, settings)
    query = job.start()
    stopping = threading.Event()

    def stop(signum, frame):
        log.info("signal %d: stopping after the current micro-batch", signum)
        stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while not stopping.is_set() and query.isActive and job.sink.failure is None:
        stopping.wait(0.5)
    failure = query.exception() if not query.isActive else job.sink.failure
    job.stop()
    spark.stop()
    if failure is not None:
        log.error("the streaming query failed: %s", failure)
        return 1
    return 0


def _placement(placed: int) -> str:
    return f"{placed} shuffle partitions in turn" if placed else "partitions by Spark's hash"
