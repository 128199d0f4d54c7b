"""The same job on a Spark standalone cluster (a master and two workers started by
scripts/spark-cluster.sh on loopback) gives the local engine's matches. The job is started
with docker-compose.yml's own spark-submit command line (its hosts mapped to this
machine's loopback), so the compose file's job runs as written wherever Docker does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from penumbra.cli.pipeline import JobProcess
from penumbra.cli.processes import free_port
from spark_jobs.settings import QUICK_JIT
from tests.integration.conftest import Pipeline, command_lines
from tests.integration.test_spark_equivalence import assert_equal, local
from tests.unit.joins.test_join_operator import workload

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "spark-cluster.sh"


def compose_job(master: str) -> tuple[list[str], dict[str, str]]:
    """docker-compose.yml's job: its command and settings, with the image's paths and the
    compose network's host names replaced by this checkout's and loopback."""
    yaml = pytest.importorskip("yaml")
    import pyspark

    job = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["job"]
    argv = list(job["command"])
    assert argv[0] == "spark-submit"
    argv[0] = str(Path(pyspark.__file__).parent / "bin" / "spark-submit")
    argv[argv.index("--master") + 1] = master
    argv[-1] = argv[-1].replace("/opt/penumbra", str(ROOT))
    settings = {k.removeprefix("PENUMBRA_").lower(): v for k, v in job["environment"].items()
                if k not in ("PENUMBRA_REDIS_URL", "PENUMBRA_CHECKPOINT")}
    settings.update(spark_master=master, driver_host="127.0.0.1", driver_bind="127.0.0.1")
    return argv, settings


@pytest.fixture
def cluster(tmp_path):
    env = {**os.environ, "PENUMBRA_CLUSTER_DIR": str(tmp_path / "cluster"), "PENUMBRA_CLUSTER_PORT": str(free_port()),
           "PENUMBRA_CLUSTER_UI_PORT": str(free_port())}
    try:
        subprocess.run([str(SCRIPT), "start", "2"], env=env, check=True, timeout=180, capture_output=True)
        yield f"spark://127.0.0.1:{env['PENUMBRA_CLUSTER_PORT']}"
    finally:
        subprocess.run([str(SCRIPT), "stop"], env=env, timeout=120, capture_output=True)


def test_a_standalone_cluster_runs_the_job_with_the_same_results(cluster, redis_server, tmp_path):
    url = redis_server.url.rsplit("/", 1)[0] + "/1"     # a database of its own, beside the session's job
    argv, settings = compose_job(cluster)
    job = JobProcess(tmp_path / "job", url, argv, **{**settings, "trigger_seconds": 0.1, "max_rows_per_batch": 300,
                                                     "key_groups": 4})
    job.env.update(PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
                   PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    client = redis.Redis.from_url(url)
    running = Pipeline(tmp_path / "job", url, job, client)
    try:
        running.start()
        streams, events = workload(61, "mixed", n=800, late_share=0.0)
        text = "SELECT * FROM S A, T B WHERE WINDOW(A, B) = 16 AND A.region = B.region WITH THRESHOLD 0.4"
        query_id = running.query_id()
        found = running.run(streams.to_json(), {query_id: text}, events)
        assert_equal(found[query_id], local(text, streams, events), text)
        assert b"spark://" in client.hget(running.keys.heartbeat, "master")
        # the workers start the executors with the job's JVM options
        executors = [argv for argv in command_lines().values()
                     if b"org.apache.spark.executor.CoarseGrainedExecutorBackend" in argv]
        assert executors and all(QUICK_JIT.encode() in argv for argv in executors)
    finally:
        job.stop()
        client.close()

