"""One query over one file, through the whole pipeline: what ``penumbra eval --engine spark`` runs.

A private redis-server and a private job (``python -m spark_jobs`` in local mode, its
output in a log file) are started; the streams and the query are registered, the
events appended to the ingest stream followed by an end-of-input mark; once the job
has written the batch holding the mark, the matches are read back and both processes
are stopped by their process ids.
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

import redis

from contract.entries import match_value, read_dead, read_metrics, read_observation
from contract.ingest import append_events, end_of_input
from contract.keys import Keys
from contract.registry import Registry
from penumbra.query import parse

from .processes import Child, RedisServer

__all__ = ["JobProcess", "PipelineError", "evaluate", "wait_for_mark", "wait_for_metrics"]

QUERY_ID = "eval"


class PipelineError(RuntimeError):
    """The job stopped or did not finish in time."""


class JobProcess:
    """``python -m spark_jobs`` (or ``argv``: the same job through spark-submit) as a
    :class:`~penumbra.cli.processes.Child` with the given settings (``PENUMBRA_*`` names
    without the prefix); its output goes to ``log``."""

    def __init__(self, home: Path, redis_url: str, argv: list[str] | None = None, **settings: Any):
        self.home = Path(home)
        self.log = self.home / "job.log"
        env = {**os.environ, "PENUMBRA_HOME": str(self.home), "PENUMBRA_REDIS_URL": redis_url,
               **{f"PENUMBRA_{name.upper()}": str(value) for name, value in settings.items()}}
        self.child = Child("job", "the Spark job", argv or [sys.executable, "-m", "spark_jobs"], self.log, env,
                           self.home)

    @property
    def env(self) -> dict[str, str]:
        return self.child.env

    @property
    def process(self):
        return self.child.process

    def start(self) -> JobProcess:
        self.child.start()
        return self

    @property
    def alive(self) -> bool:
        return self.child.alive

    def stop(self, timeout: float = 60.0) -> None:
        """SIGTERM (the job stops between batches and keeps its checkpoint); SIGKILL if it hangs."""
        self.child.stop_seconds = timeout
        self.child.stop()

    def kill(self) -> None:
        """kill -9 of the job and of everything it started (its JVM)."""
        self.child.kill()

    def tail(self, lines: int = 5) -> str:
        return " | ".join(self.child.tail(lines))


def wait_for_mark(client: redis.Redis, mark: bytes, job: JobProcess, timeout: float, keys: Keys = Keys()) -> None:
    """Until the job has written the batch holding the end-of-input ``mark``."""
    deadline = time.monotonic() + timeout
    while client.hget(keys.ended, mark) is None:
        if not job.alive:
            raise PipelineError(f"the Spark job stopped: {job.tail()}")
        if time.monotonic() > deadline:
            raise PipelineError(f"the Spark job did not finish within {timeout:g} s: {job.tail()}")
        time.sleep(0.1)


def wait_for_metrics(client: redis.Redis, mark: bytes, job: JobProcess, timeout: float, keys: Keys = Keys()) -> str:
    """Once the batch holding ``mark`` is written, until the job has also reported its
    progress (metrics come from a listener, a little after the batch): that report's entry id."""
    wait_for_mark(client, mark, job, timeout, keys)
    batch = int(client.hget(keys.ended, mark))
    deadline = time.monotonic() + timeout
    while True:
        last = client.xrevrange(keys.metrics, count=1)
        if last and read_metrics(last[0][1])["batch"] >= batch:
            return last[0][0].decode()
        if not job.alive:
            raise PipelineError(f"the Spark job stopped: {job.tail()}")
        if time.monotonic() > deadline:
            raise PipelineError(f"the Spark job reported no progress within {timeout:g} s: {job.tail()}")
        time.sleep(0.05)


