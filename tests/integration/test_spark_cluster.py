"""The same job on a Spark standalone cluster (a master and two workers started by
scripts/spark-cluster.sh on loopback) gives the local engine's matches."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import redis

from spark_jobs.oneshot import JobProcess
from spark_jobs.redis_server import free_port
from tests.integration.conftest import Pipeline
from tests.integration.test_spark_equivalence import assert_equal, local
from tests.unit.joins.test_join_operator import workload

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "spark-cluster.sh"


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
    job = JobProcess(tmp_path / "job", url, spark_master=cluster, trigger_seconds=0.1,
                     max_rows_per_batch=300, key_groups=4)
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
    finally:
        job.stop()
        client.close()
