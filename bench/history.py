"""The archive's reads at scale: 10 million matches of one query over a week.

Builds an archive as the job leaves it after a week (one compacted file per day, today's
as batch files, the layout of contract/archive.py), then times through
``contract.history.History`` (DuckDB over the files): a history page (the first, and one
deep in the week by its cursor), a summary over the week per hour and per key, a
backtest at 20 thresholds over the week, and exports as CSV and Parquet (rows/s). The
baseline, measured in the same run, is what reading without an engine costs: the
week's files loaded whole with pyarrow and filtered in memory for the same page.
Prints the figures and the archive's bytes per match, and saves them with a plot.

    .venv/bin/python bench/history.py [--matches 10000000] [--keys 10000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from contract.archive import ROW_GROUP, SCHEMA, files, query_dir  # noqa: E402
from contract.history import Filters, History, Period  # noqa: E402

DAY = 86_400_000
QUERY = "bench"


def build(root: Path, matches: int, keys: int, seed: int = 1) -> tuple[int, int]:
    """A week of matches: six past days compacted, the seventh as batch files. Returns
    the week's first and last time (ms)."""
    rng = np.random.default_rng(seed)
    start = (int(time.time() * 1000) // DAY - 6) * DAY
    per_day = matches // 7
    batch_ms = 500                                  # a micro-batch every half second
    for day in range(7):
        n = per_day if day < 6 else matches - 6 * per_day
        batches = DAY // batch_ms
        batch = np.sort(rng.integers(0, batches, n))
        at = start + day * DAY + batch * batch_ms
        seq = np.zeros(n, dtype=np.int64)
        edges = np.flatnonzero(np.diff(batch)) + 1
        seq[:] = np.arange(n) - np.repeat(np.concatenate([[0], edges]), np.diff(np.concatenate([[0], edges, [n]])))
        key = rng.integers(0, keys, n)
        prob = np.round(rng.uniform(0.6, 1.0, n), 6)
        ids = pc.binary_join_element_wise(pc.cast(pa.array(at), pa.string()), pc.cast(pa.array(seq), pa.string()), "-")
        events = pc.binary_join_element_wise('{"A":"d' + str(day), pc.cast(pa.array(np.arange(n)), pa.string()),
                                             '","B":"b', pc.cast(pa.array(batch), pa.string()), '"}', "")
        spelled = pc.binary_join_element_wise('{"region":', pc.cast(pa.array(key), pa.string()), "}", "")
        alarm = pc.binary_join_element_wise(f"{QUERY}:", pc.cast(pa.array(key), pa.string()), "")
        table = pa.table({"id": ids, "at": at, "seq": seq, "batch": batch + day * batches, "job": ["j"] * n,
                          "kind": ["match"] * n, "events": events, "prob": prob, "count": np.ones(n, np.int64),
                          "range_lo": pa.nulls(n, pa.float64()), "range_hi": pa.nulls(n, pa.float64()),
                          "partition": pa.nulls(n, pa.string()),
                          "times": pc.binary_join_element_wise('{"A":[', pc.cast(pa.array(at - 500), pa.string()), ",",
                                                               pc.cast(pa.array(at - 100), pa.string()), "]}", ""),
                          "key": spelled, "alarm": alarm, "group": (key % 8).astype(np.int32),
                          # the matched events, as a join's match carries them (for its explanation)
                          "records": pc.binary_join_element_wise(
                              '{"A":{"stream":"seismic","id":"d' + str(day), pc.cast(pa.array(np.arange(n)), pa.string()),
                              '","ts":{"detected":', pc.cast(pa.array(at - 100), pa.string()),
                              ',"template":"s1"},"attrs":{"region":', pc.cast(pa.array(key), pa.string()),
                              '}},"B":{"stream":"acoustic","id":"b', pc.cast(pa.array(batch), pa.string()),
                              '","ts":{"detected":', pc.cast(pa.array(at - 300), pa.string()),
                              ',"template":"m1"},"attrs":{"region":', pc.cast(pa.array(key), pa.string()), "}}}", ""),
                          "factors": pa.nulls(n, pa.string())}, schema=SCHEMA)
        folder = query_dir(root, QUERY) / f"date={time.strftime('%Y-%m-%d', time.gmtime((start + day * DAY) / 1000))}"
        folder.mkdir(parents=True, exist_ok=True)
        first, last = int(batch[0] + day * batches), int(batch[-1] + day * batches)
        if day < 6:
            pq.write_table(table, folder / f"c-j-{first:012d}-{last:012d}.parquet", compression="zstd",
                           row_group_size=ROW_GROUP)
        else:
            # today: the latest 200 batches still as the sink writes them, one file each
            cut = int(np.searchsorted(batch, batch[-1] - 200))
            pq.write_table(table.slice(0, cut), folder / f"c-j-{first:012d}-{int(batch[cut - 1]) + day * batches:012d}"
                                                       f".parquet", compression="zstd", row_group_size=ROW_GROUP)
            rest = table.slice(cut)
            for b in np.unique(batch[cut:]):
                part = rest.filter(pc.equal(rest.column("batch"), int(b) + day * batches))
                pq.write_table(part, folder / f"b-j-{int(b) + day * batches:012d}.parquet", compression="zstd",
                               row_group_size=ROW_GROUP)
    return start, start + 7 * DAY


def timed(work, repeat: int = 5) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        began = time.perf_counter()
        out = work()
        times.append(time.perf_counter() - began)
    return statistics.median(times), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--matches", type=int, default=10_000_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--quick", action="store_true", help="200,000 matches (a smoke run)")
    args = parser.parse_args()
    if args.quick:
        args.matches = 200_000
    from bench.report import Report

    report = Report("history_quick" if args.quick else "history", "The archive's reads at scale")
    with tempfile.TemporaryDirectory(prefix="penumbra-history-") as scratch:
        root = Path(scratch)
        began = time.perf_counter()
        since, until = build(root, args.matches, args.keys)
        paths = files(root, QUERY)
        size = sum(p.stat().st_size for p in paths)
        report.say(f"`python bench/history.py --matches {args.matches} --keys {args.keys}`: {args.matches:,} matches "
                   f"of one query over 7 days, {args.keys:,} keys, {len(paths)} files (6 compacted days, today "
                   f"compacted up to its last 200 batch files); built in {time.perf_counter() - began:.0f} s")
        report.say(f"archive: {size / 1e6:,.1f} MB, {size / args.matches:.1f} bytes per match (zstd Parquet)")
        history = History(root)
        week = Filters(Period(since, until))
        figures: dict[str, float] = {}
        figures["page (first, 500)"], (items, _) = timed(lambda: history.page(QUERY, week, 500))
        middle = f"{since + 3 * DAY + DAY // 2}-0"
        figures["page (mid-week cursor, 500)"], (deep, _) = timed(lambda: history.page(QUERY, week, 500, middle))
        keyed = Filters(Period(since, until), key={"region": 17})
        figures["page (one key, 500)"], _ = timed(lambda: history.page(QUERY, keyed, 500))
        figures["summary (week, per hour and key)"], summary = timed(
            lambda: history.summary(QUERY, week, 3_600_000), repeat=3)
        thresholds = list(np.linspace(0.6, 1.0, 20))
        figures["backtest (week, 20 thresholds)"], backtest = timed(
            lambda: history.backtest(QUERY, week, thresholds, None), repeat=3)
        figures["backtest (week, 20 thresholds, auto-resolve)"], _ = timed(
            lambda: history.backtest(QUERY, week, thresholds, 10 * 60_000), repeat=3)
        assert summary["total"] == args.matches and backtest["matches"][0] == args.matches
        assert len(items) == 500 and deep[0]["at"] * 1000 >= since + 3 * DAY + DAY // 2

        def baseline():
            table = pa.concat_tables([pq.read_table(p) for p in paths])
            mask = pc.greater_equal(table.column("at"), since + 3 * DAY + DAY // 2)
            return table.filter(mask).sort_by([("at", "ascending"), ("seq", "ascending")]).slice(0, 500)

        figures["baseline: page by loading the week (pyarrow)"], _ = timed(baseline, repeat=1)
        for name, seconds in figures.items():
            report.say(f"{name:<48} {seconds * 1000:>9.1f} ms")
        ratio = figures["baseline: page by loading the week (pyarrow)"] / figures["page (mid-week cursor, 500)"]
        report.say(f"a deep page is {ratio:,.0f}x faster than loading the week")
        rates = {}
        for fmt in ("csv", "parquet"):
            began = time.perf_counter()
            written = sum(len(chunk) for chunk in history.export(QUERY, week, fmt))
            seconds = time.perf_counter() - began
            rates[fmt] = args.matches / seconds
            report.say(f"export {fmt:<8} {args.matches:,} rows in {seconds:.1f} s: {rates[fmt]:,.0f} rows/s, "
                       f"{written / 1e6:,.0f} MB")
        targets = [("page", figures["page (mid-week cursor, 500)"] <= 0.2, "<= 200 ms"),
                   ("summary", figures["summary (week, per hour and key)"] <= 1.0, "<= 1 s"),
                   ("backtest", figures["backtest (week, 20 thresholds)"] <= 2.0, "<= 2 s"),
                   ("export", min(rates.values()) >= 200_000, ">= 200,000 rows/s")]
        report.say("targets: " + ", ".join(f"{n} {t} {'met' if ok else 'NOT met'}" for n, ok, t in targets))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(8, 3.5))
    names = [n for n in figures if not n.startswith("baseline")]
    axis.barh(names, [figures[n] * 1000 for n in names])
    axis.set_xscale("log")
    axis.set_xlabel("ms (median)")
    axis.set_title(f"{args.matches:,} archived matches over a week")
    report.save(figure)


if __name__ == "__main__":
    main()
