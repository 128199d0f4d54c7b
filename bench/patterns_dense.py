"""Pattern throughput on a match-dense workload, beside the sparse one of section 5.1.

The dense workload (patterns_workloads.py): streams A, B, C in turn, one event in ten can
match each component of ``SEQ(A a, B b, C c)``, skip till any match, ``WITHIN 100``, about
0.3 matches per event; intervals of half-width 5, half-widths drawn per event from 1..8
(so shapes rarely repeat), certain timestamps, and skip till next match. The sparse one:
section 5.1's stream E (delta 5, W 100, l = 3). All ``USING sorted``. For each:

* the operator alone: the workload's events (parsed first, then frozen out of the garbage
  collector) fed in blocks of 1,000 as ``penumbra eval`` feeds them; CPU time, best of 3;
* the whole ``penumbra eval --stats`` process on the workload as JSON lines: wall time
  from the interpreter's start to its exit, and its CPU time (less sensitive to other work
  on the machine), each the best of 3 (of 2 on the tree before);
* the confidence of the workload's matches (those of its first events): the fast path
  (``chain_confidence``) against the dynamic programme it replaces, on the same matches,
  with the hit rate of the shape memo.

Operator and process are measured on this tree and on the tree before this work (commit
``baseline.BEFORE``), each in a fresh process, in the same run. Last, a sweep of the gap
between events: events/s of the operator against matches per event, now and before.

    python bench/patterns_dense.py [--quick]

prints the figures and writes bench/out/patterns_dense.png and patterns_dense.md.
"""

from __future__ import annotations

import argparse
import atexit
import gc
import json
import math
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
import baseline  # noqa: E402
import patterns_workloads as workloads  # noqa: E402
from report import Report  # noqa: E402

from penumbra.engine import compile_query  # noqa: E402
from penumbra.events import Streams, event_to_json, load_events, load_streams  # noqa: E402

BLOCK = 1000
TARGETS = {"dense, half-width 5": 100_000, "dense, half-widths 1..8": 60_000, "dense, certain": 200_000}
EVAL_TARGET = 50_000
#: the events the whole-process target is set for
EVAL_EVENTS = 200_000


@dataclass
class Workload:
    name: str
    events: list
    query: str
    streams: Streams


def build(count: int) -> list[Workload]:
    dense = workloads.DENSE_QUERY
    any_match, next_match = "skip_till_any_match", "skip_till_next_match"
    return [
        Workload("dense, half-width 5", workloads.dense_events(count, (5, 5)),
                 dense.format(strategy=any_match, method="sorted"), workloads.dense_streams((5, 5))),
        Workload("dense, half-widths 1..8", workloads.dense_events(count, (1, 8)),
                 dense.format(strategy=any_match, method="sorted"), workloads.dense_streams((1, 8))),
        Workload("dense, certain", workloads.dense_events(count, (0, 0), spacing=4),
                 dense.format(strategy=any_match, method="sorted"), workloads.dense_streams((0, 0))),
        Workload("dense, skip till next", workloads.dense_events(count, (5, 5)),
                 dense.format(strategy=next_match, method="sorted"), workloads.dense_streams((5, 5))),
        Workload("sparse (section 5.1)", workloads.synthetic_events(count, 5),
                 workloads.synthetic_query("sorted"), workloads.synthetic_streams(5)),
    ]


def write(workload: Workload, folder: Path, tag: str) -> list[str]:
    """The workload as files: ``--events``, ``--streams`` and ``--query`` for ``penumbra eval``."""
    events, streams = folder / f"{tag}.jsonl", folder / f"{tag}.streams.json"
    with open(events, "w", encoding="utf-8") as handle:
        handle.writelines(json.dumps(event_to_json(e)) + "\n" for e in workload.events)
    streams.write_text(json.dumps(workload.streams.to_json()))
    return ["--events", str(events), "--streams", str(streams), "--query", workload.query]


def operator_alone(events_path: str, streams_path: str, query: str, repeats: int) -> dict:
    """The ``--measure`` mode, run against either tree: CPU seconds of the best of ``repeats``
    runs of the operator over the parsed events, its matches, and the memo's counts on the
    first run (``None`` before the memo existed)."""
    streams = load_streams(streams_path)
    events, _ = load_events(events_path, streams)
    gc.collect()
    gc.freeze()
    try:
        from penumbra.patterns.confidence import memo_counters
    except ImportError:
        memo_counters = None
    best, memo = math.inf, None
    for _ in range(repeats):
        before = memo_counters() if memo_counters else None
        operator = compile_query(query, streams)
        matches = 0
        started = time.process_time()
        for first in range(0, len(events), BLOCK):
            matches += len(operator.feed(events[first: first + BLOCK]).matches)
        matches += len(operator.flush().matches)
        best = min(best, time.process_time() - started)
        if before is not None and memo is None:
            after = memo_counters()
            memo = {key: after[key] - before[key] for key in ("confidence_memo_hits", "confidence_memo_misses")}
    return {"seconds": best, "matches": matches, "events": len(events), "memo": memo}


