"""The Spark job's start: with the class archive ``make setup`` builds, and without it.

Each run starts the job (``python -m spark_jobs``) on a fresh redis-server and checkpoint,
with one keyed join registered and 200 of its events waiting, and times from the process's
start: the heartbeat (the streaming query started), the first batch's progress report
(the batch done: its Python workers, state stores and sink set up), and the job's stop
(SIGTERM). Runs alternate between the archive (``PENUMBRA_CLASS_ARCHIVE``, the default)
and none (``PENUMBRA_CLASS_ARCHIVE=""``), so both see the same machine; the ratios are of
medians. A table and a plot in bench/out/startup{,_quick}.md.

    .venv/bin/python bench/startup.py              # 3 runs each way
    .venv/bin/python bench/startup.py --quick      # 1 run with the archive
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.report import Report  # noqa: E402
from contract.ingest import append_events  # noqa: E402
from contract.keys import Keys  # noqa: E402
from contract.registry import Registry  # noqa: E402
from penumbra.cli.pipeline import JobProcess  # noqa: E402
from penumbra.cli.processes import RedisServer  # noqa: E402
from spark_jobs.settings import CLASS_ARCHIVE  # noqa: E402

QUERY = "SELECT * FROM S A, T B WHERE WINDOW(A, B) = 5 AND A.k = B.k WITH THRESHOLD 0.5"
STREAMS = {"S": {"pi": 2}, "T": {"pi": 2}}
TIMEOUT_SECONDS = 300.0


def events(count: int = 200) -> list[str]:
    return [json.dumps({"stream": "S" if i % 2 == 0 else "T", "id": f"e{i}", "attrs": {"k": f"k{i % 10}"},
                        "ts": {"lo": float(i), "hi": float(i) + 1.0}}) for i in range(count)]


def one_start(archive: bool) -> dict[str, float]:
    keys = Keys()
    with tempfile.TemporaryDirectory(prefix="penumbra-startup-") as home, RedisServer() as server:
        client = redis.Redis.from_url(server.url)
        registry = Registry(client, keys)
        registry.put_streams(STREAMS)
        registry.register(QUERY, query_id="startup")
        append_events(client, events(), keys)
        settings = {"trigger_seconds": 0} | ({} if archive else {"class_archive": ""})
        began = time.monotonic()
        job = JobProcess(Path(home) / "job", server.url, **settings).start()
        times: dict[str, float] = {}
        try:
            deadline = began + TIMEOUT_SECONDS
            while "first batch" not in times:
                if not job.alive:
                    raise RuntimeError(f"the job stopped: {job.tail(10)}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"no first batch within {TIMEOUT_SECONDS:g} s: {job.tail(10)}")
                if "heartbeat" not in times and client.exists(keys.heartbeat):
                    times["heartbeat"] = time.monotonic() - began
                if client.xlen(keys.metrics):
                    times["first batch"] = time.monotonic() - began
                time.sleep(0.05)
            stopping = time.monotonic()
            job.stop()
            times["stop"] = time.monotonic() - stopping
        finally:
            job.kill()
            client.close()
        used = "Unable to use shared archive" not in job.log.read_text(errors="replace") if archive else False
        times["archive used"] = float(used)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs each way")
    parser.add_argument("--quick", action="store_true", help="one run, with the archive")
    args = parser.parse_args()
    report = Report("startup_quick" if args.quick else "startup", "The Spark job's start")
    report.say(f"`python bench/startup.py{' --quick' if args.quick else ''}`: the job on a fresh Redis and "
               f"checkpoint, seconds from the process's start; archive {CLASS_ARCHIVE} "
               f"({'present' if CLASS_ARCHIVE.exists() else 'missing: make setup builds it'})")
    plan = [True] if args.quick else [True, False] * args.runs
    runs: dict[bool, list[dict[str, float]]] = {True: [], False: []}
    for archive in plan:
        times = one_start(archive)
        runs[archive].append(times)
        report.say(f"  {'archive' if archive else 'none   '}: heartbeat {times['heartbeat']:5.1f} s, first batch "
                   f"{times['first batch']:5.1f} s, stop {times['stop']:4.1f} s"
                   + ("" if not archive or times["archive used"] else "  (the JVM could not use the archive)"))
    medians = {archive: {name: statistics.median(t[name] for t in done) for name in ("heartbeat", "first batch")}
               for archive, done in runs.items() if done}
    for archive, figures in medians.items():
        report.say(f"median, {'archive' if archive else 'none'}: heartbeat {figures['heartbeat']:.1f} s, "
                   f"first batch {figures['first batch']:.1f} s")
    if len(medians) == 2:
        saved = medians[False]["first batch"] - medians[True]["first batch"]
        report.say(f"with the archive: first batch in {medians[True]['first batch'] / medians[False]['first batch']:.2f}x "
                   f"the time without ({saved:.1f} s less); heartbeat "
                   f"{medians[True]['heartbeat'] / medians[False]['heartbeat']:.2f}x")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(6, 3.2))
    for row, archive in enumerate(a for a in (True, False) if runs[a]):
        for times in runs[archive]:
            axis.plot([times["heartbeat"], times["first batch"]], [row, row], marker="o", alpha=0.6,
                      color="tab:blue" if archive else "tab:gray")
    axis.set_yticks(range(sum(1 for a in (True, False) if runs[a])),
                    [label for a, label in ((True, "archive"), (False, "none")) if runs[a]])
    axis.set_xlabel("seconds from the job's start (heartbeat, first batch)")
    axis.set_xlim(left=0)
    report.save(figure)


if __name__ == "__main__":
    main()
