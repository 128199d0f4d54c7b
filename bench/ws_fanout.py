"""The live feed's fan-out on loopback: many websocket clients, each subscribed to a
query whose matches come at a fixed rate; every message delivered in order, and its
latency.

One redis-server and one API process (``python -m backend``, one uvicorn worker),
started here and stopped by their pids. The writer appends a match per micro-batch the way
the job's sink does (XADD on ``pn:out:matches:<qid>`` and a PUBLISH on ``pn:live`` in one
MULTI/EXEC), at ``--rate`` batches a second. The clients run in this process (asyncio,
the ``websockets`` package) and record, for each match, the time it arrived minus the
time in its stream id (Redis's clock, the same machine's), and check that each got every
match of the stream, in stream order.

The same run measures it twice: per-message deflate off (the service's default) and on
(``PENUMBRA_WS_COMPRESSION=true``, the clients offering deflate too), the baseline.
The file-descriptor limit is raised to its hard limit here (each client is one socket in
this process and one in the server, which inherits the limit).

    .venv/bin/python bench/ws_fanout.py            # 2,000 clients at 20 messages/s, 15 s per mode
    .venv/bin/python bench/ws_fanout.py --quick    # 100 clients, 2 s per mode
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import orjson
import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.report import Report  # noqa: E402
from contract import Keys  # noqa: E402
from penumbra.cli.processes import ApiServer, RedisServer  # noqa: E402

TOKEN = "pn_bench-admin-" + "x" * 32
QUERY = "SELECT * FROM FA A, FB B WHERE WINDOW(A, B) = 100 WITH THRESHOLD 0.6"


def raise_fd_limit(needed: int) -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = hard if hard != resource.RLIM_INFINITY else max(soft, needed)
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def write(url: str, keys: Keys, query: str, rate: float, seconds: float) -> list[str]:
    """Micro-batches of one match at ``rate`` a second, as the sink writes them."""
    client = redis.Redis.from_url(url)
    ids, batch = [], 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        pipe = client.pipeline(transaction=True)
        pipe.xadd(keys.matches(query), {"m": json.dumps({"events": {"A": f"a{batch}", "B": f"b{batch}"},
                                                         "prob": 0.75}), "b": batch, "g": 0})
        pipe.publish(keys.live, json.dumps({"batch": batch, "at": time.time(), "matches": {query: 1},
                                            "observations": [], "dead": 0}))
        ids.append(pipe.execute()[0].decode())
        batch += 1
        time.sleep(max(0.0, start + batch / rate - time.perf_counter()))
    client.close()
    return ids


async def client_run(url: str, query: str, compression: str | None, ready: asyncio.Event,
                     ids: list[str], delays: list[float]) -> None:
    """One client: authenticate, subscribe, then note every match's id and latency (until cancelled)."""
    from websockets.asyncio.client import connect

    try:
        await _client(connect, url, query, compression, ready, ids, delays)
    finally:
        ready.set()  # also when it could not connect: the run goes on and counts it incomplete


async def _client(connect, url, query, compression, ready, ids, delays) -> None:
    async with connect(url, proxy=None, compression=compression, open_timeout=60, max_queue=None,
                       ping_interval=None) as ws:
        await ws.send(orjson.dumps({"token": TOKEN}).decode())
        await ws.send(orjson.dumps({"type": "subscribe", "queries": [query], "kinds": ["matches"]}).decode())
        while True:
            reply = orjson.loads(await asyncio.wait_for(ws.recv(), 60))
            if reply["type"] == "subscribed":
                break
            if reply["type"] == "error":
                raise RuntimeError(f"subscription refused: {reply.get('message')}")
        ready.set()
        while True:
            text = await ws.recv()
            now = time.time()
            message = orjson.loads(text)
            if message["type"] == "matches":
                ids.append(message["id"])
                delays.append(now - int(message["id"].split("-", 1)[0]) / 1000)


