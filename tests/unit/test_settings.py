"""One settings model for what every process shares: the job, the service and ``penumbra up``
read the Redis URL, the key prefix and the home from the same variables, alike."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from backend.config import Settings
from contract.settings import SharedSettings
from penumbra.cli.supervisor import Supervisor, UpSettings
from spark_jobs.job import Job
from spark_jobs.settings import JobSettings

SHARED = {"PENUMBRA_REDIS_URL": "redis://127.0.0.1:1/3", "PENUMBRA_REDIS_PREFIX": "site-b"}


@pytest.fixture
def environment(monkeypatch, tmp_path):
    for name in ("PENUMBRA_REDIS_URL", "PENUMBRA_REDIS_PREFIX"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PENUMBRA_HOME", str(tmp_path))
    return monkeypatch


@pytest.mark.parametrize("kind", [SharedSettings, JobSettings, Settings, UpSettings])
def test_every_process_reads_the_shared_settings_alike(environment, tmp_path, kind):
    for name, value in SHARED.items():
        environment.setenv(name, value)
    settings = kind()
    assert isinstance(settings, SharedSettings)
    assert (settings.redis_url, settings.redis_prefix, settings.home) == ("redis://127.0.0.1:1/3", "site-b", tmp_path)
    assert settings.keys.ingest == "site-b:in" and settings.keys.matches("q") == "site-b:out:matches:q"


def test_the_job_and_up_build_their_keys_from_the_prefix(environment, tmp_path):
    for name, value in SHARED.items():
        environment.setenv(name, value)
    # the job's keys need neither Spark nor a reachable Redis to be built
    assert Job(None, JobSettings()).keys.prefix == "site-b"
    up = Supervisor(UpSettings(home=tmp_path))
    assert up.keys.prefix == "site-b" and up.redis is None  # a named Redis: up starts none
    env = up._env()
    assert (env["PENUMBRA_REDIS_URL"], env["PENUMBRA_REDIS_PREFIX"]) == ("redis://127.0.0.1:1/3", "site-b")
    up.client.close()


def test_up_starts_its_own_redis_when_none_is_named(environment, tmp_path):
    settings = UpSettings(home=tmp_path, redis_port=6391)
    assert settings.starts_redis and settings.redis_url == "redis://127.0.0.1:6391/0"
    up = Supervisor(settings)
    # up's own Redis asks for a password, made once and kept for the owner alone; the children get it
    password = (tmp_path / "var" / "redis" / "password").read_text()
    assert len(password) >= 40 and (tmp_path / "var" / "redis" / "password").stat().st_mode & 0o777 == 0o600
    assert up.redis is not None and up._env()["PENUMBRA_REDIS_URL"] == f"redis://:{password}@127.0.0.1:6391/0"
    assert Supervisor(settings).redis_password == password
    up.client.close()
    named = UpSettings(home=tmp_path, redis_url="redis://127.0.0.1:7000/1")
    assert not named.starts_redis and named.redis_url == "redis://127.0.0.1:7000/1"


@pytest.mark.parametrize("prefix", ["a:b", "", "x y", "pn*"])
def test_a_bad_prefix_is_refused_naming_the_setting(environment, prefix):
    environment.setenv("PENUMBRA_REDIS_PREFIX", prefix)
    with pytest.raises(ValidationError, match="redis_prefix"):
        SharedSettings()


def test_the_home_defaults_to_the_current_folder(monkeypatch, tmp_path):
    monkeypatch.delenv("PENUMBRA_HOME", raising=False)
    monkeypatch.chdir(tmp_path)
    assert JobSettings().home == Path.cwd() == Settings().home
