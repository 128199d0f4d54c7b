"""The job's settings: the shared ones (Redis, prefix, home) and the job's own, environment
variables with the ``PENUMBRA_`` prefix, each with a local default."""

from __future__ import annotations

import sys
from pathlib import Path

from pydantic import Field

from contract.settings import SharedSettings

__all__ = ["CLASS_ARCHIVE", "QUICK_JIT", "JobSettings"]

#: The JIT the job's JVMs run by default: C1 alone, no C2. The job's JVM moves bytes
#: (Arrow batches, the shuffle, RocksDB, the checkpoint) while Python does the work; on two
#: cores C2 kept compiling through a whole 60 s drain, taking a fifth of a core from the Python
#: workers (docs/pipeline.md).
QUICK_JIT = "-XX:TieredStopAtLevel=1"
#: Spark's classes as the driver's JVM loaded them, archived by ``make setup``
#: (scripts/build-class-archive.py): mapped at the JVM's start rather than loaded one by one
CLASS_ARCHIVE = Path(sys.prefix) / "share" / "penumbra" / "spark-driver.jsa"


class JobSettings(SharedSettings):
    """Where the job reads and writes, and how it cuts the stream into micro-batches.

    >>> JobSettings(key_groups=8).key_groups
    8
    """

    spark_master: str = Field("local[2]", description="local[N] or spark://host:port of a standalone cluster")
    driver_host: str = Field("127.0.0.1", description=(
        "the address executors reach the driver at (spark.driver.host): loopback on one machine, the job's "
        "host name on a cluster"))
    driver_bind: str = Field("127.0.0.1", description="the address the driver listens on (spark.driver.bindAddress)")
    checkpoint: Path | None = Field(None, description="checkpoint folder (default: <home>/var/checkpoint)")
    trigger_seconds: float = Field(0.5, ge=0, description="micro-batch interval; 0 starts the next batch at once")
    max_rows_per_batch: int = Field(100_000, ge=1, description="admission control: ingest entries per micro-batch")
    shuffle_partitions: int = Field(2, ge=1, description="spark.sql.shuffle.partitions (small on one machine)")
    key_groups: int = Field(0, ge=0, description="key groups per query (0: twice the shuffle partitions)")
    place_groups: bool = Field(True, description=(
        "place each query's key groups on the shuffle partitions in turn (off: where Spark's hash of "
        "(query, group) puts them); fixed for a checkpoint at its first start"))
    read_partitions: int = Field(2, ge=1, description="tasks reading and routing one micro-batch (in parallel)")
    result_maxlen: int = Field(100_000, ge=1, description="matches kept in each query's result stream (MAXLEN ~)")
    obs_maxlen: int = Field(2_000, ge=1, description=(
        "micro-batches of observations kept per query (each some KB; the service reads at most 1,000)"))
    metrics_maxlen: int = Field(10_000, ge=1, description="progress reports kept in pn:metrics")
    state_memory_mb: int = Field(256, ge=0, description=(
        "memory all the RocksDB state stores of the process may use together (block cache and write buffers, "
        "spark.sql.streaming.stateStore.rocksdb.maxMemoryUsageMB with boundedMemoryUsage); what does not fit "
        "stays on local disk. 0: no bound (each store sizes its own cache and buffers)"))
    archive_write: bool = Field(True, description=(
        "archive every match (false: the history holds only the live tail of the result streams)"))
    archive_compact_seconds: float = Field(60.0, gt=0, description="how often the archive is compacted and expired")
    archive_compact_files: int = Field(50, ge=2, description=(
        "batch files of today that make a compaction (past days are compacted into one file each)"))
    java_options: str = Field(QUICK_JIT, description=(
        "options of the job's JVMs: the driver's, and each executor's on a cluster (spark.driver.extraJavaOptions, "
        "spark.executor.extraJavaOptions); empty: Spark's own. The default runs the JIT's C1 alone"))
    class_archive: str = Field(str(CLASS_ARCHIVE), description=(
        "the class-data-sharing archive the driver's JVM starts from, when the file exists (make setup builds "
        "it); empty: none"))

    @property
    def checkpoint_dir(self) -> Path:
        return (self.checkpoint or self.home / "var" / "checkpoint").absolute()

    @property
    def groups(self) -> int:
        return self.key_groups or 2 * self.shuffle_partitions

