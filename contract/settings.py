"""What every process of Penumbra shares: the Redis, the key prefix, the home folder.

The job (``spark_jobs.settings.JobSettings``), the service (``backend.config.Settings``)
and ``penumbra up`` (``penumbra.cli.supervisor.UpSettings``) extend :class:`SharedSettings` with
their own fields, all read from ``PENUMBRA_`` environment variables: a prefix set once
moves the whole system.

>>> SharedSettings(redis_prefix="site-a").keys.ingest
'site-a:in'
"""

from __future__ import annotations

import os
from pathlib import Path

import redis
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from .dead import DEAD_MAX_MB
from .identity import DEFAULT_HORIZON_HOURS
from .keys import DEFAULT_PREFIX, PREFIX_PATTERN, Keys

__all__ = ["DEFAULT_REDIS_URL", "SharedSettings", "masked_url"]

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


def masked_url(url: str) -> str:
    """A Redis URL without its password, for messages and logs.

    >>> masked_url("redis://:s3cret@127.0.0.1:6379/0")
    'redis://***@127.0.0.1:6379/0'
    """
    scheme, sep, rest = url.partition("://")
    if "@" in rest:
        rest = "***@" + rest.rsplit("@", 1)[1]
    return scheme + sep + rest


def _home() -> Path:
    return Path(os.environ.get("PENUMBRA_HOME", Path.cwd()))


class SharedSettings(BaseSettings):
    """The settings every process reads alike (environment variables with the ``PENUMBRA_`` prefix)."""

    model_config = SettingsConfigDict(env_prefix="PENUMBRA_", extra="ignore")

    home: Path = Field(default_factory=_home, description=(
        "base folder of var/: Redis data, the job's checkpoint, logs (default: the current folder)"))
    redis_url: str = Field(DEFAULT_REDIS_URL, description="the Redis of ingest, registry and results")
    redis_prefix: str = Field(DEFAULT_PREFIX, pattern=rf"^{PREFIX_PATTERN}$",
                              description="prefix of every Redis key (docs/redis.md)")
    dead_maxlen: int = Field(100_000, ge=1, description="entries kept in the dead-letter stream, at most")
    dead_max_mb: float = Field(DEAD_MAX_MB, gt=0, description=(
        "memory the dead-letter stream may use in Redis, MB; beyond, its oldest letters go"))

    identity_horizon_hours: float = Field(DEFAULT_HORIZON_HOURS, gt=0, description=(
        "how long the ingest remembers an event's (stream, id), hours of ingest time at least (twice at most): "
        "the same event sent again within it is taken once"))

    archive: Path | None = Field(None, description=(
        "the archive's folder: every match kept as Parquet (default: <home>/var/archive); on a cluster, a path "
        "the job's driver and the service both reach (a shared mount)"))
    archive_retention_days: float = Field(0, ge=0, description="days the archive keeps (0: keep everything)")
    archive_floor: float = Field(0.0, ge=0, le=1, description=(
        "near misses below this probability are not archived (a backtest reaches down to it, or to the "
        "query's floor when that is higher)"))

    @property
    def archive_dir(self) -> Path:
        return (self.archive or self.home / "var" / "archive").absolute()

    @property
    def identity_horizon(self) -> float:
        """The identity horizon in seconds."""
        return self.identity_horizon_hours * 3600.0

    @property
    def dead_max_bytes(self) -> int:
        return int(self.dead_max_mb * 1024 * 1024)

    @property
    def keys(self) -> Keys:
        return Keys(self.redis_prefix)

    def redis_client(self, timeout: float | None = None, **options) -> redis.Redis:
        """A client of the shared Redis (``timeout``: seconds to connect and per call)."""
        return redis.Redis.from_url(self.redis_url, socket_timeout=timeout, socket_connect_timeout=timeout,
                                    **options)
