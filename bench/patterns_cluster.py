"""Figure 4(f) of the imprecise-timestamps paper: Query 1 on a cluster-monitoring trace.

The trace (see ``patterns_workloads.cluster_events``) arrives at 778 events/s; the
target is to evaluate it at least 20 times faster than it arrives on one core. Each
method's throughput is reported with its ratio to the arrival rate and to the
any-state method measured in the same run; the matches of every method that finished
the trace are checked equal to those of the sorted method.

    python bench/patterns_cluster.py            # 20 minutes of trace, PNG in bench/out/
    python bench/patterns_cluster.py --quick    # 2 minutes of trace, 1 s per method (*_quick)
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from patterns_workloads import CLUSTER_QUERY, CLUSTER_RATE, cluster_events, cluster_streams
from penumbra.patterns import build_operator
from penumbra.query import parse

OUT = Path(__file__).resolve().parent / "out"
METHODS = ("any_state", "sorted", "selectivity", "point")
BLOCK = 1000


def run(method: str, events, budget: float):
    operator = build_operator(parse(CLUSTER_QUERY.format(method=method)), cluster_streams())
    matches = []
    start = time.perf_counter()
    fed = 0
    while fed < len(events) and time.perf_counter() - start < budget:
        matches += operator.feed(events[fed: fed + BLOCK]).matches
        fed = min(fed + BLOCK, len(events))
    complete = fed == len(events)
    if complete:
        matches += operator.flush().matches
    seconds = time.perf_counter() - start
    return fed / seconds, complete, {tuple(m.events.values()): (m.prob, m.range) for m in matches}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="two minutes of trace")
    args = parser.parse_args()
    OUT.mkdir(exist_ok=True)
    seconds, budget = (120, 1.0) if args.quick else (1200, 60.0)
    suffix = "_quick" if args.quick else ""
    events = cluster_events(seconds)
    lines: list[str] = []

    def log(text: str) -> None:
        print(text, flush=True)
        lines.append(text)

    log(f"trace: {len(events)} events, {seconds} s at {CLUSTER_RATE} events/s")
    rates, tables = {}, {}
    for method in METHODS:
        rate, complete, table = run(method, events, budget)
        rates[method] = rate
        if complete:
            tables[method] = table
        note = "" if complete else f" (stopped after {budget:.0f} s)"
        log(f"{method:>12}: {rate:10.0f} events/s = {rate / CLUSTER_RATE:6.1f}x the arrival rate, "
              f"{rate / rates['any_state']:5.2f}x any_state, {len(table)} matches{note}")
    reference = tables["sorted"]
    for method, table in tables.items():
        same = table.keys() == reference.keys() and all(
            abs(table[k][0] - reference[k][0]) < 1e-9 and table[k][1] == reference[k][1] for k in table)
        log(f"{method:>12}: matches {'equal' if same else 'DIFFER from'} sorted's")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    figure, axes = plt.subplots(figsize=(5, 3.6))
    axes.bar(list(rates), list(rates.values()))
    axes.axhline(CLUSTER_RATE, color="red", linestyle="--", label="arrival rate (778/s)")
    axes.axhline(20 * CLUSTER_RATE, color="orange", linestyle=":", label="20x arrival rate")
    axes.set_yscale("log")
    axes.set_ylabel("throughput (events/s)")
    axes.set_title("Fig. 4(f) cluster monitoring, Query 1", fontsize=9)
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(OUT / f"patterns_fig4f_cluster{suffix}.png", dpi=120)
    (OUT / f"patterns_cluster{suffix}.txt").write_text("\n".join(lines) + "\n")
    print(f"figure in {OUT / f'patterns_fig4f_cluster{suffix}.png'}")


if __name__ == "__main__":
    main()
