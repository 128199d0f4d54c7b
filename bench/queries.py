"""What a query costs: dozens of selective queries over the same events against one.

The intrusion workload of bench/pipeline.py (seismic and acoustic detections with a region
key, 200 regions) waits in the ingest stream; the job (local[2], its default settings but
the cap) starts and drains it. Four registries, each in a job of its own, on the same
events:

* one keyed join with a one-source filter keeping one region in 40
  (``A.zone % 40 = 0``, the zone being the region's number);
* 10 such joins (``A.zone % 40 = 0 .. 9``);
* 40 such joins (every region kept by exactly one of them);
* one unfiltered keyed join: the same matches as the 40 together.

Each is timed from the job's start until the end-of-input mark of every query is reached
(all matches written), the Spark start (the same in every run) apart: the first
micro-batch's time is left out, and the events are drained in batches after it. The
figure of merit is the 40 queries' time against the one unfiltered join's (target: within
1.3x).

With ``--up`` the 40 selective joins and the unfiltered one run as a user runs them, each
in a ``penumbra up`` of its own (``PENUMBRA_RESULT_MAXLEN`` raised): streams and queries
registered and the events posted through the API (batches of 1,000), timed from the first
post until every query's matches are readable through the API (its history, paged), each
query's count checked against the core's over the same events.

    .venv/bin/python bench/queries.py            # 80,000 events
    .venv/bin/python bench/queries.py --up       # the same through penumbra up and the API
    .venv/bin/python bench/queries.py --quick    # a smoke run: 8,000 events, the 40 queries in one job
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import httpx
import matplotlib
import redis

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.e2e import Up  # noqa: E402
from bench.pipeline import QUERY, STREAMS, batch_metrics, intrusions, job_settings  # noqa: E402
from bench.report import Report  # noqa: E402
from contract import Keys, Registry, append_events, end_of_input  # noqa: E402
from penumbra.cli.pipeline import JobProcess, wait_for_mark, wait_for_metrics  # noqa: E402
from penumbra.cli.processes import RedisServer  # noqa: E402
from penumbra.engine import compile_query  # noqa: E402
from penumbra.events import parse_event_lines, parse_streams  # noqa: E402

SELECTIVE = QUERY.replace("WITH THRESHOLD", "AND A.zone % 40 = {r} WITH THRESHOLD")


def zoned(lines: list[str]) -> list[str]:
    """The events with their region's number as ``zone`` too (what the filters read)."""
    out = []
    for line in lines:
        event = json.loads(line)
        event["attrs"]["zone"] = int(event["attrs"]["region"][1:])
        out.append(json.dumps(event))
    return out


def drain(lines: list[str], queries: dict[str, str], home: Path, batch_rows: int) -> dict:
    """The job over ``lines`` with these queries registered: seconds after the first
    micro-batch until every query's end mark, and the matches written."""
    keys = Keys()
    with RedisServer(home / "redis") as server:
        client = redis.Redis.from_url(server.url)
        registry = Registry(client, keys)
        registry.put_streams(STREAMS)
        for query_id, text in queries.items():
            registry.register(text, query_id=query_id)
        # a first small batch on its own warms the workers up: it is left out of the figure
        append_events(client, lines[:200], keys)
        warmup = end_of_input(client, list(queries), keys)
        job = JobProcess(home / "job", server.url, **job_settings(batch_rows)).start()
        try:
            wait_for_mark(client, warmup, job, 600, keys)
            started = time.monotonic()
            append_events(client, lines[200:], keys)
            mark = end_of_input(client, list(queries), keys)
            wait_for_mark(client, mark, job, 3600, keys)
            seconds = time.monotonic() - started
            wait_for_metrics(client, mark, job, 60, keys)
        finally:
            job.stop()
        matches = sum(client.xlen(keys.matches(query_id)) for query_id in queries)
        batches = [b for b in batch_metrics(client, keys) if b["rows"]]
        client.close()
    return {"queries": len(queries), "seconds": seconds, "matches": matches, "batches": len(batches),
            "events_per_s": (len(lines) - 200) / seconds}


def core_counts(lines: list[str], queries: dict[str, str]) -> dict[str, int]:
    """Each query's matches by the core alone over the events (one block)."""
    streams = parse_streams(STREAMS)
    events = parse_event_lines(lines, streams)
    return {query_id: len(compile_query(text, streams).feed(events).matches) for query_id, text in queries.items()}