def weigh_matches(workload: Workload, count: int) -> dict:
    """µs per match of the fast path and of the dynamic programme on the matches of the
    workload's first ``count`` events (an engine fed in blocks, as the operator feeds it),
    and the memo's hits and misses on the fast path."""
    from penumbra.patterns.confidence import chain_confidence, dynamic_programme, memo_counters
    from penumbra.patterns.model import to_grid
    from penumbra.patterns.operator import ENGINES

    operator = compile_query(workload.query, workload.streams)
    pattern = operator.pattern
    engine = ENGINES[operator.query.method](pattern)
    events = workload.events[:count]
    items = sorted(((to_grid(events[i], 1.0), j) for i, j in pattern.items_of(events)),
                   key=lambda item: (item[0].lo, item[1]))
    span = max(e.hi - e.lo for e, _ in items)
    found = []
    for first in range(0, len(items), BLOCK):
        block = items[first: first + BLOCK]
        engine.add(block)
        found += engine.advance(block[-1][0].lo - span)
    found += engine.advance(math.inf)
    calls = [(f.events, f.vlb, f.vub, pattern.window, operator._excluders(engine, f) if pattern.next_match else None)
             for f in found]
    before = memo_counters()
    started = time.process_time()
    for call in calls:
        chain_confidence(*call)
    fast = time.process_time() - started
    after = memo_counters()
    sample = calls[:2000]
    started = time.process_time()
    for call in sample:
        dynamic_programme(*call)
    plain = time.process_time() - started
    return {"matches": len(calls), "fast_us": 1e6 * fast / max(1, len(calls)),
            "plain_us": 1e6 * plain / max(1, len(sample)),
            "hits": after["confidence_memo_hits"] - before["confidence_memo_hits"],
            "misses": after["confidence_memo_misses"] - before["confidence_memo_misses"]}


def best_process(files: list[str], repeats: int, source: Path = baseline.ROOT) -> tuple[float, float]:
    """The least wall and the least CPU seconds of ``repeats`` whole ``penumbra eval`` processes."""
    runs = [baseline.run_eval(files, source) for _ in range(repeats)]
    return min(wall for wall, _, _ in runs), min(cpu for _, cpu, _ in runs)


