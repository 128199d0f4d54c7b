"""The archive's layout, exactly once, compaction under a reader, retention; the history
reads over it (DuckDB) against lists kept by the test."""

from __future__ import annotations

import csv
import io
import json
import random
import threading

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from contract.archive import ArchiveWriter, files, live, maintain, query_dir
from contract.history import Filters, History, Period

DAY = 86_400_000
T0 = 1_795_000_000_000 - 1_795_000_000_000 % DAY + 3_600_000   # 01:00 UTC of a day


def batch_rows(rng: random.Random, batch: int, n: int) -> list[tuple]:
    """n matches as the sink hands them over: (match JSON, group, key, prob)."""
    out = []
    for i in range(n):
        prob = round(rng.uniform(0.5, 1.0), 6)
        region = rng.randrange(4)
        out.append((json.dumps({"events": {"A": f"a{batch}.{i}", "B": f"b{batch}.{i}"}, "prob": prob}).encode(),
                    region % 2, {"region": region}, prob))
    return out


def write_stream(root, batches: int, per_day: int = 10, seed: int = 1, job: str = "j1"):
    """``batches`` batches, ``per_day`` a day, each at T0 + its place; returns every match
    written as (id, at, events, prob, key)."""
    rng = random.Random(seed)
    writer = ArchiveWriter(root, job)
    written = []
    for b in range(batches):
        at = T0 + (b // per_day) * DAY + (b % per_day) * 60_000
        rows = batch_rows(rng, b, rng.randrange(0, 6))
        writer.write(b, at, {"q": rows}, {"q": {"0.40": 3, "0.55": 2}} if b % 3 == 0 else {})
        written += [(f"{at}-{i}", at, json.loads(r[0])["events"], r[3], r[2]) for i, r in enumerate(rows)]
    return written


def read_all(root, query="q") -> list[dict]:
    rows = []
    for path in files(root, query):
        rows += pq.read_table(path).to_pylist()
    return rows


def all_pages(history: History, filters: Filters, limit: int) -> list[dict]:
    items, after = [], None
    while True:
        page, after = history.page("q", filters, limit, after)
        items += page
        if after is None:
            return items


def test_a_batch_is_one_file_per_query_and_day_written_again_the_same(tmp_path):
    written = write_stream(tmp_path, 25)
    rows = [r for r in read_all(tmp_path) if r["kind"] == "match"]
    assert sorted((r["id"], json.loads(r["events"])["A"], r["prob"]) for r in rows) == \
        sorted((i, e["A"], p) for i, _, e, p, _ in written)
    assert {r["key"] for r in rows} <= {json.dumps({"region": k}, separators=(",", ":")) for k in range(4)}
    near = [r for r in read_all(tmp_path) if r["kind"] == "near"]
    assert sum(r["count"] for r in near) == 5 * len(range(0, 25, 3))
    # a batch Spark runs again after a crash writes the same file: nothing twice
    before = sorted(p.name for p in files(tmp_path, "q"))
    write_stream(tmp_path, 25)
    assert sorted(p.name for p in files(tmp_path, "q")) == before
    assert len([r for r in read_all(tmp_path) if r["kind"] == "match"]) == len(written)
    assert len({p.parent.name for p in files(tmp_path, "q")}) == 3   # one folder per UTC day
    assert not list(tmp_path.rglob(".tmp-*"))


def test_compaction_keeps_every_row_once_for_a_reader_at_every_step(tmp_path):
    written = write_stream(tmp_path, 40)
    expected = sorted(i for i, *_ in written)
    committed = {"j1": 35}   # batches 36..39 not committed yet: never compacted
    stop = threading.Event()
    seen: list[list[str]] = []

    def reader():
        history = History(tmp_path)
        while not stop.is_set():
            seen.append([item["id"] for item in all_pages(history, Filters(), 37)])

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        now = (T0 + 5 * DAY) / 1000
        for step in range(4):
            maintain(tmp_path, committed, now=now + step * 120, min_files=2, grace=0)
    finally:
        stop.set()
        thread.join()
    assert seen and all(ids == expected for ids in seen)
    folders = sorted(p for p in query_dir(tmp_path, "q").iterdir())
    for folder in folders:
        counted, covered = live(folder)
        assert not covered, "covered files are deleted once their grace has passed"
        compacted = [f for f in counted if f.compacted]
        batches = [f for f in counted if not f.compacted]
        assert len(compacted) <= 1 and all(f.lo > 35 for f in batches)
    assert sorted(item["id"] for item in all_pages(History(tmp_path), Filters(), 1000)) == expected


def test_a_crash_mid_compaction_leaves_each_row_counted_once(tmp_path):
    written = write_stream(tmp_path, 10, per_day=10)
    folder = next(query_dir(tmp_path, "q").iterdir())
    counted, _ = live(folder)
    # as if a pass died after writing the compacted file, before deleting anything: both on disk
    tables = [pq.read_table(f.path) for f in counted]
    pq.write_table(pa.concat_tables(tables), folder / "c-j1-000000000000-000000000009.parquet")
    (folder / ".tmp-left-by-a-crash.parquet").write_bytes(b"partial")
    assert len([f for f in live(folder)[0]]) == 1
    assert sorted(i["id"] for i in all_pages(History(tmp_path), Filters(), 7)) == sorted(i for i, *_ in written)


def test_retention_expires_whole_days(tmp_path):
    write_stream(tmp_path, 30, per_day=10)
    now = (T0 + 3 * DAY) / 1000
    done = maintain(tmp_path, {"j1": 29}, now=now, retention_days=2)
    assert done["expired"] == 1
    history = History(tmp_path, retention_days=2)
    assert all(i["at"] * 1000 >= T0 + DAY - 3_600_000 for i in all_pages(history, Filters(), 100))
    gaps = history.unavailable("q", Filters(Period(T0 - DAY, T0 + 3 * DAY)), None, round(now * 1000))
    assert gaps[0]["reason"].startswith("past the archive's retention")


@pytest.mark.parametrize("limit", [1, 4, 100])
def test_pages_filters_summary_and_export_equal_the_written_rows(tmp_path, limit):
    written = write_stream(tmp_path, 30, per_day=10, seed=7)
    history = History(tmp_path)
    since, until = T0 + 3 * 60_000, T0 + DAY + 5 * 60_000
    filters = Filters(Period(since, until), key={"region": 2}, min_prob=0.7)
    expected = [w for w in written if since <= w[1] < until and w[4] == {"region": 2} and w[3] >= 0.7]
    items = all_pages(history, filters, limit)
    assert [i["id"] for i in items] == [w[0] for w in expected]
    assert [(i["events"], i["prob"], i["key"]) for i in items] == [(w[2], w[3], w[4]) for w in expected]
    summary = history.summary("q", Filters(Period(since, until)), 3_600_000)
    in_period = [w for w in written if since <= w[1] < until]
    assert summary["total"] == len(in_period)
    hours = {}
    for w in in_period:
        hours[w[1] - w[1] % 3_600_000] = hours.get(w[1] - w[1] % 3_600_000, 0) + 1
    assert {b["start"]: b["matches"] for b in summary["buckets"]} == hours
    assert sum(k["matches"] for k in summary["keys"]) == len(in_period)
    text = b"".join(history.export("q", filters, "csv", rows_per_chunk=3)).decode()
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [r["id"] for r in rows] == [w[0] for w in expected]
    assert [float(r["prob"]) for r in rows] == [w[3] for w in expected]
    table = pq.read_table(io.BytesIO(b"".join(history.export("q", filters, "parquet", rows_per_chunk=3))))
    assert table.column("id").to_pylist() == [w[0] for w in expected]


@pytest.mark.parametrize("quiet", [None, 3 * 60_000])
def test_backtest_counts_matches_near_misses_and_episodes_by_brute_force(tmp_path, quiet):
    written = write_stream(tmp_path, 30, per_day=30, seed=11)
    history = History(tmp_path)
    thresholds = [0.4, 0.5, 0.55, 0.6, 0.75, 0.9, 1.0]
    answer = history.backtest("q", Filters(), thresholds, quiet)
    for t, matches, alarms in zip(thresholds, answer["matches"], answer["alarms"]):
        near = (3 if t <= 0.4 else 0) + (2 if t <= 0.55 else 0)
        assert matches == sum(1 for w in written if w[3] >= t) + near * len(range(0, 30, 3))
        # an episode opens at a key's first match at or above t, and again after `quiet` without one
        opened, last = 0, {}
        for _, at, _, prob, key in sorted(written, key=lambda w: (w[1], w[0])):
            if prob < t:
                continue
            k = json.dumps(key, sort_keys=True)
            if k not in last or (quiet is not None and at - last[k] >= quiet):
                opened += 1
            last[k] = at
        assert alarms == opened, t


def test_penumbra_export_writes_the_rows_of_a_period(tmp_path, capsys):
    from penumbra.cli import main

    written = write_stream(tmp_path / "archive", 30, per_day=10, seed=3)
    out = tmp_path / "q.csv"
    until = T0 + DAY
    assert main(["export", "q", "--archive", str(tmp_path / "archive"), "--until", str(until), "--min-prob", "0.7",
                 "--output", str(out)]) == 0
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    assert [r["id"] for r in rows] == [w[0] for w in written if w[1] < until and w[3] >= 0.7]
    assert main(["export", "q", "--archive", str(tmp_path / "archive"), "--format", "parquet", "-o",
                 str(tmp_path / "q.parquet")]) == 0
    assert pq.read_table(tmp_path / "q.parquet").column("id").to_pylist() == [w[0] for w in written]
    assert main(["export", "q", "--archive", str(tmp_path / "archive"), "--since", "last tuesday"]) == 2
    assert "since must be an ISO 8601 time" in capsys.readouterr().err
    assert main(["export", "nope", "--archive", str(tmp_path / "archive")]) == 2


def test_a_key_filter_naming_all_or_some_of_the_keys_attributes(tmp_path):
    writer = ArchiveWriter(tmp_path, "j1")
    rows, written = [], []
    for n in range(40):
        key = {"region": n % 4, "zone": "n" if n % 3 else "s"}
        rows.append((json.dumps({"events": {"A": f"a{n}"}, "prob": 0.8}).encode(), 0, key, 0.8))
        written.append((f"{T0}-{n}", key))
    writer.write(1, T0, {"q": rows}, {})
    history = History(tmp_path)
    for wanted in ({"region": 1}, {"zone": "s"}, {"region": 2, "zone": "n"}, {"zone": "s", "region": 3.0},
                   {"region": 9}, {"other": 1}):
        found = [i["id"] for i in all_pages(history, Filters(key=wanted), 7)]
        assert found == [i for i, key in written if all(key.get(a) == v for a, v in wanted.items())], wanted


def test_a_matchs_times_and_probing_range_are_archived_and_read_back(tmp_path):
    rows = [(json.dumps({"events": {"A": "a1", "B": "b1"}, "prob": 0.7}).encode(), 1, {"region": 3}, 0.7,
             {"A": [10.0, 12.5], "B": [11.0, 14.0]}, "sr"),
            (json.dumps({"events": {"A": "a2", "B": "b2"}, "prob": 0.6}).encode(), 0, None, 0.6, None, None)]
    ArchiveWriter(tmp_path, "j1").write(4, T0, {"q": rows}, {})
    items = all_pages(History(tmp_path), Filters(), 10)
    assert [(i["times"], i["partition"]) for i in items] == [({"A": [10.0, 12.5], "B": [11.0, 14.0]}, "sr"),
                                                             (None, None)]
