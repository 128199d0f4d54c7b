"""REST ingest: POST /api/events in batches of 1,000 events into Redis, events a second.

One redis-server and one API process (``python -m backend``, one uvicorn worker) on
loopback, started here and stopped by their pids; the ingest rate limit raised so it
does not bound the figure. A few client threads (httpx, keep-alive) post pre-encoded
batches; the ingest stream's events are checked to have grown by exactly those
accepted, and the API's and Redis's CPU time an event is read from ``/proc`` (the
client's share of the two cores bounds the rate; the API's time is what it costs a
deployment). Redis runs with its append-only file as ``penumbra up`` runs it, fsynced before
it answers (``appendfsync always``: a 202 is on disk), and, in the same run, fsynced once
a second (``everysec``, what the durable acknowledgement costs). Baselines: the same
events appended to the ingest stream straight from Python (``contract.append_events``,
pipelined XADD: what Redis and redis-py alone take) and one event per request (what
batching saves).

    .venv/bin/python bench/rest_ingest.py            # 200 batches of 1,000 events
    .venv/bin/python bench/rest_ingest.py --quick    # 20 batches
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import orjson
import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.report import Report  # noqa: E402
from contract import Keys, append_events  # noqa: E402
from contract.entries import read_ingest  # noqa: E402
from penumbra.cli.processes import ApiServer, RedisServer  # noqa: E402

TOKEN = "pn_bench-admin-" + "x" * 32
STREAM = {"templates": {"t1": {"edges": [0, 20, 30, 40], "probs": [0.1, 0.3, 0.6]}}, "max_delay": 500}


def events(stream: str, first: int, count: int) -> list[dict]:
    """Interval and template events, with a key attribute, as sensors post them."""
    out = []
    for n in range(first, first + count):
        t = n * 0.5
        ts = {"lo": t, "hi": t + 5.0} if n % 2 else {"detected": t + 40.0, "template": "t1"}
        out.append({"stream": stream, "id": f"e-{n}", "ts": ts, "attrs": {"region": f"r{n % 8}"}})
    return out


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds a process has used (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def post_batches(url: str, bodies: list[bytes], threads: int) -> tuple[float, int]:
    """Seconds to post every body over ``threads`` keep-alive connections, and events accepted."""
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}

    def worker(part: list[bytes]) -> int:
        accepted = 0
        with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
            for body in part:
                answer = client.post("/api/events", content=body)
                answer.raise_for_status()
                found = answer.json()
                accepted += found.get("accepted", 1) if isinstance(found, dict) else 1
        return accepted

    parts = [bodies[k::threads] for k in range(threads)]
    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        accepted = sum(pool.map(worker, parts))
    return time.perf_counter() - started, accepted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run")
    parser.add_argument("--batches", type=int)
    parser.add_argument("--batch", type=int, default=1000, help="events per request")
    parser.add_argument("--threads", type=int, default=4, help="client connections")
    args = parser.parse_args()
    batches = args.batches or (20 if args.quick else 200)
    singles = 200 if args.quick else 2000
    total = batches * args.batch

    report = Report("rest_ingest", "REST ingest into Redis")
    report.say(f"{batches} requests of {args.batch} events ({total:,} events), {args.threads} client threads; "
               f"baselines: pipelined XADD from Python, {singles} requests of one event")
    keys = Keys()
    figures = {}
    for fsync in ("everysec", "always"):
        with RedisServer(append_only=True, fsync=fsync) as server, \
                ApiServer(server.url, admin_token=TOKEN, ingest_rate_limit=1_000_000,
                          ingest_max_events=max(10_000, args.batch)) as api:
            store = redis.Redis.from_url(server.url)
            headers = {"Authorization": f"Bearer {TOKEN}"}
            httpx.put(f"{api.url}/api/streams/bench", json=STREAM, headers=headers, timeout=10).raise_for_status()

            bodies = [orjson.dumps(events("bench", b * args.batch, args.batch)) for b in range(batches)]
            before = len(read_ingest(store.xrange(keys.ingest)))
            spent = [cpu_seconds(p.pid) for p in (api.process, server.process)]
            seconds, accepted = post_batches(api.url, bodies, args.threads)
            spent = [1e6 * (cpu_seconds(p.pid) - was) / total for p, was in zip((api.process, server.process), spent)]
            grown = len(read_ingest(store.xrange(keys.ingest))) - before
            figures[f"REST, 1,000 per request, fsync {fsync}"] = total / seconds
            report.say(f"AOF fsync {fsync}: REST batches {total / seconds:,.0f} events/s ({seconds:.2f} s); "
                       f"accepted {accepted:,}, ingest stream's events grew by {grown:,} "
                       f"({'exact' if grown == accepted == total else 'MISMATCH'}); CPU an event: "
                       f"the API {spent[0]:.1f} µs, Redis {spent[1]:.1f} µs (the client, in this process, the rest)")

            one = [orjson.dumps(e) for e in events("bench", 2 * total, singles)]
            seconds_one, accepted_one = post_batches(api.url, one, args.threads)
            figures[f"REST, 1 per request, fsync {fsync}"] = singles / seconds_one
            report.say(f"AOF fsync {fsync}: REST one event per request {singles / seconds_one:,.0f} events/s "
                       f"({seconds_one:.2f} s)")

            if fsync == "always":
                encoded = [orjson.dumps(e) for e in events("bench", total, total)]
                started = time.perf_counter()
                append_events(store, encoded, keys)
                direct = time.perf_counter() - started
                figures["XADD pipeline, fsync always (baseline)"] = total / direct
                report.say(f"pipelined XADD from Python: {total / direct:,.0f} events/s ({direct:.2f} s)")
            store.close()
    rest = figures["REST, 1,000 per request, fsync always"]
    before = figures["REST, 1,000 per request, fsync everysec"]
    report.say(f"target >= 20,000 events/s: {'met' if rest >= 20_000 else 'NOT met'} ({rest:,.0f}); "
               f"the durable acknowledgement (fsync always) costs {1 - rest / before:.0%} of the batched rate "
               f"and {1 - figures['REST, 1 per request, fsync always'] / figures['REST, 1 per request, fsync everysec']:.0%} "
               f"of the one-per-request rate; REST batches reach "
               f"{rest / figures['XADD pipeline, fsync always (baseline)']:.0%} of plain XADD")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(8, 4))
    names = list(figures)
    axis.barh(names, [figures[n] for n in names],
              color=["tab:cyan", "tab:olive", "tab:blue", "tab:orange", "tab:grey"][:len(names)])
    axis.axvline(20_000, color="black", linestyle=":", label="target 20,000 events/s")
    for y, name in enumerate(names):
        axis.text(figures[name], y, f" {figures[name]:,.0f}", va="center")
    axis.set_xlabel("events per second into the ingest stream")
    axis.set_xscale("log")
    axis.legend(loc="lower right")
    report.save(figure)


if __name__ == "__main__":
    main()