def registrable(text: str, streams: dict, lines: Sequence[str]) -> dict:
    """The stream parameters under which the registry takes ``text`` over ``lines`` and the
    job finds what the core's engine finds with ``streams``: a stream the query reads and
    ``streams`` does not declare gets the defaults (as the core reads it), and a join's
    stream that bounds its lengths neither by pi nor by templates gets, as pi, the longest
    timestamp of its events among ``lines`` (the registry refuses a join it could not bound;
    over finite input, that bound is exact)."""
    parsed = parse(text)
    declared = {name.casefold(): name for name in streams}
    for source in parsed.sources:
        declared.setdefault(source.stream.casefold(), source.stream)
    out = {name: dict(streams.get(name, {})) for name in declared.values()}
    if parsed.kind == "join":
        unbounded = {name.casefold(): name for name, params in out.items()
                     if "pi" not in params and not params.get("templates")}
        longest = dict.fromkeys(unbounded, 0.0)
        for line in lines if unbounded else ():
            try:
                item = json.loads(line)
                ts, stream = item["ts"], item["stream"].casefold()
                if stream in longest:
                    span = float(ts["hi"] - ts["lo"] if "hi" in ts else ts["edges"][-1] - ts["edges"][0])
                    if math.isfinite(span):
                        longest[stream] = max(longest[stream], span)
            except (ValueError, TypeError, KeyError, IndexError, AttributeError):
                continue  # the job rejects it as the core does
        for key, name in unbounded.items():
            out[name]["pi"] = max(longest[key], float(out[name].get("rho") or 0.0))
    return out


def evaluate(text: str, streams: dict, lines: Sequence[str], *, batch_rows: int | None = None,
             timeout: float = 1800.0) -> tuple[list[dict], dict]:
    """The matches of ``text`` over the event ``lines`` from the Spark job, and figures
    (events, matches, seconds of micro-batch processing, wall seconds with the job's
    start, not processed, the operators' counters summed).

    With ``batch_rows``, each micro-batch holds exactly that many of the lines, in order
    (the last one the rest): the blocks ``penumbra eval --engine local`` feeds its operator
    with the same ``--block-size``. An event that arrives beyond its stream's max delay is
    then late in both engines alike, so they print the same matches for any input."""
    keys = Keys()
    with tempfile.TemporaryDirectory(prefix="penumbra-eval-") as home, RedisServer(Path(home) / "redis") as server:
        client = redis.Redis.from_url(server.url)
        registry = Registry(client, keys)
        registry.put_streams(registrable(text, streams or {}, lines))
        registry.register(text, query_id=QUERY_ID)
        # the job cuts a batch at an entry holding its max rows: appended a batch's lines at
        # a time, the entries of each batch hold exactly its lines
        step = batch_rows or max(1, len(lines))
        for start in range(0, len(lines), step):
            append_events(client, lines[start:start + step], keys)
        mark = end_of_input(client, [QUERY_ID], keys)
        settings = {"trigger_seconds": 0, "result_maxlen": max(1_000_000, 10 * len(lines)),
                    "dead_maxlen": max(100_000, len(lines))}
        if batch_rows:
            settings["max_rows_per_batch"] = batch_rows
        job = JobProcess(Path(home) / "job", server.url, **settings).start()
        started = time.monotonic()
        try:
            wait_for_mark(client, mark, job, timeout, keys)
            seconds = time.monotonic() - started
            wait_for_metrics(client, mark, job, 60, keys)
        finally:
            job.stop()
        matches = [match_value(fields) for _, fields in client.xrange(keys.matches(QUERY_ID))]
        processing = sum(read_metrics(fields)["duration_ms"] for _, fields in client.xrange(keys.metrics))
        counters: dict[str, float] = {}
        for entry_id, fields in client.xrange(keys.observations(QUERY_ID)):
            for name, value in read_observation(entry_id, fields)["observations"].get("counters", {}).items():
                if isinstance(value, (int, float)):
                    counters[name] = counters.get(name, 0) + value
        late = sum(1 for _, fields in client.xrange(keys.dead) if read_dead(fields).get("query") == QUERY_ID)
        client.close()
    stats = {"events": len(lines), "matches": len(matches), "seconds": processing / 1000, "wall_seconds": seconds,
             "not_processed": late,
             "engine": "spark", **{k: v for k, v in counters.items() if k not in ("events", "matches")}}
    return matches, stats