def through_up(lines: list[str], queries: dict[str, str], home: Path, expected: dict[str, int],
               timeout: float = 900.0) -> dict:
    """``penumbra up`` with these queries registered through the API: seconds from the first
    post of ``lines`` until every query's history holds its ``expected`` count."""
    up = Up(home)
    try:
        token = up.ready()
        with httpx.Client(base_url=up.url, headers={"Authorization": f"Bearer {token}"}, timeout=120) as http:
            for name, params in STREAMS.items():
                http.put(f"/api/streams/{name}", json=params).raise_for_status()
            for query_id, text in queries.items():
                http.post("/api/queries", json={"id": query_id, "text": text}).raise_for_status()
            started = time.monotonic()
            for start in range(0, len(lines), 1000):
                body = ("[" + ",".join(lines[start:start + 1000]) + "]").encode()
                answer = http.post("/api/events", content=body, headers={"Content-Type": "application/json"})
                answer.raise_for_status()
            posted = time.monotonic() - started
            found = dict.fromkeys(queries, 0)
            while time.monotonic() - started < timeout:
                for query_id in [q for q in queries if found[q] < expected[q]]:
                    found[query_id] = readable(http, query_id)
                if all(found[q] >= expected[q] for q in queries):
                    break
                time.sleep(0.2)
            seconds = time.monotonic() - started
    finally:
        up.stop()
    return {"queries": len(queries), "seconds": seconds, "posted": posted, "matches": sum(found.values()),
            "exact": found == expected, "events_per_s": len(lines) / seconds}


def readable(http: httpx.Client, query_id: str) -> int:
    """How many matches of the query its history gives, paged to the end."""
    count, after = 0, None
    while True:
        answer = http.get(f"/api/queries/{query_id}/history", params={"limit": 5000, **({"next": after} if after else {})})
        answer.raise_for_status()
        page = answer.json()
        count += len(page["items"])
        after = page.get("next")
        if not after:
            return count


def main_up(report: Report, lines: list[str]) -> list[dict]:
    selective = {f"sel{r}": SELECTIVE.format(r=r) for r in range(40)}
    runs = {"40 selective": selective, "1 unfiltered": {"all": QUERY}}
    rows = []
    with tempfile.TemporaryDirectory(prefix="penumbra-queries-up-") as folder:
        for n, (name, queries) in enumerate(runs.items()):
            expected = core_counts(lines, queries)
            row = {"run": name, **through_up(lines, queries, Path(folder) / str(n), expected)}
            rows.append(row)
            report.say(f"{name:>13}: {row['seconds']:.2f} s from the first post until every match is readable "
                       f"({row['events_per_s']:,.0f} events/s; posting took {row['posted']:.2f} s), "
                       f"{row['matches']:,} matches, {'each query' if row['exact'] else 'NOT each query'} "
                       f"equal to the core's count")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=80_000)
    parser.add_argument("--batch-rows", type=int, default=100_000, help="the job's cap per micro-batch")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 8,000 events, the 40 selective queries in one job")
    parser.add_argument("--up", action="store_true", help="through penumbra up and the API, first post to readable")
    args = parser.parse_args()
    events = 8_000 if args.quick else args.events
    lines = zoned(intrusions(events))
    if args.up:
        report = Report("queries_up", "What a query costs through penumbra up: 40 selective joins against one")
        report.say(f"`python bench/queries.py --up`: {events:,} intrusion events posted through the API to a "
                   f"`penumbra up` of each run's own; keyed joins with the one-source filter `A.zone % 40 = r` "
                   f"against one unfiltered keyed join")
        rows = main_up(report, lines)
        conclude(report, rows, "seconds, first post to readable")
        return
    report = Report("queries_quick" if args.quick else "queries", "What a query costs: 40 selective joins against one")
    report.say(f"`python bench/queries.py{' --quick' if args.quick else ''}`: {events:,} intrusion events, the job "
               f"(local[2], cap {args.batch_rows:,}) draining them after a first batch of 200; keyed joins "
               f"with the one-source filter `A.zone % 40 = r` against one unfiltered keyed join")
    runs = {f"{n} selective": {f"sel{r}": SELECTIVE.format(r=r) for r in range(n)} for n in ((40,) if args.quick else (1, 10, 40))}
    if not args.quick:      # a smoke run starts one job: the ratio needs the full run
        runs["1 unfiltered"] = {"all": QUERY}
    rows = []
    with tempfile.TemporaryDirectory(prefix="penumbra-queries-") as folder:
        for n, (name, queries) in enumerate(runs.items()):
            row = {"run": name, **drain(lines, queries, Path(folder) / str(n), args.batch_rows)}
            rows.append(row)
            report.say(f"{name:>13}: {row['seconds']:.2f} s ({row['events_per_s']:,.0f} events/s), "
                       f"{row['matches']:,} matches in {row['batches']} micro-batches")
    conclude(report, rows, "seconds to drain")


def conclude(report: Report, rows: list[dict], unit: str) -> None:
    """The 40 selective queries' time against the unfiltered join's, and the figure."""
    forty = next(r for r in rows if r["run"] == "40 selective")
    one = next((r for r in rows if r["run"] == "1 unfiltered"), None)
    if one is None:
        report.say("--quick: the 40 selective queries alone (the ratio against one unfiltered join needs the full run)")
    else:
        report.say(f"40 selective against 1 unfiltered (same matches: {forty['matches']:,} and {one['matches']:,}): "
                   f"{forty['seconds'] / one['seconds']:.2f}x the time (target <= 1.3)")
    figure, axis = plt.subplots(figsize=(6, 3.5))
    axis.bar([r["run"] for r in rows], [r["seconds"] for r in rows])
    axis.set_ylabel(unit)
    report.save(figure)


if __name__ == "__main__":
    main()
