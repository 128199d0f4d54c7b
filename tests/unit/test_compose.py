"""docker-compose.yml and docker/Dockerfile, checked without Docker (this machine has no
Docker daemon): the services, what each publishes and keeps, their health checks and
restart policies, and that every setting they pass is one the job or the API knows.
tests/integration/test_spark_cluster.py runs the job's own spark-submit command line
against a local standalone cluster."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

from backend.config import Settings  # noqa: E402
from spark_jobs.settings import JobSettings  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
DOCKERFILE = (ROOT / "docker" / "Dockerfile").read_text()


def test_the_services_of_a_cluster():
    assert set(SERVICES) == {"redis", "spark-master", "spark-worker", "job", "api"}
    assert SERVICES["spark-worker"]["deploy"]["replicas"] == 2
    assert SERVICES["redis"]["image"].startswith("redis:")
    for name in ("spark-master", "spark-worker", "job", "api"):
        assert SERVICES[name]["image"] == "penumbra:latest"
        assert SERVICES[name]["build"] == {"context": ".", "dockerfile": "docker/Dockerfile"}


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_every_service_has_a_health_check_and_a_restart_policy(name):
    service = SERVICES[name]
    assert service["restart"] == "unless-stopped"
    check = service["healthcheck"]
    assert check["test"][0] == "CMD" and len(check["test"]) > 1 and check["retries"] >= 3
    if check["test"][1] == "curl":
        assert "curl" in DOCKERFILE, "the image must have curl for its health checks"


def test_published_ports_listen_on_the_hosts_loopback_only():
    published = {name: s.get("ports", []) for name, s in SERVICES.items()}
    assert published["api"] == ["127.0.0.1:8000:8000"]
    for ports in published.values():
        assert all(p.startswith("127.0.0.1:") for p in ports), ports
    assert "ports" not in SERVICES["redis"], "Redis stays inside the compose network"


def test_data_lives_in_named_volumes():
    assert set(COMPOSE["volumes"]) == {"redis-data", "checkpoint", "spark-work", "archive"}
    assert "redis-data:/data" in SERVICES["redis"]["volumes"]
    assert {"--appendonly", "yes"} <= set(SERVICES["redis"]["command"])
    job = SERVICES["job"]
    assert f"checkpoint:{job['environment']['PENUMBRA_CHECKPOINT']}" in job["volumes"]
    # the job writes the archive, the API reads it: one volume at one path in both
    for name in ("job", "api"):
        where = SERVICES[name]["environment"]["PENUMBRA_ARCHIVE"]
        assert f"archive:{where}" in SERVICES[name]["volumes"]


def test_dependencies_wait_for_health_where_there_is_one():
    for name, service in SERVICES.items():
        for needed, how in service.get("depends_on", {}).items():
            assert needed in SERVICES
            if how["condition"] == "service_healthy":
                assert "healthcheck" in SERVICES[needed]


def test_every_setting_passed_is_one_the_job_or_the_api_knows():
    known = {"job": {f"PENUMBRA_{n.upper()}" for n in JobSettings.model_fields},
             "api": {f"PENUMBRA_{n.upper()}" for n in Settings.model_fields}}
    for name, fields in known.items():
        passed = set(SERVICES[name]["environment"])
        assert passed <= fields, passed - fields
    job = SERVICES["job"]
    command = job["command"]
    assert command[0] == "spark-submit"
    assert command[command.index("--master") + 1] == job["environment"]["PENUMBRA_SPARK_MASTER"]
    assert job["environment"]["PENUMBRA_DRIVER_HOST"] == job["hostname"]
    assert SERVICES["api"]["environment"]["PENUMBRA_HOST"] == "0.0.0.0"


def test_the_image_runs_the_project_as_a_user_with_java_17():
    assert re.search(r"^FROM python:3\.11", DOCKERFILE, re.M)
    assert "openjdk-17-jre-headless" in DOCKERFILE
    users = re.findall(r"^USER (\S+)", DOCKERFILE, re.M)
    assert users and users[-1] not in ("root", "0")
    assert "pip install '.[spark,service]'" in DOCKERFILE
    workdir = re.search(r"^WORKDIR (\S+)", DOCKERFILE, re.M).group(1)
    for source, target in re.findall(r"^COPY (\S+) (\S+)$", DOCKERFILE, re.M):
        assert (ROOT / source).exists(), source
    # every package the project installs is in the image
    packages = re.search(r"^include = \[(.*)\]$", (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    for package in re.findall(r'"(\w+)\*"', packages):
        assert f"COPY {package} ./{package}" in DOCKERFILE, package
    # the job's script is where spark-submit looks for it
    script = SERVICES["job"]["command"][-1]
    assert script == f"{workdir}/docker/job.py" and (ROOT / "docker" / "job.py").exists()
    # SPARK_HOME is the pyspark package of the image's Python
    assert "/usr/local/lib/python3.11/site-packages/pyspark" in DOCKERFILE
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".venv", "var", ".git"} <= set(ignored)


def test_the_job_health_check_reads_the_heartbeat_the_job_writes(tmp_path):
    """The check's own command, run against a real Redis holding a heartbeat in the job's shape."""
    import os
    import subprocess
    import sys
    import time

    from penumbra.cli.processes import RedisServer
    from contract import Keys

    argv = SERVICES["job"]["healthcheck"]["test"][1:]
    assert argv[0] == "python"
    with RedisServer(folder=tmp_path) as server:
        import redis

        client = redis.Redis.from_url(server.url)

        def healthy() -> bool:
            env = {**os.environ, "PENUMBRA_REDIS_URL": server.url}
            return subprocess.run([sys.executable, *argv[1:]], env=env, timeout=30).returncode == 0

        assert not healthy(), "no heartbeat: not healthy"
        client.hset(Keys().heartbeat, mapping={"active": 1, "at": time.time(), "pid": 1})
        assert healthy()
        client.hset(Keys().heartbeat, mapping={"active": 0})
        assert not healthy(), "a stopped streaming query"
        client.hset(Keys().heartbeat, mapping={"active": 1, "at": time.time() - 60})
        assert not healthy(), "a heartbeat a minute old"
        client.close()
