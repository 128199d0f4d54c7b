"""`penumbra eval` end to end, in process: output against a brute-force join of the
shipped example, stats, and one-line errors with exit status 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from penumbra.cli import main
from penumbra.events import load_events, load_streams
from tests.oracle import p_geq_float

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "seismic"
QUERY = (EXAMPLE / "query.pq").read_text()


def run(capsys, *args):
    code = main(["eval", *args])
    out, err = capsys.readouterr()
    return code, out, err


def example_args(*extra):
    return ["--query", QUERY, "--streams", str(EXAMPLE / "streams.json"), "--events", str(EXAMPLE / "events.jsonl"), *extra]


def test_the_example_equals_a_brute_force_join(capsys):
    code, out, err = run(capsys, *example_args("--block-size", "7"))
    assert code == 0 and err == ""
    found = {(m["events"]["A"], m["events"]["B"]): m["prob"] for m in map(json.loads, out.splitlines())}
    streams = load_streams(EXAMPLE / "streams.json")
    events, _ = load_events(EXAMPLE / "events.jsonl", streams)
    expected = {}
    for a in (e for e in events if e.stream == "seismic"):
        for b in (e for e in events if e.stream == "acoustic"):
            ha, hb = a.histogram, b.histogram
            p = p_geq_float(ha.edges, ha.probs, hb.edges, hb.probs, 2000) - \
                p_geq_float(ha.edges, ha.probs, hb.edges, hb.probs, -2000)
            if a.attrs["region"] == b.attrs["region"] and p >= 0.6:
                expected[(a.id, b.id)] = p
    assert set(found) == set(expected) and len(found) > 20
    assert any(p < 1 for p in found.values())
    for pair, p in expected.items():
        assert found[pair] == pytest.approx(p, abs=1e-9)


def test_stats(capsys):
    code, out, _ = run(capsys, *example_args("--stats"))
    stats = json.loads(out)
    assert code == 0 and len(out.splitlines()) == 1
    assert stats["events"] == 100 and stats["matches"] > 20 and stats["seconds"] >= 0


@pytest.mark.parametrize("args,words", [
    (["--query", "SELECT nonsense"], "query: line 1, column 8"),
    (["--query", QUERY, "--streams", "/nonexistent.json"], "cannot read streams file"),
    (["--query", QUERY, "--engine", "flink"], "invalid choice"),
    (["--query", QUERY, "--block-size", "0"], "--block-size"),
    (["--query", QUERY, "--bogus"], "unrecognized arguments"),
])
def test_bad_options_exit_2_with_one_line(capsys, tmp_path, args, words):
    events = tmp_path / "e.jsonl"
    events.write_text("")
    code, out, err = run(capsys, *args, "--events", str(events))
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and words in err


def test_a_bad_events_file_names_line_and_field(capsys, tmp_path):
    events = tmp_path / "e.jsonl"
    events.write_text('{"stream": "seismic", "id": "x", "ts": {"lo": 1, "hi": 2}}\n'
                      '{"stream": "seismic", "id": "y", "ts": {"lo": 3, "hi": 2}}\n')
    code, out, err = run(capsys, "--query", QUERY, "--events", str(events))
    assert code == 2 and out == "" and "e.jsonl:2: ts.hi" in err and len(err.strip().splitlines()) == 1


def test_bad_streams_file(capsys, tmp_path):
    streams = tmp_path / "s.json"
    streams.write_text('{"seismic": {"max_delay": -3}}')
    code, _, err = run(capsys, "--query", QUERY, "--streams", str(streams), "--events", str(streams))
    assert code == 2 and "seismic.max_delay" in err


def test_python_dash_m(tmp_path):
    done = subprocess.run([sys.executable, "-m", "penumbra", "eval", *example_args()],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0 and done.stdout.count("\n") > 20


SHOP = EXAMPLE.parent / "shoplifting"


def test_the_shoplifting_example(capsys):
    """SEQUENCE(Shelf x, !Counter y, Exit z): every unpaid exit within W of a shelf read of
    its tag, with S^N(T) = (1 - F) / (eps F + 1 - F), F(T) = P(gap < T) under the counter
    stream's gap uniform(10, 200) and eps = 0.1, counted here gap by gap."""
    code, out, err = run(capsys, "--query-file", str(SHOP / "query.pq"), "--streams", str(SHOP / "streams.json"),
                         "--events", str(SHOP / "events.jsonl"), "--block-size", "4")
    assert code == 0 and err == ""
    found = {(m["events"]["x"], m["events"]["z"]): m["prob"] for m in map(json.loads, out.splitlines())}
    events = [json.loads(line) for line in (SHOP / "events.jsonl").read_text().splitlines()]
    expected = {}
    for x in (e for e in events if e["stream"] == "shelf"):
        for z in (e for e in events if e["stream"] == "exit" and e["attrs"] == x["attrs"]):
            lo, hi = x["ts"]["lo"], z["ts"]["lo"]
            paid = any(e["stream"] == "counter" and e["attrs"] == x["attrs"] and lo < e["ts"]["lo"] < hi
                       for e in events)
            if paid or not 0 < hi - lo < 600:
                continue
            f = sum(1 for gap in range(10, 201) if gap < hi - lo) / 191
            p = (1 - f) / (0.1 * f + 1 - f)
            if p >= 0.5:
                expected[x["id"], z["id"]] = p
    assert set(found) == set(expected) and len(found) == 4
    for pair, p in expected.items():
        assert found[pair] == pytest.approx(p, rel=1e-12)


def test_an_event_sent_again_is_taken_once_and_other_content_under_its_id_is_a_bad_line(capsys, tmp_path):
    """Every third line of the example sent twice (a retried batch, keys reordered) gives the
    example's matches; one id sent again with another timestamp stops at its line."""
    lines = (EXAMPLE / "events.jsonl").read_text().splitlines()
    again = []
    for n, line in enumerate(lines):
        again.append(line)
        if n % 3 == 0:
            again.append(json.dumps(dict(reversed(json.loads(line).items()))))
    twice = tmp_path / "twice.jsonl"
    twice.write_text("\n".join(again) + "\n")
    code, once, _ = run(capsys, *example_args())
    code_twice, out, err = run(capsys, "--query", QUERY, "--streams", str(EXAMPLE / "streams.json"),
                               "--events", str(twice))
    assert code == code_twice == 0 and err == "" and sorted(out.splitlines()) == sorted(once.splitlines())
    code, out, _ = run(capsys, "--query", QUERY, "--streams", str(EXAMPLE / "streams.json"), "--events", str(twice),
                       "--stats")
    assert json.loads(out)["events"] == len(lines)
    changed = json.loads(lines[4])
    changed["attrs"] = {**changed.get("attrs", {}), "region": "elsewhere"}
    conflict = tmp_path / "conflict.jsonl"
    conflict.write_text("\n".join(lines + [json.dumps(changed)]) + "\n")
    code, out, err = run(capsys, "--query", QUERY, "--streams", str(EXAMPLE / "streams.json"),
                         "--events", str(conflict))
    assert code == 2 and out == "" and f"conflict.jsonl:{len(lines) + 1}: id: conflict" in err
