"""Lossy-CEP throughput on a shoplifting workload (AYAC section 2.2) with 10,000 tags.

    SEQUENCE(Shelf x, !Counter y, Exit z) WHERE x.tag = z.tag AND y.tag = x.tag
    WITHIN 600 THRESHOLD 0.5

Each tag goes through repeated visits (1-3 shelf reads, the counter for 95% of them, the
exit); every reader misses a read with probability epsilon. The operator runs on one
core in blocks of 10,000 events. The baseline, measured in the same run, is the floor of
any per-event Python work: read each event's stream, time and tag and append it to a
per-tag list. Two more rows take the same reads at epsilon 0.1 with 30% and with all of
them known only to 4 instants (imprecise timestamps, evaluated over their possible
worlds). Times are CPU times, best of 3 runs (as timeit does: the machine is
shared). The input is built before timing and frozen out of the garbage collector (as a
live source's events would not all be resident); the unfrozen figure is printed too.

    python bench/lossy_throughput.py [--quick]

prints the figures and writes bench/out/lossy_throughput.png and lossy_throughput.md.
"""

from __future__ import annotations

import argparse
import gc
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
import lossy_workload  # noqa: E402
from report import Report  # noqa: E402

TARGET = 200_000
WINDOW = 600
BLOCK = 10_000


def rate(events, seconds: float) -> float:
    return len(events) / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke test")
    args = parser.parse_args()
    report = Report("lossy_throughput", "Lossy CEP throughput (shoplifting, one core)")
    say = report.say
    tags, visits, repeats = (1_000, 3_000, 1) if args.quick else (10_000, 70_000, 3)
    events = lossy_workload.shop(tags, visits)
    say(f"workload: {len(events):,} events, {tags:,} tags, W = {WINDOW}, blocks of {BLOCK:,}")

    def best(miss: float) -> tuple[float, int]:
        runs = [lossy_workload.run(events, WINDOW, miss, BLOCK) for _ in range(repeats)]
        return min(sum(seconds) for seconds, _, _ in runs), runs[0][2]

    unfrozen, _ = best(0.1)
    gc.freeze()
    baseline = min(lossy_workload.scan(events, BLOCK) for _ in range(repeats))
    rows = [("baseline scan", baseline, None)]
    for miss in (0.0, 0.1, 0.3):
        seconds, matches = best(miss)
        rows.append((f"operator eps={miss:g}", seconds, matches))
    # imprecise reads: the matches they touch are summed over their possible worlds
    for share, width in ((0.3, 3), (1.0, 3)):
        spread = lossy_workload.imprecise(events, share, width)
        runs = [lossy_workload.run(spread, WINDOW, 0.1, BLOCK) for _ in range(repeats)]
        rows.append((f"eps=0.1, {share:.0%} over {width + 1}", min(sum(s) for s, _, _ in runs), runs[0][2]))
    say(f"{'':22s} {'tuples/s':>12s} {'us/tuple':>9s} {'x baseline':>10s} {'matches':>8s}")
    for name, seconds, matches in rows:
        say(f"{name:22s} {rate(events, seconds):12,.0f} {1e6 * seconds / len(events):9.2f} "
            f"{seconds / baseline:10.1f} {'' if matches is None else f'{matches:8,d}'}")
    say(f"{'operator eps=0.1, gc on':22s} {rate(events, unfrozen):12,.0f} "
        f"{1e6 * unfrozen / len(events):9.2f} {unfrozen / baseline:10.1f}")
    say(f"target {TARGET:,} tuples/s: eps=0.1 reaches {rate(events, rows[2][1]) / TARGET:.0%} of it")

    figure, axes = plt.subplots(figsize=(7, 4))
    names = [name for name, _, _ in rows[1:]] + ["eps=0.1, gc on"]
    values = [rate(events, seconds) for _, seconds, _ in rows[1:]] + [rate(events, unfrozen)]
    axes.bar(names, values, color=["#4477aa"] * 3 + ["#77aa44"] * 2 + ["#aa7744"])
    axes.tick_params(axis="x", labelsize=7)
    axes.axhline(TARGET, color="red", linestyle="--", label=f"target {TARGET:,}/s")
    axes.set_ylabel("tuples per second (one core)")
    axes.set_title(f"Shoplifting, {tags:,} tags, {len(events):,} events; baseline scan "
                   f"{rate(events, baseline):,.0f}/s", fontsize=9)
    axes.legend()
    report.save(figure)


if __name__ == "__main__":
    main()
