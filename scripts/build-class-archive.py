"""Builds the class archive the Spark job's JVM starts from: build-class-archive.py ARCHIVE.

The JVM spends most of a SparkSession's start loading and verifying Spark's classes. A
dynamic class-data-sharing archive (JDK 13+, ``-XX:ArchiveClassesAtExit``) keeps those a
job loaded, parsed and verified; a JVM started with ``-XX:SharedArchiveFile`` maps them
instead (spark_jobs/job.py uses the archive when it exists). This runs the job once over a
few events of the seismic example (session, streaming query, a batch through the stateful
step and the sink), stops it, and lets its JVM exit normally, which writes the archive.

The archive holds the JDK's and this venv's jars as they are now: the Makefile rebuilds it
when the venv changes. A JVM that finds it out of date says so in the job's log and starts
without it.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
EXAMPLE = ROOT / "examples" / "seismic"
TIMEOUT_SECONDS = 300.0


def main() -> int:
    target = Path(sys.argv[1]).absolute()
    partial = target.with_name(target.name + ".part")
    for stale in (target, partial):
        stale.unlink(missing_ok=True)
    import json
    import tempfile

    import redis

    from contract.ingest import append_events, end_of_input
    from contract.keys import Keys
    from contract.registry import Registry
    from penumbra.cli.processes import RedisServer

    with tempfile.TemporaryDirectory(prefix="penumbra-classes-") as home, RedisServer() as server:
        os.environ.update(PENUMBRA_HOME=home, PENUMBRA_REDIS_URL=server.url, PENUMBRA_TRIGGER_SECONDS="0")
        from pyspark import SparkContext

        from spark_jobs.job import Job, build_session
        from spark_jobs.settings import QUICK_JIT, JobSettings

        keys = Keys()
        client = redis.Redis.from_url(server.url)
        registry = Registry(client, keys)
        registry.put_streams(json.loads((EXAMPLE / "streams.json").read_text()))
        registry.register((EXAMPLE / "query.pq").read_text(), query_id="classes")
        append_events(client, (EXAMPLE / "events.jsonl").read_text().splitlines(), keys)
        mark = end_of_input(client, ["classes"], keys)
        settings = JobSettings(java_options=f"{QUICK_JIT} -XX:ArchiveClassesAtExit={partial} -Xlog:cds=off "
                                            "-Xlog:cds+dynamic=off")
        spark = build_session(settings)
        jvm = SparkContext._gateway.proc
        job = Job(spark, settings)
        job.start()
        deadline = time.monotonic() + TIMEOUT_SECONDS
        while client.hget(keys.ended, mark) is None:
            if time.monotonic() > deadline:
                print(f"the job did not finish its batches within {TIMEOUT_SECONDS:g} s", file=sys.stderr)
                return 1
            time.sleep(0.1)
        job.stop()
        spark.stop()
        # the gateway's JVM exits (and writes the archive) when its standard input closes
        jvm.stdin.close()
        code = jvm.wait(TIMEOUT_SECONDS)
    if code != 0 or not partial.exists():
        print(f"the JVM exited with {code} and wrote no archive", file=sys.stderr)
        return 1
    partial.rename(target)
    print(f"built {target} ({target.stat().st_size / 2**20:.0f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
