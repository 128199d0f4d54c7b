"""Clients of the shared Redis for the job's processes, by what a lost connection may do to
their calls.

A client that sends a call again when its connection breaks (redis-py's ``Redis(host,
port)`` does so ten times over a second or so, a MULTI/EXEC or a script included) runs twice
a write that Redis ran before the connection broke; one that never does (``from_url``'s
default) turns every Redis restart into an error, though ``penumbra up`` brings Redis back
in about a second and its append-only file loads in a few more. So the job's processes use
two kinds of client:

- :func:`riding_out`, for calls that may be sent again (reads, and writes that set what
  they set): asked again for about :data:`OUTAGE_SECONDS`, so a Redis restart costs a
  micro-batch a pause rather than the job a restart (20-30 s);
- :func:`asking_once`, for writes that must take effect once: never sent again; the caller
  finds out after a lost connection whether the write took effect (:func:`patiently`
  retries the whole step, which checks that first).

Both wait at most :data:`CALL_SECONDS` for an answer and :data:`CONNECT_SECONDS` to
connect, so a Redis host that vanishes without resetting its connections (a network cut,
a machine gone) counts as unavailable rather than holding a micro-batch until TCP gives
up, many minutes later.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, TypeVar

import redis
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.retry import Retry

__all__ = ["CALL_SECONDS", "CONNECT_SECONDS", "OUTAGE_SECONDS", "UNAVAILABLE", "asking_once", "patiently",
           "riding_out"]

log = logging.getLogger("penumbra.redis")

#: How long a process of the job goes on asking a Redis that does not answer.
OUTAGE_SECONDS = 30.0
#: Seconds a call waits for Redis's answer (the job's longest, a batch's transaction with
#: its stored rows, takes well under one) and to connect, before Redis counts as unavailable.
CALL_SECONDS, CONNECT_SECONDS = 30.0, 5.0
_FIRST_PAUSE, _LONGEST_PAUSE = 0.05, 1.0
#: retries of :func:`riding_out`: pauses of 0.1, 0.2, 0.4 and 0.8 s, then of a second each
_RETRIES = 4 + int(OUTAGE_SECONDS)
#: what a Redis that is gone, restarting or loading its data raises (BusyLoadingError is a ConnectionError)
UNAVAILABLE = (redis.ConnectionError, redis.TimeoutError)

T = TypeVar("T")


def riding_out(url: str, **options) -> redis.Redis:
    """A client whose calls are sent again over a Redis outage of up to
    :data:`OUTAGE_SECONDS`: for reads, and writes that may take effect twice."""
    return redis.Redis.from_url(url, retry=Retry(ExponentialBackoff(_LONGEST_PAUSE, _FIRST_PAUSE), _RETRIES),
                                **{**_WAITS, **options})


def asking_once(url: str, **options) -> redis.Redis:
    """A client whose calls are never sent again by the client itself."""
    return redis.Redis.from_url(url, retry=Retry(NoBackoff(), 0), **{**_WAITS, **options})


_WAITS = {"socket_timeout": CALL_SECONDS, "socket_connect_timeout": CONNECT_SECONDS}


def patiently(what: str, step: Callable[[], T], seconds: float = OUTAGE_SECONDS) -> T:
    """``step()``, run again while Redis is unavailable, for up to ``seconds``; the step
    itself must find out what an earlier run of it did before the connection broke."""
    deadline = time.monotonic() + seconds
    pause = _FIRST_PAUSE
    while True:
        try:
            return step()
        except UNAVAILABLE as error:
            pause = min(_LONGEST_PAUSE, 2 * pause)
            if time.monotonic() + pause > deadline:
                raise
            log.warning("%s: Redis unavailable (%s); trying again in %.1f s", what, error, pause)
            time.sleep(pause)
