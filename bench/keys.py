"""A keyed join over many key values against the same join over few: what a key costs.

The same events (two streams with template timestamps, 60,000 a side, one event a
millisecond) are joined on ``A.k = B.k`` (window 300, threshold 0.6) with their ``k``
drawn from 50 and from 10,000 values, each by ``penumbra eval --stats`` in a process of
its own: whole-process event rates, and the 10,000-key run's rate as a share of the
50-key run's (the baseline, measured in the same run). Target: at least 0.7.

The same for a pattern partitioned on ``k`` and a lossy sequence hashed on it (60,000
interval events over three streams, blocks of 1,000, the operator's own time in this
process, run as the job runs it: the collector paused): their 10,000-key rate as a share of
their 50-key rate.

    .venv/bin/python bench/keys.py            # 60,000 events a side, 50 and 10,000 key values
    .venv/bin/python bench/keys.py --quick    # 5,000 a side
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.report import Report  # noqa: E402

STREAMS = {"a": {"templates": {"t1": {"edges": [0, 60, 100], "probs": [0.3, 0.7]},
                               "t2": {"edges": [0, 40, 80, 150], "probs": [0.2, 0.5, 0.3]}}, "max_delay": 500},
           "b": {"templates": {"u1": {"edges": [0, 90, 120], "probs": [0.6, 0.4]}}, "max_delay": 500}}
QUERY = "SELECT * FROM a A, b B WHERE WINDOW(A, B) = 300 AND A.k = B.k WITH THRESHOLD 0.6"


def events(per_side: int, keys: int, seed: int = 7) -> list[str]:
    """Both streams interleaved, one event a millisecond, keys drawn uniformly."""
    rng = np.random.default_rng(seed)
    lines = []
    drawn = rng.integers(0, keys, 2 * per_side)
    for i in range(2 * per_side):
        stream = "ab"[i % 2]
        template = ("t1", "t2")[i % 4 // 2] if stream == "a" else "u1"
        lines.append(json.dumps({"stream": stream, "id": f"{stream}{i}", "ts": {"detected": float(i), "template": template},
                                 "attrs": {"k": int(drawn[i])}}))
    return lines


def run(folder: Path, per_side: int, keys: int) -> dict:
    path = folder / f"events-{keys}.jsonl"
    path.write_text("\n".join(events(per_side, keys)) + "\n")
    streams = folder / "streams.json"
    streams.write_text(json.dumps(STREAMS))
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "penumbra", "eval", "--query", QUERY, "--streams", str(streams),
                           "--events", str(path), "--stats"], capture_output=True, text=True, check=True)
    seconds = time.perf_counter() - began
    stats = json.loads(done.stdout)
    return {"keys": keys, "seconds": seconds, "rate": 2 * per_side / seconds, "matches": stats.get("matches"),
            "work": stats["seconds"], "work_rate": 2 * per_side / stats["seconds"]}


def other_kinds(n: int) -> list[dict]:
    """The pattern and the lossy sequence over 50 and 10,000 key values, in this process,
    run as the job and ``penumbra eval`` run an operator: the events read beforehand are
    out of the garbage collector's sight (``gc.freeze``), and the collector is paused while
    the operator works (``collector_paused``: the job's stateful step runs each batch so)."""
    import gc

    from penumbra.engine import compile_query
    from penumbra.events import collector_paused, parse_event_lines, parse_streams

    texts = {"pattern": "PATTERN SEQ(A a, B b, C c) WHERE a.k = b.k AND b.k = c.k AND skip_till_any_match(a, b, c) "
                        "WITHIN 300",
             "sequence": "SEQUENCE(A x, B y, C z) WHERE x.k = y.k AND y.k = z.k WITHIN 300 THRESHOLD 0.3"}
    rows = []
    for kind, text in texts.items():
        rates = {}
        for keys in (50, 10_000):
            rng = np.random.default_rng(3)
            lines = [json.dumps({"stream": "abc"[i % 3], "id": f"e{i}", "ts": {"lo": i, "hi": i + int(rng.integers(0, 4))},
                                 "attrs": {"k": int(rng.integers(0, keys))}}).encode() for i in range(n)]
            streams = parse_streams({})
            events = parse_event_lines(lines, streams)
            operator = compile_query(text, streams)
            gc.freeze()
            began = time.perf_counter()
            with collector_paused():
                found = sum(len(operator.feed(events[i:i + 1000]).matches) for i in range(0, n, 1000))
                found += len(operator.flush().matches)
            rates[keys] = (n / (time.perf_counter() - began), found)
            del events, operator
            gc.unfreeze()
        rows.append({"kind": kind, "rate_50": rates[50][0], "rate_10000": rates[10_000][0],
                     "matches_50": rates[50][1], "matches_10000": rates[10_000][1]})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-side", type=int, default=60_000)
    parser.add_argument("--quick", action="store_true", help="5,000 events a side")
    args = parser.parse_args()
    per_side = 5_000 if args.quick else args.per_side
    report = Report("keys_quick" if args.quick else "keys", "What a key costs: a keyed join over 10,000 key values "
                                                            "against 50")
    report.say(f"`python bench/keys.py{' --quick' if args.quick else ''}`: `penumbra eval --stats`, {QUERY!r}, "
               f"{per_side:,} events a side, whole process")
    with tempfile.TemporaryDirectory(prefix="penumbra-keys-") as folder:
        rows = [run(Path(folder), per_side, keys) for keys in (50, 10_000)]
    for row in rows:
        report.say(f"{row['keys']:>6,} key values: whole process {row['seconds']:.2f} s ({row['rate']:,.0f} events/s), "
                   f"the join's own work {row['work']:.2f} s ({row['work_rate']:,.0f} events/s), {row['matches']:,} matches")
    report.say(f"10,000 against 50 key values: {rows[1]['rate'] / rows[0]['rate']:.2f}x whole process, "
               f"{rows[1]['work_rate'] / rows[0]['work_rate']:.2f}x the join's own work (target >= 0.7)")
    for row in other_kinds(per_side):
        report.say(f"{row['kind']}: 50 key values {row['rate_50']:,.0f} events/s ({row['matches_50']:,} matches), "
                   f"10,000 {row['rate_10000']:,.0f} events/s ({row['matches_10000']:,} matches): "
                   f"{row['rate_10000'] / row['rate_50']:.2f}x")
    figure, axis = plt.subplots(figsize=(6, 3.5))
    labels = [f"{row['keys']:,} keys" for row in rows]
    axis.bar([0, 1], [row["rate"] for row in rows], width=0.35, label="whole process")
    axis.bar([0.38, 1.38], [row["work_rate"] for row in rows], width=0.35, label="the join's own work")
    axis.set_xticks([0.19, 1.19], labels)
    axis.set_ylabel("events/s")
    axis.legend()
    report.save(figure)


if __name__ == "__main__":
    main()
