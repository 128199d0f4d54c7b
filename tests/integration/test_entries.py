"""The Redis contract's entries through a real Redis: what a writer's encoder puts in, the
reader's decoder gets back, as Redis hands it (every field as bytes), field for field."""

from __future__ import annotations

import json
import sys

import pytest
import redis
from hypothesis import given, settings, strategies as st

from contract import entries
from contract.ingest import append_events, end_of_input
from contract.keys import Keys
from contract.alarms import instance_id, key_json
from contract.results import queue_matches
from penumbra.events import parse_streams


@pytest.fixture
def client(redis_server):
    client = redis.Redis.from_url(redis_server.url)
    yield client
    client.close()


def added(client, stream: str, fields: dict) -> tuple[bytes, dict]:
    entry_id = client.xadd(stream, fields)
    found = client.xrange(stream, entry_id, entry_id)
    assert len(found) == 1
    return found[0]


def test_ingest_entries_carry_each_event_as_sent_and_end_marks_their_queries(client, keys):
    lines = [b'{"stream": "s", "id": "1", "ts": {"lo": 5, "hi": 6}}',
             '{"stream": "s", "id": "\u00e9", "ts": {"lo": 6, "hi": 7}}', b"not json at all"]
    ids = append_events(client, lines, keys, streams=parse_streams({"s": {}}))
    mark = end_of_input(client, ["q2", "q1"], keys)
    found = client.xrange(keys.ingest)
    # the two valid events are one block; the entry that is not an event goes alone
    assert [entry_id for entry_id, _ in found] == [ids[0], ids[2], mark] and ids[0] == ids[1]
    assert found[0][1] == {b"b": lines[0] + b"\n" + lines[1].encode(), b"n": b"2"}
    assert found[1][1] == {entries.EVENT_FIELD.encode(): lines[2]}
    assert entries.read_ingest(found) == [(ids[0].decode(), 0, lines[0]), (ids[0].decode(), 1, lines[1].encode()),
                                          (ids[2].decode(), None, lines[2])]
    assert list(found[2][1]) == [entries.CONTROL_FIELD.encode()]
    assert entries.read_end_mark(found[2][1][entries.CONTROL_FIELD.encode()]) == ["q1", "q2"]
    assert entries.read_end_mark(b'{"end": "q1"}') == [] and entries.read_end_mark(b"{oops") == []


def test_append_events_goes_in_order_across_its_script_calls(client, keys, monkeypatch):
    monkeypatch.setattr("contract.ingest.SCRIPT_CHUNK", 7)
    lines = [json.dumps({"stream": "s", "id": f"n{n}", "n": n}) if n % 3 else json.dumps({"n": n}) for n in range(30)]
    assert len(append_events(client, lines, keys)) == 30
    assert [json.loads(line)["n"] for _, _, line in entries.read_ingest(client.xrange(keys.ingest))] == list(range(30))


def test_dead_letters_keep_their_fields_and_cut_what_came_to_8_kib(client, keys):
    big = b"x" * (entries.DEAD_RAW_BYTES + 5)
    entry_id, fields = added(client, keys.dead, entries.rejected_letter("bad ts", big, 12.5, source="api",
                                                                        who="ops", index=3))
    assert entries.read_dead(fields) == {"kind": "rejected", "entry": "", "reason": "bad ts", "at": 12.5,
                                         "raw": big[:entries.DEAD_RAW_BYTES], "raw_bytes": len(big),
                                         "source": "api", "who": "ops", "index": 3}
    _, fields = added(client, keys.dead, entries.rejected_letter("no field", b"{}", 1.0, entry="5-0"))
    assert entries.read_dead(fields) == {"kind": "rejected", "entry": "5-0", "reason": "no field", "at": 1.0,
                                         "raw": b"{}"}
    _, fields = added(client, keys.dead, entries.late_letter("q1", "seismic", "s-17", "late by 3", 2.0))
    assert entries.read_dead(fields) == {"kind": "late", "query": "q1", "stream": "seismic", "id": "s-17",
                                         "reason": "late by 3", "at": 2.0}


