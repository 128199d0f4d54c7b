"""A soak of the whole system: ``penumbra up --demo`` for an hour under steady load, one
sample a minute of every process's memory, Redis's, the state store's on disk, lag and
latency.

One ``python -m penumbra up --demo`` on a temporary home (its own redis-server, Spark job,
API and the demo's simulators with their three queries), and, from here:

- REST ingest at ``--rate`` events/s (a POST every 100 ms) into a keyed join over
  ``--keys`` key values (``A.k = B.k``): every event of stream soakA, a third of them
  with a soakB partner 5 ms later under the same key (a match); event time is this
  machine's clock in milliseconds, so the job's watermark follows the wall clock;
- ``--clients`` websocket clients on the join's live feed (one of them times each match:
  its arrival minus the later event's time, carried in the event's id);
- an analyst who moves the join's threshold between 0.50 and 0.55 and asks its what-if,
  once a minute.

Each minute: the resident memory of each kind of process (redis-server, the job's JVM,
its Python driver, its Python workers, the API, up, the simulators), Redis's used memory,
the checkpoint's size on disk, the job's lag (``/api/health``), matches and p50/p99 of
their latency. The verdict, from minute 10 on: no kind of process grows by more than 5 %
over its figure at minute 10, and p99 has no trend (its least-squares slope). A table and
a plot in bench/out/soak{,_quick}.md and .png.

    .venv/bin/python bench/soak.py --minutes 60 --rate 2000    # the soak
    .venv/bin/python bench/soak.py --quick                     # 8 s at 200 events/s
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.e2e import Up  # noqa: E402
from bench.feed_client import ResumingClient  # noqa: E402
from bench.report import Report  # noqa: E402

QUERY_ID = "soak"
QUERY = "SELECT * FROM soakA A, soakB B WHERE WINDOW(A, B) = 100 AND A.k = B.k WITH THRESHOLD 0.5"
STREAM = {"pi": 20, "max_delay": 2000}
#: Kinds of process, by what their command line holds (first match wins).
KINDS = (("redis", "redis-server"), ("job JVM", "java"), ("job workers", "pyspark.daemon"),
         ("job workers", "pyspark/daemon"), ("job driver", "spark_jobs"), ("API", "-m backend"),
         ("simulators", "simulate"), ("up", "penumbra up"))


def home_processes(home: Path) -> list[tuple[int, str, int]]:
    """The live processes of ``home`` (its ``PENUMBRA_HOME`` in their environment, or their
    working folder in it): pid, kind (:data:`KINDS`) and resident memory in bytes."""
    marker = f"PENUMBRA_HOME={home}".encode()
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ours = marker in (entry / "environ").read_bytes().split(b"\0") or \
                Path(os.readlink(entry / "cwd")).is_relative_to(home)
            if not ours:
                continue
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            status = (entry / "status").read_text().splitlines()
            rss = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS:"))
            if next(line.split()[1] for line in status if line.startswith("State:")) in ("Z", "X"):
                continue
        except (OSError, StopIteration, ValueError):
            continue
        kind = next((name for name, word in KINDS if word in command), None)
        out.append((int(entry.name), kind or "other: " + Path(command.split(" ", 1)[0]).name, rss))
    return out


def processes(home: Path) -> dict[str, int]:
    """Resident memory (bytes) of the live processes of ``home``, summed by kind."""
    out: dict[str, int] = {}
    for _, kind, rss in home_processes(home):
        out[kind] = out.get(kind, 0) + rss
    return out


def disk_bytes(folder: Path) -> int:
    total = 0
    for path in folder.rglob("*"):
        with contextlib.suppress(OSError):
            if path.is_file():
                total += path.stat().st_size
    return total


class Poster(threading.Thread):
    """POSTs ``rate`` events/s in batches every 100 ms; counts what was answered."""

    def __init__(self, url: str, token: str, rate: int, keys: int):
        super().__init__(daemon=True)
        self.url, self.token, self.rate, self.keys = url, token, rate, keys
        self.stop, self.sent, self.accepted, self.failures = threading.Event(), 0, 0, 0
        self.random = random.Random(7)

    def batch(self, count: int) -> list[dict]:
        now = time.time() * 1000.0
        out = []
        while len(out) < count:
            self.sent += 1
            k = self.random.randrange(self.keys)
            t = round(now + len(out) * 0.01, 3)
            out.append({"stream": "soakA", "id": f"a{self.sent}-{t}", "ts": {"lo": t, "hi": t + 10},
                        "attrs": {"k": k}})
            if self.sent % 3 == 0 and len(out) < count:
                out.append({"stream": "soakB", "id": f"b{self.sent}-{t + 5}", "ts": {"lo": t + 5, "hi": t + 15},
                            "attrs": {"k": k}})
        return out

    def run(self) -> None:
        per_batch = max(1, self.rate // 10)
        with httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {self.token}"}, timeout=30) as http:
            due = time.monotonic()
            while not self.stop.is_set():
                due += 0.1
                try:
                    answer = http.post("/api/events", json=self.batch(per_batch))
                    if answer.status_code == 202:
                        self.accepted += answer.json()["accepted"]
                    else:
                        self.failures += 1
                except httpx.HTTPError:
                    self.failures += 1
                time.sleep(max(0.0, due - time.monotonic()))


class Client(ResumingClient):
    """A websocket client of the join's live feed; ``timed`` records each match's latency."""

    def __init__(self, url: str, token: str, timed: bool):
        super().__init__(url, token, pause=1.0)
        self.timed = timed
        self.received, self.latencies = 0, []
        self.cursor: str | None = None

    def subscription(self) -> dict:
        return {"queries": [QUERY_ID], "kinds": ["matches", "alarms"], **({"since": self.cursor} if self.cursor else {})}

    def handle(self, message: dict) -> None:
        if message.get("type") != "matches":
            return
        self.received += 1
        self.cursor = message["id"]
        if self.timed:
            later = max(float(e.split("-", 1)[1]) for e in message["data"]["events"].values())
            self.latencies.append((time.time(), time.time() - later / 1000.0))


class Analyst(threading.Thread):
    """Once a period (a minute): the join's threshold moved between 0.50 and 0.55, and its what-if asked."""

    def __init__(self, url: str, token: str, period: float = 60.0):
        super().__init__(daemon=True)
        self.url, self.token, self.stop, self.errors, self.period = url, token, threading.Event(), 0, period

    def run(self) -> None:
        with httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {self.token}"}, timeout=60) as http:
            turn = 0
            while not self.stop.wait(self.period):
                turn += 1
                try:
                    moved = http.patch(f"/api/queries/{QUERY_ID}", json={"threshold": 0.55 if turn % 2 else 0.5})
                    asked = http.get(f"/api/queries/{QUERY_ID}/what-if", params={"batches": 100})
                    self.errors += moved.status_code != 200 or asked.status_code != 200
                except httpx.HTTPError:
                    self.errors += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--rate", type=int, default=2000, help="events/s posted")
    parser.add_argument("--keys", type=int, default=10_000, help="key values of the join")
    parser.add_argument("--clients", type=int, default=20, help="websocket clients")
    parser.add_argument("--quick", action="store_true", help="8 s at 200 events/s, 4 clients, sampled every 4 s")
    args = parser.parse_args()
    period = 60.0
    if args.quick:
        args.minutes, args.rate, args.clients, period = 8 / 60, 200, 4, 4.0
    report = Report("soak_quick" if args.quick else "soak", "Soak: the whole system under steady load")
    report.say(f"`python bench/soak.py {' '.join(sys.argv[1:])}`: penumbra up --demo, {args.rate:,} events/s over "
               f"REST into a keyed join over {args.keys:,} key values, {args.clients} websocket clients, a threshold "
               f"moved and a what-if asked every minute; {args.minutes:g} minutes")
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="penumbra-soak-") as folder:
        home = Path(folder)
        # result streams at their default cap (Redis then plateaus), and identities remembered
        # 6 minutes, so that their memory plateaus within the hour too (docs/redis.md: with
        # the default 24 hours it grows by rate x bytes per identity until then)
        up = Up(home, extra=["--demo"], extra_env={"PENUMBRA_RESULT_MAXLEN": "100000",
                                             "PENUMBRA_IDENTITY_HORIZON_HOURS": "0.1"})
        threads: list = []
        try:
            started = time.monotonic()
            token = up.ready()
            report.say(f"penumbra up --demo ready in {time.monotonic() - started:.0f} s")
            headers = {"Authorization": f"Bearer {token}"}
            for name in ("soakA", "soakB"):
                httpx.put(f"{up.url}/api/streams/{name}", json=STREAM, headers=headers, timeout=30).raise_for_status()
            httpx.post(f"{up.url}/api/queries", json={"id": QUERY_ID, "text": QUERY}, headers=headers,
                       timeout=30).raise_for_status()
            clients = [Client(up.url, token, timed=(n == 0)) for n in range(args.clients)]
            poster, analyst = Poster(up.url, token, args.rate, args.keys), Analyst(up.url, token, period)
            threads = [*clients, poster, analyst]
            for thread in threads:
                thread.start()
            password = (home / "var" / "redis" / "password").read_text().strip()
            store = redis.Redis(host="127.0.0.1", port=up.redis_port, password=password)
            began = time.monotonic()
            for sample in range(1, int(round(args.minutes * 60 / period)) + 1):
                time.sleep(max(0.0, began + period * sample - time.monotonic()))
                minute = round(sample * period / 60.0, 2)
                now = time.time()
                recent = np.array([d for at, d in clients[0].latencies if now - at <= period] or [np.nan])
                with contextlib.suppress(httpx.HTTPError, ValueError):
                    health = httpx.get(f"{up.url}/api/health", timeout=30).json()
                memory = processes(home)
                row = {"minute": minute, **{f"{k} MB": round(v / 2 ** 20, 1) for k, v in sorted(memory.items())},
                       "redis used MB": round(store.info("memory")["used_memory"] / 2 ** 20, 1),
                       "checkpoint MB": round(disk_bytes(home / "var" / "checkpoint") / 2 ** 20, 1),
                       "lag s": health.get("lag_seconds"), "lag entries": health.get("lag_entries"),
                       "posted": poster.accepted, "matches/min": round(int(np.sum(~np.isnan(recent))) * 60 / period),
                       "p50 s": round(float(np.nanpercentile(recent, 50)), 3) if recent.size else None,
                       "p99 s": round(float(np.nanpercentile(recent, 99)), 3) if recent.size else None}
                rows.append(row)
                report.say(" · ".join(f"{k} {v}" for k, v in row.items()))
            store.close()
            report.say(f"posted {poster.accepted:,} events ({poster.failures} failed requests); clients received "
                       f"{sum(c.received for c in clients):,} matches, {sum(c.reconnects for c in clients)} "
                       f"reconnects; analyst errors {analyst.errors}")
        finally:
            for thread in threads:
                thread.stop.set()
            up.stop()
    verdict(report, rows)
    plot(report, rows)


