"""Figures 4(a)-(e) and 5(a)-(c) of the imprecise-timestamps paper on its synthetic streams.

Throughput (events/s, one core) of the pattern methods as the half uncertainty interval
delta, the window W, the pattern length l and the share of events matching E_1 vary;
defaults delta = 5, W = 100, l = 3. Every configuration feeds blocks of 1000 events
until the stream ends or its time budget is spent, so slow methods report the rate they
reached. Ratios are against the point-based framework measured in the same run.

    python bench/patterns_synthetic.py            # real sizes, PNGs in bench/out/
    python bench/patterns_synthetic.py --only fig4a,fig4b   # some figures only
    python bench/patterns_synthetic.py --quick    # a few seconds, outputs named *_quick
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from patterns_workloads import synthetic_events, synthetic_query, synthetic_streams
from penumbra.patterns import build_operator
from penumbra.query import parse

OUT = Path(__file__).resolve().parent / "out"
BLOCK = 1000


def throughput(text: str, events, streams, budget: float) -> tuple[float, int]:
    """Events per second over as much of ``events`` as ``budget`` seconds allow, and matches.

    Blocks start at 10 events and double up to 1000 while they stay fast, so a slow
    method stops close to its budget."""
    operator = build_operator(parse(text), streams)
    matches = 0
    block = 10
    start = time.perf_counter()
    fed = 0
    while fed < len(events):
        began = time.perf_counter()
        matches += len(operator.feed(events[fed: fed + block]).matches)
        fed = min(fed + block, len(events))
        now = time.perf_counter()
        if now - start > budget:
            break
        if now - began < budget / 50:
            block = min(2 * block, BLOCK)
    if fed == len(events):
        matches += len(operator.flush().matches)
    return fed / (time.perf_counter() - start), matches


def sweep(name: str, xlabel: str, xs, methods, configure, size: int, budget: float, log):
    """One figure: for every x and method, ``configure(x, method) -> (query, delta)``."""
    rows = {m: [] for m in methods}
    log(f"\n{name}  ({xlabel}; events/s)")
    log(f"{xlabel:>10} " + " ".join(f"{m:>12}" for m in methods))
    for x in xs:
        cells = []
        for method in methods:
            text, delta = configure(x, method)
            events = synthetic_events(size, delta)
            rate, _ = throughput(text, events, synthetic_streams(delta), budget)
            rows[method].append(rate)
            cells.append(f"{rate:12.0f}")
        log(f"{str(x):>10} " + " ".join(cells))
    return rows


def plot(path: Path, title: str, xlabel: str, xs, rows) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    figure, axes = plt.subplots(figsize=(5, 3.6))
    for method, values in rows.items():
        axes.plot(xs, values, marker="o", label=method)
    axes.set_yscale("log")
    axes.set_xlabel(xlabel)
    axes.set_ylabel("throughput (events/s)")
    axes.set_title(title, fontsize=9)
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    parser.add_argument("--only", default="", help="comma-separated figures to run, e.g. fig4a,fig4b")
    args = parser.parse_args()
    OUT.mkdir(exist_ok=True)
    quick = args.quick
    suffix = "_quick" if quick else ""
    size, budget = (1500, 0.1) if quick else (100_000, 6.0)
    lines: list[str] = []

    def log(text: str) -> None:
        print(text, flush=True)
        lines.append(text)

    next_ = "skip_till_next_match"
    deltas = [1, 5] if quick else [1, 5, 10, 20, 30, 40, 50]
    windows = [10, 50] if quick else [10, 50, 100, 150, 200]
    lengths = [2, 3] if quick else [2, 3, 4, 5, 6]
    shares = [(100, 10), (40, 25)] if quick else \
        [(100, 10), (50, 20), (40, 25), (25, 40), (20, 50), (10, 100)]
    figures = [
        ("fig4a", "Fig. 4(a) point vs event based, varying delta (skip-till-any)", "delta", deltas,
         ["point", "any_state"], lambda d, m: (synthetic_query(m), d)),
        ("fig4b", "Fig. 4(b) event-based optimizations, varying delta (skip-till-any)", "delta", deltas,
         ["any_state", "sorted", "selectivity"], lambda d, m: (synthetic_query(m), d)),
        ("fig4c", "Fig. 4(c) event-based optimizations, varying l (skip-till-any)", "l", lengths,
         ["any_state", "sorted", "selectivity"], lambda n, m: (synthetic_query(m, length=n), 5)),
        ("fig4d", "Fig. 4(d) varying share of events matching E1 (v1, v3), skip-till-any", "v1,v3", shares,
         ["any_state", "sorted", "selectivity"],
         lambda v, m: (synthetic_query(m, selectivities=(v[0], 50, v[1])), 5)),
        ("fig4e", "Fig. 4(e) skip-till-next, varying delta", "delta", deltas,
         ["point", "any_state", "sorted", "selectivity"],
         lambda d, m: (synthetic_query(m, strategy=next_), d)),
        ("fig5a", "Fig. 5(a) point vs event based, varying W (skip-till-any)", "W", windows,
         ["point", "any_state"], lambda w, m: (synthetic_query(m, window=w), 5)),
        ("fig5b", "Fig. 5(b) point vs event based, varying l (skip-till-any)", "l", lengths,
         ["point", "any_state"], lambda n, m: (synthetic_query(m, length=n), 5)),
        ("fig5c", "Fig. 5(c) skip-till-next, varying l", "l", lengths,
         ["point", "any_state", "sorted", "selectivity"],
         lambda n, m: (synthetic_query(m, length=n, strategy=next_), 5)),
    ]
    if args.only:
        figures = [f for f in figures if f[0] in args.only.split(",")]
    results = {}
    for key, title, xlabel, xs, methods, configure in figures:
        rows = sweep(title, xlabel, xs, methods, configure, size, budget, log)
        results[key] = (xs, rows)
        labels = [f"{a},{b}" for a, b in xs] if key == "fig4d" else xs
        plot(OUT / f"patterns_{key}{suffix}.png", title, xlabel, labels, rows)
    log("\nratios")
    if "fig4a" in results:
        xs, rows = results["fig4a"]
        for x, point, event in zip(xs, rows["point"], rows["any_state"]):
            log(f"  delta={x}: event-based (any_state) / point-based = {event / point:.1f}x")
    if "fig4b" in results:
        xs, rows = results["fig4b"]
        log(f"  sorted at the defaults (delta=5, W=100, l=3): {rows['sorted'][xs.index(5)]:.0f} "
            f"events/s (target 100000)")
    (OUT / f"patterns_synthetic{suffix}.txt").write_text("\n".join(lines) + "\n")
    print(f"\nfigures in {OUT}/patterns_fig*{suffix}.png")


if __name__ == "__main__":
    main()