def test_matches_written_by_script_read_back_with_batch_group_instance_and_time(client, keys):
    matches = [(entries.encode({"events": {"A": f"a{n}", "B": "b"}, "prob": n / 10, "range": [n, n + 1]}), n % 3,
                {"k": n % 2} if n else None, n / 10, {"A": [n, n + 0.5], "B": [n - 1.25, n]} if n % 2 else None,
                "sr" if n % 2 else None,
                {"A": {"stream": "s", "id": f"a{n}", "ts": {"lo": n, "hi": n + 0.5}, "attrs": {"k": n % 2}}} if n % 2 else None,
                [{"after": "A", "before": None, "components": [], "gap": n, "score": 1.0}] if n == 3 else None)
               for n in range(5)]
    pipe = client.pipeline(transaction=True)
    queue_matches(pipe, keys, "q1", 42, matches, maxlen=1000, at=1_000_500)
    pipe.execute()
    found = client.xrange(keys.matches("q1"))
    assert [fields for _, fields in found] == [
        {k.encode(): v if isinstance(v, bytes) else str(v).encode()
         for k, v in entries.match_entry(m, 42, g, instance_id("q1", key), key_json(key), times, part, records,
                                         factors).items()}
        for m, g, key, _, times, part, records, factors in matches]
    # each entry's id is the batch's time and its place in the batch: the archive's id of the match
    assert [i for i, _ in found] == [f"1000500-{n}".encode() for n in range(5)]
    # a stream already past that time (written by an older version) takes Redis's own ids, in order
    pipe = client.pipeline(transaction=True)
    queue_matches(pipe, keys, "q1", 43, matches[:2], maxlen=1000, at=1_000_400)
    pipe.execute()
    later = client.xrange(keys.matches("q1"))[5:]
    assert len(later) == 2 and all(int(i.split(b"-")[0]) > 1_000_500 for i, _ in later)
    first_id, first = found[1]
    record = entries.read_match(first_id, first)
    assert record == {"id": first_id.decode(), "events": {"A": "a1", "B": "b"}, "prob": 0.1, "range": [1, 2],
                      "batch": 42, "at": int(first_id.split(b"-")[0]) / 1000, "alarm": instance_id("q1", {"k": 1}),
                      "key": {"k": 1}, "times": {"A": [1, 1.5], "B": [-0.25, 1]}, "partition": "sr",
                      "records": {"A": {"stream": "s", "id": "a1", "ts": {"lo": 1, "hi": 1.5}, "attrs": {"k": 1}}},
                      "factors": None}
    assert entries.read_match(*found[3])["factors"] == [{"after": "A", "before": None, "components": [], "gap": 3,
                                                         "score": 1.0}]
    assert entries.match_value(first) == {"events": {"A": "a1", "B": "b"}, "prob": 0.1, "range": [1, 2]}


def test_observations_metrics_audit_and_alarm_state_read_back_as_written(client, keys):
    observed = {"watermark": -float("inf"), "buffers": {"A": 3}, "floor": 0.05}
    entry_id, fields = added(client, keys.observations("q1"), entries.observation_entry(observed, 7))
    read = entries.read_observation(entry_id, fields)
    assert read["batch"] == 7 and read["observations"] == observed
    metrics = {"batch": 3, "rows": 100, "lag_seconds": 0.25}
    _, fields = added(client, keys.metrics, entries.metrics_entry(metrics))
    assert entries.read_metrics(fields) == metrics
    entry_id, fields = added(client, keys.audit, entries.audit_entry(5.5, "ops", "update", "q1", {"threshold": 0.7}, 9))
    assert entries.read_audit(entry_id, fields) == {"id": entry_id.decode(), "at": 5.5, "who": "ops",
                                                    "action": "update", "subject": "q1",
                                                    "details": {"threshold": 0.7}, "version": 9}
    _, fields = added(client, keys.alarm_actions, entries.alarm_action_entry("q1", "silenced", "q1:0a1b2c3d4e5f"))
    assert entries.read_alarm_action(fields) == ("q1", "silenced", "q1:0a1b2c3d4e5f")


def test_the_live_messages_name_what_changed():
    assert json.loads(entries.live_batch(3, 1.5, {"q1": 2}, {"q2", "q1"}, 0)) == {
        "batch": 3, "at": 1.5, "matches": {"q1": 2}, "observations": ["q1", "q2"], "dead": 0}
    assert json.loads(entries.live_metrics({"batch": 1})) == {"metrics": {"batch": 1}}
    assert json.loads(entries.live_alarm("q1")) == {"alarm": "q1"}


@pytest.mark.parametrize("prefix", ["", "a:b", "two words", "x" * 65, "pn*"])
def test_a_prefix_is_one_plain_key_segment(prefix):
    with pytest.raises(ValueError, match="prefix"):
        Keys(prefix)


