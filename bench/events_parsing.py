"""Event parsing and validation throughput: JSON lines in, events out, one core.

The dense pattern workload's events as JSON lines (see patterns_workloads.py). Each
figure is CPU time, the best of 3, in a fresh process:

* ``load_events`` on the file, as ``penumbra eval`` reads it (text lines);
* ``read_events`` on blocks of 1,000 text lines, and ``parse_events`` on blocks of 1,000
  UTF-8 lines (what the Spark pipeline and the service read), results dropped after each
  block as a stream drops them;
* the same blocks decoded with the json module alone (orjson not installed);
* ``parse_events`` on blocks of decoded objects: validation and event construction alone.

Against the code before this work (commit ``baseline.BEFORE``: a JSON decoder built per
line, ``isinstance`` checks against the ``Mapping`` ABC, every interval validated again),
measured in the same run.

    python bench/events_parsing.py [--quick]

prints the figures and writes bench/out/events_parsing.png and events_parsing.md.
"""

from __future__ import annotations

import argparse
import atexit
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
import baseline  # noqa: E402
from report import Report  # noqa: E402

TARGET = 200_000
BLOCK = 1000


def parse(kind: str, path: str, repeats: int) -> dict:
    """The ``--measure`` mode, run against either tree: CPU seconds of the best of ``repeats``."""
    from penumbra import events as codec

    with open(path, "rb") as handle:
        raw = handle.read().splitlines()
    text = [line.decode("utf-8") for line in raw]
    if kind == "load":
        def work():
            codec.load_events(path)
    elif kind == "lines":
        def work():
            for first in range(0, len(text), BLOCK):
                codec.read_events(text[first: first + BLOCK])
    else:
        blocks = [raw[first: first + BLOCK] for first in range(0, len(raw), BLOCK)]
        if kind == "objects":
            blocks = [[json.loads(line) for line in block] for block in blocks]

        def work():
            for block in blocks:
                codec.parse_events(block)
    best = float("inf")
    for _ in range(repeats):
        started = time.process_time()
        work()
        best = min(best, time.process_time() - started)
    return {"seconds": best, "events": len(raw)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke test")
    parser.add_argument("--measure", nargs=3, metavar=("KIND", "EVENTS", "REPEATS"), help=argparse.SUPPRESS)
    parser.add_argument("--without-orjson", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        if args.without_orjson:
            sys.modules["orjson"] = None  # as if it were not installed: the import fails
        kind, path, repeats = args.measure
        print(json.dumps(parse(kind, path, int(repeats))))
        return
    import patterns_workloads
    from penumbra.events import event_to_json

    count, repeats = (5_000, 1) if args.quick else (200_000, 3)
    report = Report("events_parsing_quick" if args.quick else "events_parsing", "Event parsing and validation (one core)")
    say = report.say
    folder = Path(tempfile.mkdtemp(prefix="penumbra-parse-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    path = folder / "events.jsonl"
    with open(path, "w", encoding="utf-8") as handle:
        handle.writelines(json.dumps(event_to_json(e)) + "\n" for e in patterns_workloads.dense_events(count))
    say(f"{count:,} events of the dense pattern workload, {path.stat().st_size / count:.0f} bytes a line; "
        f"'before' is commit {baseline.BEFORE}")
    before = baseline.tree()
    script = Path(__file__).resolve()

    def rate(kind: str, source: Path = baseline.ROOT, *flags: str) -> float:
        measured = baseline.measure(script, [kind, str(path), str(repeats), *flags], source)
        return measured["events"] / measured["seconds"]

    old_load, old_lines = rate("load", before), rate("lines", before)
    rows = [
        ("before: load_events", old_load, old_load),
        ("before: read_events, blocks", old_lines, old_lines),
        ("load_events", rate("load"), old_load),
        ("read_events, blocks of text", rate("lines"), old_lines),
        ("parse_events, blocks of bytes", rate("bytes"), old_lines),
        ("read_events, json module only", rate("lines", baseline.ROOT, "--without-orjson"), old_lines),
        ("parse_events, bytes, json only", rate("bytes", baseline.ROOT, "--without-orjson"), old_lines),
        ("parse_events, decoded objects", rate("objects"), old_lines),
    ]
    say(f"{'':32s} {'events/s':>10s} {'us/event':>9s} {'x before':>9s}")
    for name, value, reference in rows:
        say(f"{name:32s} {value:10,.0f} {1e6 / value:9.2f} {value / reference:9.1f}")
    say(f"target {TARGET:,} events/s: parse_events on bytes reaches {rows[4][1] / TARGET:.0%} of it, "
        f"load_events {rows[2][1] / TARGET:.0%}")

    figure, axes = plt.subplots(figsize=(7, 4))
    names = [name for name, _, _ in rows]
    axes.barh(names[::-1], [value for _, value, _ in rows][::-1],
              color=["#4477aa"] * (len(rows) - 2) + ["#aa7744"] * 2)
    axes.axvline(TARGET, color="red", linestyle="--", label=f"target {TARGET:,}/s")
    axes.set_xlabel("events per second (one core)")
    axes.set_title(f"{count:,} JSON lines, blocks of {BLOCK:,}", fontsize=9)
    axes.tick_params(axis="y", labelsize=8)
    axes.legend(fontsize=8)
    report.save(figure)


if __name__ == "__main__":
    main()