def hit_rate(hits: int, misses: int) -> str:
    return f"{hits / (hits + misses):.0%} of {hits + misses:,}" if hits + misses else "not used"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke test")
    parser.add_argument("--measure", nargs=4, metavar=("EVENTS", "STREAMS", "QUERY", "REPEATS"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        events, streams, query, repeats = args.measure
        print(json.dumps(operator_alone(events, streams, query, int(repeats))))
        return
    count, weighed, repeats, sweep_count = (2_000, 1_000, 1, 1_500) if args.quick else (EVAL_EVENTS, 20_000, 3, 50_000)
    report = Report("patterns_dense_quick" if args.quick else "patterns_dense", "Pattern throughput, match-dense and sparse workloads (one core)")
    say = report.say
    before = baseline.tree()
    script = Path(__file__).resolve()
    folder = Path(tempfile.mkdtemp(prefix="penumbra-dense-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    say(f"{count:,} events per workload, blocks of {BLOCK:,}; 'before' is commit {baseline.BEFORE}")
    rows = []
    for k, workload in enumerate(build(count)):
        files = write(workload, folder, f"w{k}")
        confidence = weigh_matches(workload, weighed)
        now = baseline.measure(script, [files[1], files[3], workload.query, str(repeats)])
        old = baseline.measure(script, [files[1], files[3], workload.query, str(max(1, repeats - 1))], before)
        process_now = best_process(files, repeats)
        process_old = best_process(files, max(1, repeats - 1), before)
        rows.append((workload, now, old, process_now, process_old, confidence))
    say("")
    say(f"{'workload':26s} {'matches/ev':>10s} {'operator ev/s':>13s} {'before':>9s} {'x':>5s} "
        f"{'us/event':>8s} {'eval ev/s':>10s} {'before':>8s} {'x':>5s} {'eval ev/s, CPU':>15s} {'before':>8s}")
    for workload, now, old, process_now, process_old, _ in rows:
        say(f"{workload.name:26s} {now['matches'] / count:10.3f} {count / now['seconds']:13,.0f} "
            f"{count / old['seconds']:9,.0f} {old['seconds'] / now['seconds']:5.1f} "
            f"{1e6 * now['seconds'] / count:8.1f} {count / process_now[0]:10,.0f} {count / process_old[0]:8,.0f} "
            f"{process_old[0] / process_now[0]:5.1f} {count / process_now[1]:15,.0f} {count / process_old[1]:8,.0f}")
    say("")
    say(f"{'confidence per match':26s} {'matches':>8s} {'fast us':>8s} {'DP us':>7s} {'x':>5s}  "
        f"{'memo hits (matches weighed)':28s} {'memo hits (operator run)'}")
    for workload, now, _, _, _, confidence in rows:
        memo = now["memo"] or {"confidence_memo_hits": 0, "confidence_memo_misses": 0}
        say(f"{workload.name:26s} {confidence['matches']:8,d} {confidence['fast_us']:8.1f} "
            f"{confidence['plain_us']:7.1f} {confidence['plain_us'] / confidence['fast_us']:5.1f}  "
            f"{hit_rate(confidence['hits'], confidence['misses']):28s} "
            f"{hit_rate(memo['confidence_memo_hits'], memo['confidence_memo_misses'])}")
    say("")
    for workload, now, old, process_now, _, _ in rows:
        rate = count / now["seconds"]
        if workload.name in TARGETS:
            say(f"target: operator on {workload.name} >= {TARGETS[workload.name]:,} events/s: {rate:,.0f} "
                f"({rate / TARGETS[workload.name]:.0%})")
        if workload.name == "dense, half-width 5":
            say(f"target: whole eval process on {EVAL_EVENTS:,} events >= {EVAL_TARGET:,} events/s: "
                f"{count / process_now[0]:,.0f} on {count:,} ({count / process_now[0] / EVAL_TARGET:.0%}; "
                f"{count / process_now[1]:,.0f} by CPU time)"
                + (" -- not comparable: start-up dominates a quick run" if count < EVAL_EVENTS else ""))
        if workload.name.startswith("sparse"):
            say(f"target: sparse no slower than before: {old['seconds'] / now['seconds']:.2f}x before's speed")

    spacings = [5] if args.quick else [2.5, 3, 4, 5, 7, 10, 14]
    say("")
    say(f"sweep ({sweep_count:,} events, half-width 5): spacing, matches/event, operator events/s now, before")
    curves: dict[str, list[tuple[float, float]]] = {"now": [], "before": []}
    dense = workloads.DENSE_QUERY.format(strategy="skip_till_any_match", method="sorted")
    for n, spacing in enumerate(spacings):
        workload = Workload("sweep", workloads.dense_events(sweep_count, (5, 5), spacing), dense,
                            workloads.dense_streams((5, 5)))
        files = write(workload, folder, f"s{n}")
        now = baseline.measure(script, [files[1], files[3], dense, "1"])
        old = baseline.measure(script, [files[1], files[3], dense, "1"], before)
        density = now["matches"] / sweep_count
        curves["now"].append((density, sweep_count / now["seconds"]))
        curves["before"].append((density, sweep_count / old["seconds"]))
        say(f"  {spacing:5.1f} {density:8.3f} {curves['now'][-1][1]:12,.0f} {curves['before'][-1][1]:10,.0f}")

    figure, axes = plt.subplots(figsize=(7, 4.2))
    for label, points in curves.items():
        axes.plot(*zip(*points), marker="o", label=f"operator, {label}")
    for workload, now, *_ in rows:
        if workload.name in TARGETS:
            axes.scatter([now["matches"] / count], [count / now["seconds"]], marker="s", zorder=3)
            axes.annotate(workload.name.removeprefix("dense, "), (now["matches"] / count, count / now["seconds"]),
                          fontsize=7, xytext=(4, 4), textcoords="offset points")
    axes.axhline(TARGETS["dense, half-width 5"], color="red", linestyle="--", linewidth=1, label="target, half-width 5")
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel("matches per event")
    axes.set_ylabel("events per second (one core)")
    axes.set_title(f"SEQ(A, B, C) WITHIN 100, skip till any match, USING sorted; blocks of {BLOCK:,}", fontsize=9)
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=8)
    report.save(figure)


if __name__ == "__main__":
    main()