def verdict(report: Report, rows: list[dict]) -> None:
    later = [r for r in rows if r["minute"] >= 10]
    if len(later) < 2:
        report.say("too short for a verdict (it starts at minute 10)")
        return
    first = later[0]
    for column in sorted({k for r in later for k in r if k.endswith(" MB")}):
        base = first.get(column)
        top = max((r.get(column) or 0) for r in later)
        if base:
            growth = top / base - 1
            report.say(f"{column}: {base} at minute 10, at most {top} later: {growth:+.1%} "
                       f"({'within' if growth <= 0.05 else 'OVER'} 5 %)")
    minutes = np.array([r["minute"] for r in later if r["p99 s"] is not None], dtype=float)
    p99 = np.array([r["p99 s"] for r in later if r["p99 s"] is not None], dtype=float)
    if minutes.size >= 2:
        slope = np.polyfit(minutes, p99, 1)[0]
        report.say(f"p99 from minute 10 on: mean {p99.mean():.2f} s, least-squares slope {slope * 60:+.3f} s per hour")


def plot(report: Report, rows: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (memory, sizes, latency) = plt.subplots(3, 1, figsize=(9, 10), sharex=True)
    minutes = [r["minute"] for r in rows]
    for column in sorted({k for r in rows for k in r if k.endswith(" MB")} - {"redis used MB", "checkpoint MB"}):
        memory.plot(minutes, [r.get(column) for r in rows], label=column.removesuffix(" MB"))
    memory.set_ylabel("resident memory, MB")
    memory.legend(fontsize=8, ncol=2)
    for column in ("redis used MB", "checkpoint MB"):
        sizes.plot(minutes, [r.get(column) for r in rows], label=column.removesuffix(" MB"))
    sizes.set_ylabel("MB")
    sizes.legend(fontsize=8)
    latency.plot(minutes, [r["p50 s"] for r in rows], label="p50")
    latency.plot(minutes, [r["p99 s"] for r in rows], label="p99")
    latency.plot(minutes, [r["lag s"] for r in rows], label="lag (s)", linestyle=":")
    latency.set_ylabel("seconds")
    latency.set_xlabel("minute")
    latency.legend(fontsize=8)
    for axis in (memory, sizes, latency):
        axis.axvline(10, color="grey", linewidth=0.5)
    report.save(figure)


if __name__ == "__main__":
    main()
