"""How the demo's scenarios' alarms compare with the truth: precision and recall at each
query's threshold, and the expected calibration error of the reported probabilities.

Each scenario is simulated (the sensors' reports drawn from the true times by the papers'
models), run through the local engine, and checked against what really happened
(penumbra.cli.scenarios.check). Writes bench/out/scenarios{,_quick}.md.

    python bench/scenarios.py [--quick] [--seeds 3]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from penumbra.cli import scenarios
from penumbra.engine import compile_query
from penumbra.events import parse_events, parse_streams

OUT = Path(__file__).resolve().parent / "out"
#: events per second and seconds simulated per scenario
SIZES = {"intrusion": (50, 1200), "cluster": (40, 1800), "shoplifting": (20, 3600)}


def run(name: str, rate: float, duration: float, seed: int) -> tuple[scenarios.Check, int, float]:
    sc = scenarios.scenario(name)
    sim = scenarios.generate(name, rate, duration, seed)
    streams = parse_streams(sc.streams)
    operator = compile_query(sc.queries[0].text, streams)
    events, _ = parse_events(sim.events, streams)
    started = time.perf_counter()
    matches = []
    for start in range(0, len(events), 1000):
        matches += [m.to_json() for m in operator.feed(events[start:start + 1000]).matches]
    matches += [m.to_json() for m in operator.flush().matches]
    seconds = time.perf_counter() - started
    return scenarios.check(name, sim.truth[name], matches, sc.queries[0].threshold), len(events), seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a tenth of the sizes, one seed")
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    seeds = 1 if args.quick else args.seeds
    rows = ["| scenario | events | alarms | true alarms | truth | precision | recall | ECE | engine ev/s |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, (rate, duration) in SIZES.items():
        if args.quick:
            duration /= 10
        results = [run(name, rate, duration, seed) for seed in range(1, seeds + 1)]
        for seed, (check, events, seconds) in enumerate(results, 1):
            line = (f"| {name} (seed {seed}) | {events:,} | {check.alarms:,} | {check.true_alarms:,} | "
                    f"{check.truth:,} | {check.precision:.3f} | {check.recall:.3f} | {check.ece:.4f} | "
                    f"{events / seconds:,.0f} |")
            rows.append(line)
            print(line, flush=True)
        ece = np.mean([c.ece for c, _, _ in results])
        print(f"{name}: mean ECE {ece:.4f} over {seeds} seed(s)")
    OUT.mkdir(exist_ok=True)
    report = OUT / ("scenarios_quick.md" if args.quick else "scenarios.md")
    report.write_text("# Demo scenarios against their truth (local engine)\n\n"
                      f"`python bench/scenarios.py{' --quick' if args.quick else ''}`; sizes (events/s, seconds): "
                      f"{SIZES}{' / 10' if args.quick else ''}.\n\n" + "\n".join(rows) + "\n")
    print(f"report: {report}")


if __name__ == "__main__":
    main()
