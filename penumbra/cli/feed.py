"""Sending events to a running Penumbra: the client of ``penumbra simulate`` and ``penumbra replay``.

It speaks HTTP to the API (``POST /api/events`` in batches, one kept-alive connection)
or, with a Redis URL, appends straight to the ingest stream (through
:mod:`contract.ingest`, its one writer). Transient trouble is waited out, never
turned into lost events: a refused connection or a 503 (the API or Redis restarting) is
retried with back-off, a 429 after its ``Retry-After``. A batch that was answered is
never sent again, so nothing is doubled either; a batch whose answer was lost (the
connection broke mid-request) is sent again, and may then be in the stream twice.

>>> Pace(speed=0).delay(10.0, 3.0)
0.0
>>> Pace(speed=2).delay(10.0, 3.0)
2.0
"""

from __future__ import annotations

import http.client
import json
import sys
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Iterable, TextIO

__all__ = ["ApiSink", "FeedError", "Pace", "Progress", "RedisSink", "Tally", "api_call", "send"]

#: seconds of back-off while the API or Redis is away, then the last one repeats
BACKOFF = (0.2, 0.5, 1.0, 2.0, 5.0)


class FeedError(Exception):
    """Something retrying cannot fix: a bad token, a refused request, nobody listening for too long."""


@dataclass
class Tally:
    sent: int = 0
    accepted: int = 0
    rejected: int = 0
    duplicates: int = 0
    retries: int = 0
    reasons: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"sent": self.sent, "accepted": self.accepted, "rejected": self.rejected,
                "duplicates": self.duplicates, "retries": self.retries, "first_reasons": self.reasons[:5]}


def _connection(url: str) -> http.client.HTTPConnection:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise FeedError(f"not an http(s) URL: {url!r}")
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    return kind(parts.hostname, parts.port, timeout=30)


def api_call(url: str, method: str, path: str, token: str | None, body: Any = None,
             patience: float = 60.0) -> tuple[int, Any]:
    """One JSON request with the retries of this module; returns (status, decoded body)."""
    with ApiSink(url, token, patience=patience) as sink:
        return sink.request(method, path, body)


class ApiSink:
    """Posts batches to ``POST /api/events`` on one connection."""

    def __init__(self, url: str, token: str | None, patience: float = 120.0):
        self.url = url.rstrip("/")
        self.base = urllib.parse.urlsplit(self.url).path
        self.headers = {"Content-Type": "application/json", "Connection": "keep-alive"}
        if token:
            self.headers["Authorization"] = f"Bearer {token}"
        self.patience = patience
        self.retries = 0
        self.conn = _connection(self.url)

    def __enter__(self) -> ApiSink:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.conn.close()

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        payload = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        waited, attempt = 0.0, 0
        while True:
            try:
                self.conn.request(method, self.base + path, body=payload, headers=self.headers)
                response = self.conn.getresponse()
                data = response.read()
                status = response.status
                retry_after = response.getheader("Retry-After")
            except (OSError, http.client.HTTPException) as error:
                self.conn.close()
                self.conn = _connection(self.url)
                status, data, retry_after, problem = 0, b"", None, f"{type(error).__name__}: {error}"
            else:
                problem = f"HTTP {status}"
            if status in (0, 502, 503, 504) or status == 429:
                pause = float(retry_after) if status == 429 and retry_after else BACKOFF[min(attempt, len(BACKOFF) - 1)]
                if status != 429:
                    waited += pause
                    if waited > self.patience:
                        raise FeedError(f"{self.url}{path}: no answer for {waited:.0f} s (last: {problem})")
                attempt += 1
                self.retries += 1
                time.sleep(pause)
                continue
            try:
                decoded = json.loads(data) if data else None
            except ValueError:
                decoded = data.decode(errors="replace")
            return status, decoded

    def send(self, lines: list[bytes], tally: Tally) -> None:
        status, answer = self.request("POST", "/api/events", b"[" + b",".join(lines) + b"]")
        if status in (401, 403):
            raise FeedError(f"the API refused the token ({status}): {_message(answer)}")
        if status == 400 or status == 413 or status == 422:
            # the whole request was refused (not JSON, too large): say so, keep going
            tally.rejected += len(lines)
            tally.reasons.append(f"request refused ({status}): {_message(answer)}")
            return
        if status != 202:
            raise FeedError(f"POST /api/events answered {status}: {_message(answer)}")
        tally.accepted += answer["accepted"]
        tally.rejected += answer["rejected"]
        tally.duplicates += answer.get("duplicates", 0)
        tally.reasons += [f"{e.get('field') or 'event'}: {e['reason']}" for e in answer["errors"][:5]]