def test_a_match_payload_carries_its_parts_whatever_their_values():
    import json

    from contract.results import match_payload, read_match_payload

    awkward = {"k": 2 ** 70 + 1, "s": "line\nbreak \ud800", "f": -0.0}
    records = {"A": {"stream": "s", "id": "a\n1", "attrs": awkward}}
    for parts in [(awkward, 0.61, {"A": [1.5, 2.0]}, "SR", records, [{"gap": 1}]),
                  ({"k": 2 ** 70 + 1}, 0.7, {}, "LPR", None, None),
                  (None, 1.0, {"A": [0, 1]}, None, None, None), ({"k": True}, 0.5, {}, "", {}, [])]:
        key, prob, times, partition, kept, factors = read_match_payload(match_payload(*parts))
        assert (key, prob, partition) == (json.loads(json.dumps(parts[0])), parts[1], parts[3])
        assert json.loads(times) == json.loads(json.dumps(parts[2]))
        assert (json.loads(kept) if kept else None) == (json.loads(json.dumps(parts[4])) if parts[4] else None)
        assert (json.loads(factors) if factors else None) == (parts[5] or None)


def containers(inner):
    return st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4)


json_values = st.recursive(
    st.none() | st.booleans() | st.floats() | st.text(max_size=6)
    | st.integers(-(2 ** 70), 2 ** 70)
    | st.sampled_from([2 ** 63, -(2 ** 63) - 1, 2 ** 64, 2 ** 64 - 1, -0.0, "\ud800"]), containers, max_leaves=12)


@settings(max_examples=500, deadline=None)
@given(json_values, st.booleans())
def test_an_entrys_json_reads_as_the_json_module_reads_it(value, by_encoder):
    """A JSON field (as the job's encoder or the json module writes it, NaN, -Infinity and
    integers beyond 64 bits included) reads as the json module alone reads it: the same
    values of the same types, to the bit."""
    raw = entries.encode(value) if by_encoder else json.dumps(value).encode()
    assert repr(entries.decode(raw)) == repr(json.loads(raw))


@pytest.mark.parametrize("depth", [1, 255, 256, 300, 991, 1000, 1024, 1025])
def test_deep_json_reads_as_the_json_module_reads_it(depth):
    """orjson reads nesting to 1,024 levels, the json module to Python's recursion limit:
    a field either reads the same or fails alike."""
    def outcome(read, raw):     # (the values, as deep, would take the recursion limit to compare)
        try:
            read(raw)
        except RecursionError:
            return "too deep"
        return "read"

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)     # Python's own (a test runner may raise it)
    try:
        for raw in (b"[" * depth + b"]" * depth, b'{"a":' * depth + b"1" + b"}" * depth):
            assert outcome(entries.decode, raw) == outcome(json.loads, raw)
    finally:
        sys.setrecursionlimit(limit)


def test_what_orjson_cannot_write_still_reaches_the_feed_and_the_webhooks():
    import json

    from backend.live.cursor import encode as feed_message
    from contract.entries import encode

    message = {"type": "alarms", "data": {"key": {"k": "x\ud800"}, "n": 2 ** 70 + 1}}
    assert json.loads(feed_message(message)) == message
    assert json.loads(encode(message)) == message


def test_a_value_utf_8_cannot_carry_gets_a_response_not_an_error():
    import json

    from backend.errors import Response

    content = {"items": [{"key": {"k": "x\ud800"}, "attrs": {"name": "é"}}]}
    assert json.loads(Response(content).body) == content
    assert Response({"name": "é"}).body.decode() == '{"name":"é"}'     # UTF-8 as ever otherwise


def test_read_ingest_gives_what_the_job_reads_of_each_entry(client, keys):
    for fields in ({"e": b"[0]"}, entries.block_entry([b"[1]", b"[2]"]), {"b": b"[3]\n[4]", "n": b"3"},
                   {"b": b"[5]\n[6]", "n": b"02"}, {"c": b'{"end": []}'}, {"x": b"[7]"}):
        client.xadd(keys.ingest, fields)
    stream = client.xrange(keys.ingest)
    ids = [entry_id.decode() for entry_id, _ in stream]
    # a block whose lines are not its count, or with no count, is rejected whole by the job
    assert entries.read_ingest(stream) == [(ids[0], None, b"[0]"), (ids[1], 0, b"[1]"), (ids[1], 1, b"[2]")]
    with pytest.raises(ValueError):
        entries.block_entry([b"[1]", b"[2]\n"])
