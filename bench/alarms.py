"""Alarm instances at scale: 10,000 active instances of one query under 10,000 events/s,
the time from a match to its alarm's update on the live feed, and from a reopening
match to its webhook notification.

One ``penumbra up`` (trigger 0) and, from here: a keyed join over ``--keys`` key values
(``A.k = B.k``), every A event followed 5 ms later by its B partner (a match) under keys
taken in turn, so that every key's instance is open; a websocket client on the query's
alarm feed; a webhook receiver on 127.0.0.1 with a contact point and a routing rule to it;
an analyst resolving ``--resolves`` instances a second (their next match reopens them,
which notifies). First every instance opens (warm-up), then ``--seconds`` at ``--rate``
events/s are measured:

- match to alarm update: the arrival of an instance's alarm message minus the Redis time
  of the latest match it carries (the entry id's milliseconds: one clock);
- match to notification: the webhook's arrival minus the Redis time of the match that
  reopened the instance (its episode's first match).

Targets (issue: alarms per key): both p99 <= 2 s. A table in bench/out/alarms.md.

    .venv/bin/python bench/alarms.py                 # 10,000 keys, 10,000 events/s for 30 s
    .venv/bin/python bench/alarms.py --quick         # 100 keys, 1,000 events/s for 3 s
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.e2e import Up  # noqa: E402
from bench.feed_client import ResumingClient  # noqa: E402
from bench.report import Report  # noqa: E402
from penumbra.cli.processes import free_port  # noqa: E402

QUERY_ID = "watch"
QUERY = "SELECT * FROM wA A, wB B WHERE WINDOW(A, B) = 50 AND A.k = B.k WITH THRESHOLD 0.5"
STREAMS = {"wA": {"pi": 20, "max_delay": 2000}, "wB": {"pi": 20, "max_delay": 2000}}


def ms_of(cursor: str | None) -> float | None:
    return int(cursor.split("-")[0]) / 1000.0 if cursor else None


class Receiver:
    """A webhook on 127.0.0.1 noting when each notification arrived."""

    def __init__(self):
        self.port = free_port()
        self.arrived: list[tuple[float, dict]] = []
        arrived = self.arrived

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                arrived.append((time.time(), json.loads(body)))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        Handler.protocol_version = "HTTP/1.1"       # keep-alive, as a real receiver would
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


class Watcher(ResumingClient):
    """A websocket client of the query's alarm feed: each message's arrival and latest match."""

    def __init__(self, url: str, token: str):
        super().__init__(url, token)
        self.updates: list[tuple[float, str, str]] = []     # (arrival, instance, its latest match)
        self.cursor: str | None = None

    def subscription(self) -> dict:
        return {"queries": [QUERY_ID], "kinds": ["alarms"],
                **({"since": {f"alarms:{QUERY_ID}": self.cursor}} if self.cursor else {})}

    def handle(self, message: dict) -> None:
        if message.get("type") == "alarms":
            self.updates.append((time.time(), message["data"]["id"], message["data"]["last"]))
            self.cursor = message["id"] or self.cursor


def post_pairs(url: str, token: str, keys: int, rate: int, seconds: float, start_key: int, clock: list[float]) -> int:
    """``rate`` events/s (A and B pairs, keys in turn) for ``seconds``; the events sent."""
    sent, key = 0, start_key
    per_post = max(2, rate // 20)
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
        began = time.monotonic()
        while time.monotonic() - began < seconds:
            batch = []
            while len(batch) < per_post:
                clock[0] += 1.0
                t = clock[0]
                k = key % keys
                key += 1
                batch += [{"stream": "wA", "id": f"a{key}", "ts": {"lo": t, "hi": t + 10}, "attrs": {"k": k}},
                          {"stream": "wB", "id": f"b{key}", "ts": {"lo": t + 5, "hi": t + 15}, "attrs": {"k": k}}]
            answer = http.post("/api/events", json=batch)
            if answer.status_code == 202:
                sent += len(batch)
            due = began + sent / rate
            time.sleep(max(0.0, due - time.monotonic()))
    return key


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--rate", type=int, default=10_000, help="events/s measured")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--resolves", type=int, default=5, help="instances resolved per second")
    parser.add_argument("--quick", action="store_true", help="100 keys, 1,000 events/s for 3 s")
    args = parser.parse_args()
    if args.quick:
        args.keys, args.rate, args.seconds, args.resolves = 100, 1_000, 3.0, 2
    report = Report("alarms_quick" if args.quick else "alarms", "Alarm instances at scale")
    report.say(f"`python bench/alarms.py{' --quick' if args.quick else ''}`: penumbra up (local[2], trigger 0), "
               f"`{QUERY}` over {args.keys:,} keys, {args.rate:,} events/s for {args.seconds:g} s, "
               f"{args.resolves} resolutions/s, one websocket client, one webhook")
    receiver = Receiver()
    with tempfile.TemporaryDirectory(prefix="penumbra-alarms-") as folder:
        up = Up(Path(folder))
        watcher = None
        try:
            token = up.ready()
            with httpx.Client(base_url=up.url, headers={"Authorization": f"Bearer {token}"}, timeout=120) as http:
                for name, params in STREAMS.items():
                    assert http.put(f"/api/streams/{name}", json=params).status_code == 200
                assert http.post("/api/queries", json={"id": QUERY_ID, "text": QUERY, "priority": "critical"}
                                 ).status_code == 201
                contact = http.post("/api/contact-points", json={"name": "bench", "url":
                                                                 f"http://127.0.0.1:{receiver.port}/"}).json()["id"]
                assert http.post("/api/routing-rules", json={"queries": [QUERY_ID], "contacts": [contact]}
                                 ).status_code == 201
                clock = [1_000_000.0]
                # warm-up: every key's instance opens
                started = time.monotonic()
                warming = 3.0 if args.quick else 10.0
                key = post_pairs(up.url, token, args.keys, max(args.rate, 2 * args.keys // 10), warming, 0, clock)
                while time.monotonic() - started < 300:
                    last = http.get("/api/alarms", params={"query": QUERY_ID, "limit": 1, "next": str(args.keys - 1)})
                    if last.json()["items"]:
                        break                       # the keys-th instance exists
                    time.sleep(1.0)
                report.say(f"warm-up: {args.keys:,} instances open after {time.monotonic() - started:.0f} s")
                # the burst of openings notified before anything is measured
                drained = time.monotonic()
                while time.monotonic() - drained < 600:
                    if not http.get("/api/deliveries").json()["pending"] and len(receiver.arrived) >= args.keys:
                        break
                    time.sleep(0.5)
                report.say(f"the {len(receiver.arrived):,} opening notifications delivered "
                           f"{time.monotonic() - started:.0f} s after the first events "
                           f"({len(receiver.arrived) / max(1e-9, time.monotonic() - started):,.0f}/s over the warm-up)")
                watcher = Watcher(up.url, token)
                watcher.start()
                time.sleep(3.0)
                mark, notified = time.time(), len(receiver.arrived)
                stop = threading.Event()

                def resolve() -> None:
                    rng = random.Random(1)
                    with httpx.Client(base_url=up.url, headers={"Authorization": f"Bearer {token}"}, timeout=30) as h:
                        while not stop.wait(1.0):
                            items = h.get("/api/alarms", params={"query": QUERY_ID, "state": "new",
                                                                 "limit": 1000}).json()["items"]
                            for alarm in rng.sample(items, min(args.resolves, len(items))):
                                h.post(f"/api/alarms/{alarm['id']}/resolve")

                resolver = threading.Thread(target=resolve, daemon=True)
                resolver.start()
                post_pairs(up.url, token, args.keys, args.rate, args.seconds, key, clock)
                stop.set()
                time.sleep(5.0)
            updates = [(at, last) for at, _, last in watcher.updates if at >= mark and last]
            update_s = np.array([at - ms_of(last) for at, last in updates]) if updates else np.array([np.nan])
            reopened = [(at, body) for at, body in receiver.arrived[notified:] if body.get("event") == "reopened"]
            notify_s = np.array([at - ms_of(body["alarm"]["first"]) for at, body in reopened
                                 if body["alarm"].get("first")]) if reopened else np.array([np.nan])
            report.say(f"match to alarm update: {len(updates):,} updates, p50 {np.nanpercentile(update_s, 50):.2f} s, "
                       f"p99 {np.nanpercentile(update_s, 99):.2f} s (target <= 2 s)")
            report.say(f"match to webhook notification: {len(reopened):,} reopenings, p50 "
                       f"{np.nanpercentile(notify_s, 50):.2f} s, p99 {np.nanpercentile(notify_s, 99):.2f} s "
                       f"(target <= 2 s)")
            made_s = np.array([body["at"] - ms_of(body["alarm"]["first"]) for _, body in reopened
                               if body["alarm"].get("first")]) if reopened else np.array([np.nan])
            report.say(f"  of which the match to the notification's making: p50 {np.nanpercentile(made_s, 50):.2f} s, "
                       f"p99 {np.nanpercentile(made_s, 99):.2f} s; the rest is the delivery")
            taken_s = np.array([body["at"] - ms_of(body["id"].split(":")[0]) for _, body in reopened]) \
                if reopened else np.array([np.nan])
            report.say(f"  and the alarm event's writing to the notification's making: p50 "
                       f"{np.nanpercentile(taken_s, 50):.2f} s, p99 {np.nanpercentile(taken_s, 99):.2f} s")
        finally:
            if watcher:
                watcher.stop.set()
            up.stop()
            receiver.stop()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(8, 3.5))
    for values, label in ((update_s, "match → alarm update"), (notify_s, "match → webhook")):
        finite = np.sort(values[np.isfinite(values)])
        if len(finite):
            axis.plot(finite, np.linspace(0, 1, len(finite)), label=label)
    axis.axvline(2.0, color="grey", ls="--", lw=1)
    axis.set_xlabel("seconds")
    axis.set_ylabel("share at most")
    axis.legend()
    report.save(figure)


if __name__ == "__main__":
    main()