class RedisSink:
    """Appends batches straight to the ingest stream (the job validates them), each event's
    identity once: a batch retried after a lost answer is not taken twice."""

    def __init__(self, url: str, prefix: str = "pn"):
        import redis  # only this path needs Redis and the contract

        from contract.ingest import append_events
        from contract.keys import Keys
        from contract.settings import SharedSettings

        self.append_events = append_events
        self.horizon = SharedSettings().identity_horizon   # as every writer of the ingest
        self.client = redis.Redis.from_url(url, socket_timeout=10, socket_connect_timeout=5)
        self.keys = Keys(prefix)
        self.errors = (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError)
        self.retries = 0

    def __enter__(self) -> RedisSink:
        return self

    def __exit__(self, *exc) -> None:
        self.client.close()

    def send(self, lines: list[bytes], tally: Tally) -> None:
        attempt = 0
        while True:
            try:
                appended = self.append_events(self.client, lines, self.keys, self.horizon)
                tally.accepted += len(appended)
                tally.rejected += appended.conflicts   # kept as dead letters, with their reason
                tally.duplicates += len(lines) - len(appended) - appended.conflicts
                return
            except self.errors:
                attempt += 1
                self.retries += 1
                if attempt > 40:
                    raise FeedError(f"Redis at {self.keys.ingest}: unavailable for too long") from None
                time.sleep(BACKOFF[min(attempt, len(BACKOFF)) - 1])


def _message(answer: Any) -> str:
    if isinstance(answer, dict) and isinstance(answer.get("error"), dict):
        return str(answer["error"].get("message"))
    return str(answer)[:200]


@dataclass
class Pace:
    """When to send: ``speed`` times the schedule's pace (0: as fast as Penumbra takes it)."""

    speed: float = 1.0

    def delay(self, due: float, elapsed: float) -> float:
        """Seconds to wait before sending what is due ``due`` seconds into the schedule."""
        if self.speed <= 0:
            return 0.0
        return max(0.0, due / self.speed - elapsed)


class Progress:
    """A progress bar on a terminal; a line every ``every`` seconds elsewhere (logs)."""

    def __init__(self, label: str, total: int | None, out: TextIO | None = None, every: float = 10.0):
        self.label, self.total = label, total
        self.out = out or sys.stderr
        self.tty = self.out.isatty()
        self.every = every
        self.started = time.monotonic()
        self.shown = 0.0

    def show(self, tally: Tally, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.shown < (0.2 if self.tty else self.every):
            return
        self.shown = now
        seconds = max(now - self.started, 1e-9)
        done = f"{tally.sent:,}" + (f"/{self.total:,}" if self.total else "")
        bar = ""
        if self.total:
            filled = int(30 * min(tally.sent / self.total, 1.0))
            bar = f" [{'#' * filled}{'.' * (30 - filled)}] {100 * tally.sent / self.total:3.0f}%"
        text = (f"{self.label}: {done} events{bar} {tally.sent / seconds:,.0f} ev/s, "
                f"{tally.rejected:,} rejected, {seconds:,.0f} s")
        if self.tty:
            self.out.write("\r" + text + "\033[K" + ("\n" if force else ""))
        else:
            self.out.write(text + "\n")
        self.out.flush()


def send(sink, schedule: Iterable[tuple[float, bytes]], pace: Pace, progress: Progress | None = None,
         batch: int = 500, stop=lambda: False) -> Tally:
    """Send ``(due, line)`` pairs in order, ``due`` in seconds from the start, in batches of
    what is due (at most ``batch``), until the schedule ends or ``stop()``."""
    tally = Tally()
    started = time.monotonic()
    pending: list[bytes] = []
    for due, line in schedule:
        wait = pace.delay(due, time.monotonic() - started)
        if pending and (wait > 0 or len(pending) >= batch):
            sink.send(pending, tally)
            tally.sent += len(pending)
            pending = []
            if progress:
                progress.show(tally)
            wait = pace.delay(due, time.monotonic() - started)
        if stop():
            break
        if wait > 0:
            time.sleep(wait)
        pending.append(line)
    if pending:
        sink.send(pending, tally)
        tally.sent += len(pending)
    tally.retries = sink.retries
    if progress:
        progress.show(tally, force=True)
    return tally
