"""Asking Redis again: a step is run again while Redis is unavailable, for a bounded time,
and any other error goes straight through."""

from __future__ import annotations

import socket
import threading
import time

import pytest
import redis

from contract.connection import CALL_SECONDS, CONNECT_SECONDS, asking_once, patiently, riding_out


def test_a_step_is_run_again_until_redis_answers():
    calls = []

    def step():
        calls.append(time.monotonic())
        if len(calls) < 4:
            raise redis.BusyLoadingError("Redis is loading the dataset in memory")
        return "done"

    assert patiently("loading", step) == "done"
    assert len(calls) == 4
    gaps = [b - a for a, b in zip(calls, calls[1:])]
    assert gaps == sorted(gaps) and gaps[0] >= 0.09     # pauses that grow


def test_an_outage_longer_than_the_patience_raises_the_last_error():
    began = time.monotonic()
    with pytest.raises(redis.ConnectionError, match="refused"):
        patiently("gone", lambda: (_ for _ in ()).throw(redis.ConnectionError("Connection refused")), seconds=1.0)
    assert 0.5 < time.monotonic() - began < 1.5


def test_other_errors_are_not_asked_again():
    calls = []

    def step():
        calls.append(1)
        raise redis.ResponseError("WRONGTYPE")

    with pytest.raises(redis.ResponseError):
        patiently("wrong", step)
    assert calls == [1]


def test_the_two_clients_ask_again_or_never():
    assert riding_out("redis://127.0.0.1:9/0").get_retry().get_retries() >= 30
    assert asking_once("redis://127.0.0.1:9/0").get_retry().get_retries() == 0


def test_a_redis_that_never_answers_counts_as_unavailable():
    """A host gone without a reset: the connection is taken and nothing comes back. A call
    waits its bounded time, then raises what the steps ask again on; both clients wait
    the same by default."""
    listener = socket.create_server(("127.0.0.1", 0))
    held = []
    threading.Thread(target=lambda: held.append(listener.accept()), daemon=True).start()
    url = f"redis://127.0.0.1:{listener.getsockname()[1]}/0"
    try:
        began = time.monotonic()
        with pytest.raises(redis.TimeoutError):
            asking_once(url, socket_timeout=0.3).ping()
        assert 0.25 < time.monotonic() - began < 3
        for client in (asking_once(url), riding_out(url)):
            options = client.connection_pool.connection_kwargs
            assert (options["socket_timeout"], options["socket_connect_timeout"]) == (CALL_SECONDS, CONNECT_SECONDS)
    finally:
        for connection, _ in held:
            connection.close()
        listener.close()