async def measure(api: ApiServer, redis_url: str, query: str, clients: int, rate: float, seconds: float,
                  compression: bool) -> dict:
    offered = "deflate" if compression else None
    got = [([], []) for _ in range(clients)]
    ready = [asyncio.Event() for _ in range(clients)]
    started = time.perf_counter()
    tasks = []
    for n in range(clients):  # connect in groups of 100
        tasks.append(asyncio.create_task(client_run(api.ws_url, query, offered, ready[n], *got[n])))
        if n % 100 == 99 or n == clients - 1:
            await asyncio.wait_for(asyncio.gather(*(r.wait() for r in ready[n - n % 100:n + 1])), 300)
    connect_seconds = time.perf_counter() - started

    written = await asyncio.get_running_loop().run_in_executor(
        None, write, redis_url, Keys(), query, rate, seconds)
    deadline = time.perf_counter() + 30
    while time.perf_counter() < deadline and any(len(ids) < len(written) for ids, _ in got):
        await asyncio.sleep(0.1)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)

    errors = [task.exception() for task in tasks
              if task.done() and not task.cancelled() and task.exception() is not None]
    failed = len(errors)
    for reason in sorted({f"{type(e).__name__}: {e}" for e in errors})[:5]:
        print(f"  a client failed: {reason}", file=sys.stderr)
    complete = sum(1 for ids, _ in got if ids == written)
    in_order = sum(1 for ids, _ in got if ids == written[:len(ids)])
    delays = np.concatenate([np.array(d) for _, d in got if d]) if any(d for _, d in got) else np.array([])
    return {"clients": clients, "written": len(written), "complete": complete, "in_order": in_order, "failed": failed,
            "delivered": int(sum(len(ids) for ids, _ in got)), "connect_s": connect_seconds,
            "p50": float(np.percentile(delays, 50)) if len(delays) else float("nan"),
            "p99": float(np.percentile(delays, 99)) if len(delays) else float("nan"),
            "max": float(delays.max()) if len(delays) else float("nan"), "delays": delays}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run")
    parser.add_argument("--clients", type=int)
    parser.add_argument("--rate", type=float, default=20.0, help="messages a second to every client")
    parser.add_argument("--seconds", type=float)
    args = parser.parse_args()
    clients = args.clients or (100 if args.quick else 2000)
    seconds = args.seconds or (2.0 if args.quick else 15.0)
    limit = raise_fd_limit(2 * clients + 200)

    report = Report("ws_fanout", "Live feed fan-out on loopback")
    report.say(f"{clients} clients, {args.rate:g} messages/s each, {seconds:g} s per mode; "
               f"file-descriptor limit {limit}")
    measured = {}
    with RedisServer() as server:
        for mode, compression in (("deflate off (default)", False), ("deflate on (baseline)", True)):
            with ApiServer(server.url, admin_token=TOKEN, ws_compression=compression) as api:
                query = f"fan{int(time.time() * 1000)}"
                for stream in ("FA", "FB"):
                    httpx.put(f"{api.url}/api/streams/{stream}", json={"max_delay": 0, "pi": 1000},
                              headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10).raise_for_status()
                answer = httpx.post(f"{api.url}/api/queries", json={"text": QUERY, "id": query},
                                    headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
                answer.raise_for_status()
                result = asyncio.run(measure(api, server.url, query, clients, args.rate, seconds, compression))
            measured[mode] = result
            rate = result["delivered"] / seconds
            report.say(f"{mode}: {result['complete']}/{clients} clients got all {result['written']} messages "
                       f"({result['in_order']} in stream order, {result['failed']} failed), {result['delivered']:,} delivered "
                       f"(~{rate:,.0f}/s); latency p50 {result['p50'] * 1000:.0f} ms, "
                       f"p99 {result['p99'] * 1000:.0f} ms, max {result['max'] * 1000:.0f} ms; "
                       f"connect + subscribe {result['connect_s']:.1f} s")
    default = measured["deflate off (default)"]
    report.say(f"target p99 < 1 s: {'met' if default['p99'] < 1.0 else 'NOT met'} "
               f"({default['p99'] * 1000:.0f} ms); every message in order: "
               f"{'yes' if default['complete'] == clients else 'no'}")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 4))
    for mode, result in measured.items():
        delays = np.sort(result["delays"]) * 1000
        if len(delays):
            axis.plot(delays, np.linspace(0, 1, len(delays)), label=f"{mode}: p99 {result['p99'] * 1000:.0f} ms")
    axis.axvline(1000, color="grey", linestyle=":", label="target p99 1 s")
    axis.set_xscale("log")
    axis.set_xlabel("latency, ms (stream id to client)")
    axis.set_ylabel("fraction of messages")
    axis.set_title(f"{clients} websocket clients x {args.rate:g} msg/s")
    axis.legend()
    report.save(figure)


if __name__ == "__main__":
    main()
