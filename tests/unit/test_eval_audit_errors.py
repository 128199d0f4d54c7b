"""`penumbra eval`'s contract on bad input, from the CLI audit: a bad query, events file,
streams file or option exits 2 with one line on stderr, never a traceback; a bad event is
refused naming its field (and for eval the file and line), by the one validation that the
REST API and the pipeline share."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from penumbra.cli import main
from penumbra.cli.replay import _replay_schedule
from penumbra.errors import ValidationError
from penumbra.events import admit_contents, parse_event, parse_event_lines, parse_streams
from penumbra.events.columns import EventColumns

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SEISMIC, CLUSTER, SHOP = EXAMPLES / "seismic", EXAMPLES / "cluster", EXAMPLES / "shoplifting"
QUERY = (SEISMIC / "query.pq").read_text()


def run(capsys, *args):
    code = main(["eval", *args])
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(code, out, err, *words):
    assert code == 2 and out == "" and "Traceback" not in err, err
    assert len(err.splitlines()) == 1 and all(word in err for word in words), err


def seismic(events: Path, *extra):
    return ["--query", QUERY, "--streams", str(SEISMIC / "streams.json"), "--events", str(events), *extra]


# ---- files that are not UTF-8

def test_a_streams_file_or_query_file_not_utf8_is_one_line_naming_it(capsys, tmp_path):
    streams, query = tmp_path / "streams.json", tmp_path / "query.pq"
    streams.write_bytes(b'{"seismic\xff": {}}')
    query.write_bytes(QUERY.encode() + b" -- caf\xe9")
    events = SEISMIC / "events.jsonl"
    one_line_error(*run(capsys, "--query", QUERY, "--streams", str(streams), "--events", str(events)),
                   f"{streams}: not UTF-8 text")
    one_line_error(*run(capsys, "--query-file", str(query), "--streams", str(SEISMIC / "streams.json"),
                        "--events", str(events)), f"{query}: not UTF-8 text")


# ---- timestamps wider than a float

STREAMS = parse_streams({"S": {"templates": {"t": {"edges": [0, 1.5e308], "probs": [1]}}}})
WIDE = [({"lo": -1e308, "hi": 1e308}, "ts.hi"), ({"lo": -10 ** 308, "hi": 10 ** 308}, "ts.hi"),
        ({"edges": [-1e308, 0, 1e308], "probs": [0.5, 0.5]}, "ts.edges"),
        ({"detected": -1e308, "template": "t"}, "ts.detected")]


@pytest.mark.parametrize("ts, field", WIDE)
def test_a_timestamp_wider_than_a_float_is_refused_by_every_reader(ts, field):
    """Each bound is finite, the length is not: refused alike by the core (a decoded
    object), the REST API's admission and the pipeline's lines and columns."""
    obj = {"stream": "S", "id": "a", "ts": ts}
    with pytest.raises(ValidationError) as error:
        parse_event(obj, STREAMS)
    assert error.value.field == field
    line = json.dumps(obj).encode()
    for refused in (admit_contents([obj], STREAMS)[0], parse_event_lines([line], STREAMS)[0],
                    EventColumns.parse([line], STREAMS)[2][0][1]):
        assert isinstance(refused, ValidationError) and str(refused) == str(error.value)


def test_a_timestamp_wider_than_a_float_stops_eval_at_its_line(capsys, tmp_path):
    events = tmp_path / "e.jsonl"
    lines = (CLUSTER / "events.jsonl").read_text().splitlines()
    wide = '{"stream": "CPU", "id": "wide", "ts": {"lo": -1e308, "hi": 1e308}, "attrs": {"nodeId": "n0", "value": 99}}'
    events.write_text("\n".join(lines[:2] + [wide] + lines[2:]) + "\n")
    for query in ((CLUSTER / "query.pq").read_text(), "SELECT * FROM CPU A, TaskStart B WHERE WINDOW(A, B) = 20 "
                                                       "WITH THRESHOLD 0.1"):
        one_line_error(*run(capsys, "--query", query, "--streams", str(CLUSTER / "streams.json"), "--events",
                            str(events)), "e.jsonl:3: ts.hi: spans more than a float holds")


# ---- lines split at \n only, as the live path splits them

def test_a_cr_within_a_line_is_json_whitespace_and_eval_counts_lines_as_replay_does(capsys, tmp_path):
    lines = (SEISMIC / "events.jsonl").read_text().splitlines()
    lines[2] = lines[2].replace(', "id"', ',\r"id"')
    lines[4] += "\r"                                            # a CRLF line
    events = tmp_path / "e.jsonl"
    events.write_text("\n".join(lines) + "\n")
    code, out, err = run(capsys, *seismic(events, "--stats"))
    assert code == 0 and err == "" and json.loads(out)["events"] == len(lines)
    pace = argparse.Namespace(rate=None, speed=None, units_per_second=1000.0)
    assert len(list(_replay_schedule(str(events), pace))) == len(lines)
    events.write_text("\n".join(lines + ["{broken"]) + "\n")
    one_line_error(*run(capsys, *seismic(events)), f"e.jsonl:{len(lines) + 1}: invalid JSON")


# ---- events errors name the line and say what is wrong in the reader's words

def test_a_line_not_utf8_is_named_by_its_number(capsys, tmp_path):
    lines = (SEISMIC / "events.jsonl").read_bytes().splitlines()
    lines[5] = lines[5].replace(b'"id": "', b'"id": "x\xff', 1)
    events = tmp_path / "e.jsonl"
    events.write_bytes(b"\n".join(lines) + b"\n")
    one_line_error(*run(capsys, *seismic(events)), "e.jsonl:6: not UTF-8")


def test_an_integer_too_long_to_read_is_said_so_without_python_advice(capsys, tmp_path):
    events = tmp_path / "e.jsonl"
    events.write_text('{"stream": "seismic", "id": "big", "ts": {"lo": 1, "hi": 1' + "0" * 5000 + "}}\n")
    code, out, err = run(capsys, *seismic(events))
    one_line_error(code, out, err, "e.jsonl:1: invalid JSON: a number with more than 4300 digits at ts.hi")
    assert "sys." not in err
