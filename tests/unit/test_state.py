"""The one state format (penumbra/state.py) for every operator.

An operator snapshotted and restored after every block gives exactly what the same
operator fed without interruption gives (matches with their probabilities and ranges,
late events, counters); states written before the versioned format (tests/unit/data/
state-v0, taken by Penumbra at commit 1035750 from the examples' first halves) continue
to what the current operator gives over the whole file; and a state this Penumbra cannot
continue from is refused with a message that says why.
"""

from __future__ import annotations

import copyreg
import io
import json
import pickle
import zlib
from pathlib import Path
from types import MappingProxyType

import numpy as np
import pytest

from penumbra import state
from penumbra.engine import compile_query, operator_class
from penumbra.events import parse_event, parse_streams
from penumbra.joins import JoinOperator
from penumbra.lossy import LossyOperator
from penumbra.patterns import PatternOperator
from penumbra.state import StateError

ROOT = Path(__file__).resolve().parents[2]
LEGACY = Path(__file__).parent / "data" / "state-v0"

#: every operator's state, version by version: a change of fields is a new version with a migration
PINNED = {
    JoinOperator: ("join", 1, ("query", "streams", "floor", "threshold", "watermark", "totals", "lookup", "shape_ids",
                               "key_group", "held")),
    PatternOperator: ("pattern", 1, ("query", "pattern", "unit", "declared_span", "delay", "streams", "threshold",
                                     "now_lower", "span", "heartbeat", "horizon", "partitions", "queued", "counts",
                                     "key_group")),
    LossyOperator: ("sequence", 1, ("query", "miss_probs", "max_delay", "fixed_gaps", "learn", "threshold", "learned",
                                    "gap_samples", "sample_count", "paqs", "naqs", "pending", "held_times",
                                    "held_events", "held_streams", "anchors", "clock", "seen", "processed", "sequence",
                                    "totals", "key_codes", "next_code", "live_codes", "key_group", "held_parts",
                                    "vague", "vague_seen", "worlds")),
}


@pytest.mark.parametrize("cls", list(PINNED), ids=lambda cls: cls.__name__)
def test_every_operator_declares_its_state_fields_and_their_version(cls):
    kind, version, fields = PINNED[cls]
    assert (cls.kind, cls.STATE_VERSION, cls.STATE_FIELDS) == (kind, version, fields), \
        "a change of an operator's state fields is a new STATE_VERSION with its migration (penumbra/state.py)"
    assert operator_class(kind) is cls
    assert set(range(version)) <= set(cls.STATE_MIGRATIONS), "every older version has its migration"


def workload(seed: int, streams: dict, n: int, instants: float = 0.0) -> tuple:
    """Events of the given streams on the integer grid, keyed by ``k``, in a disordered
    arrival order: each arrives within its stream's max delay, one in thirty beyond it;
    the share ``instants`` of them are certain instants, the others intervals."""
    rng = np.random.default_rng(seed)
    names = list(streams)
    raw = []
    for i in range(n):
        stream = names[int(rng.integers(0, len(names)))]
        t = i // 2 + int(rng.integers(0, 3))
        width = 0 if rng.random() < instants else int(rng.integers(1, 4))
        delay = streams[stream]["max_delay"] * (1.5 if rng.random() < 1 / 30 else rng.random())
        raw.append((t + delay, {"stream": stream, "id": f"{stream}{i}", "ts": {"lo": t - width, "hi": t},
                                "attrs": {"k": int(rng.integers(0, 3)), "v": int(rng.integers(0, 10))}}))
    raw.sort(key=lambda item: item[0])
    parsed = parse_streams(streams)
    return parsed, [parse_event(obj, parsed) for _, obj in raw]


JOIN_STREAMS = {"S": {"pi": 4, "max_delay": 6}, "T": {"pi": 4, "max_delay": 4}}
PATTERN_STREAMS = {"S": {"pi": 4, "max_delay": 5}, "T": {"pi": 4, "max_delay": 5}, "U": {"pi": 4, "max_delay": 5}}
LOSSY_STREAMS = {"S": {"max_delay": 4}, "T": {"max_delay": 4, "miss_prob": 0.2}, "U": {"max_delay": 4}}

CASES = {
    **{f"join-{s}": ("SELECT * FROM S A, T B WHERE WINDOW(A, B) = 3 AND A.k = B.k WITH THRESHOLD 0.3 USING " + s,
                     JOIN_STREAMS, 0.0) for s in ("simple", "ssort", "eager", "lazy", "lazy_lookup")},
    "join-unkeyed": ("SELECT * FROM S A, T B WHERE WINDOW(A, B) = 2 AND A.v > 3 WITH THRESHOLD 0.5",
                     JOIN_STREAMS, 0.0),
    **{f"pattern-{m}": ("PATTERN SEQ(S a, T b, U c) WHERE a.k = b.k AND b.k = c.k AND skip_till_any_match(a, b, c) "
                        "WITHIN 6 WITH CONFIDENCE 0.1 USING " + m, PATTERN_STREAMS, 0.0)
       for m in ("point", "any_state", "sorted", "selectivity")},
    "pattern-next": ("PATTERN SEQ(S a, T b) WHERE a.k = b.k AND skip_till_next_match(a, b) WITHIN 4",
                     PATTERN_STREAMS, 0.0),
    "sequence": ("SEQUENCE(S x, !T y, U z) WHERE x.k = z.k AND y.k = x.k WITHIN 12 THRESHOLD 0.2",
                 LOSSY_STREAMS, 0.7),
    "sequence-imprecise": ("SEQUENCE(S x, U z) WHERE x.k = z.k WITHIN 10 THRESHOLD 0.1",
                           LOSSY_STREAMS, 0.0),
}


def outputs(result) -> tuple:
    """What a block gave, comparable: matches (with key, times and range) and late events."""
    return ([(m.to_json(), m.key, m.times) for m in result.matches], [late.to_json() for late in result.late])


def run(operator, events, block: int, restore_each: bool) -> tuple[list, dict]:
    cls = type(operator)
    given = []
    for start in range(0, len(events), block):
        given.append(outputs(operator.feed(events[start:start + block])))
        if restore_each:
            operator = cls.restore(operator.snapshot())
    given.append(outputs(operator.flush()))
    return given, operator.counters


@pytest.mark.parametrize("case", list(CASES))
def test_a_snapshot_and_restore_after_every_block_changes_nothing(case):
    text, params, instants = CASES[case]
    streams, events = workload(sum(map(ord, case)), params, 400, instants)
    whole, counters = run(compile_query(text, streams), events, 25, restore_each=False)
    again, counters_again = run(compile_query(text, streams), events, 25, restore_each=True)
    assert sum(len(matches) for matches, _ in whole) > 5, "the workload makes matches"
    assert again == whole
    assert counters_again == counters


def example(name: str) -> tuple:
    folder = ROOT / "examples" / name
    streams = parse_streams(json.loads((folder / "streams.json").read_text()))
    events = [parse_event(json.loads(line), streams) for line in (folder / "events.jsonl").read_text().splitlines()
              if line.strip()]
    return (folder / "query.pq").read_text(), streams, events


LEGACY_CASES = {"join": ("seismic", ""), "join_lazy_lookup": ("seismic", "\nUSING lazy_lookup"),
                "pattern": ("cluster", ""), "pattern_point": ("cluster", "\nUSING point"),
                "sequence": ("shoplifting", "")}


@pytest.mark.parametrize("name", list(LEGACY_CASES))
def test_a_state_from_before_the_versioned_format_is_migrated_and_continues_exactly(name):
    """Each file holds an operator's snapshot after the first half of its example, fed
    in blocks of five; restored, it gives for the second half what the current operator
    fed the whole file gives there."""
    folder, suffix = LEGACY_CASES[name]
    text, streams, events = example(folder)
    text = text.rstrip() + suffix
    half = len(events) // 2
    blocks = [events[i:min(i + 5, half)] for i in range(0, half, 5)] + \
             [events[i:i + 5] for i in range(half, len(events), 5)]
    operator = compile_query(text, streams)
    whole = [outputs(operator.feed(block)) for block in blocks] + [outputs(operator.flush())]
    data = (LEGACY / f"{name}.bin").read_bytes()
    assert not data.startswith(state.MAGIC)
    restored = operator_class(operator.kind).restore(data)
    first = (half + 4) // 5
    later = [outputs(restored.feed(block)) for block in blocks[first:]]
    assert later + [outputs(restored.flush())] == whole[first:]
    assert restored.counters == operator.counters


def test_the_state_format_is_a_header_and_the_compressed_fields():
    data = state.dump("demo", 3, {"threshold": 0.5, "buffers": np.arange(4.0)})
    assert data[:5] == state.MAGIC + bytes([state.FORMAT])
    body = pickle.loads(zlib.decompress(data[5:]))
    assert body["kind"] == "demo" and body["version"] == 3 and body["fields"]["threshold"] == 0.5


@pytest.mark.parametrize("data, kind, version, fields, message", [
    (state.dump("join", 2, {"a": 1}), "join", 1, ("a",), "version 2 is newer than this Penumbra's (1)"),
    (state.dump("pattern", 1, {"a": 1}), "join", 1, ("a",), "of a 'pattern' query, read as a 'join' one"),
    (state.dump("join", 1, {"a": 1}), "join", 2, ("a",), "version 1 cannot be migrated to version 2"),
    (state.dump("join", 1, {"a": 1, "b": 2}), "join", 1, ("a", "c"), "missing ['c'], unknown ['b']"),
    (state.MAGIC + b"\x09" + b"rest", "join", 1, ("a",), "unknown state format 9"),
    (state.MAGIC + b"\x01" + b"not zlib", "join", 1, ("a",), "unreadable"),
    (pickle.dumps({"a": 1}), "join", 1, ("a",), "written before the versioned state format"),
])
def test_a_state_that_cannot_be_continued_is_refused_with_its_reason(data, kind, version, fields, message):
    with pytest.raises(StateError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")
                       .replace("]", r"\]")):
        state.load(data, kind, version, fields)


def test_a_state_naming_anything_but_data_classes_is_refused():
    class Evil:
        def __reduce__(self):
            import os
            return os.system, ("true",)

    with pytest.raises(StateError, match="may not name posix.system"):
        JoinOperator.restore(state.MAGIC + bytes([state.FORMAT]) + zlib.compress(pickle.dumps(
            {"kind": "join", "version": 1, "fields": {"x": Evil()}})))
    with pytest.raises(StateError, match="may not name posix.system"):
        JoinOperator.restore(pickle.dumps({"held": Evil()}))


def test_an_unversioned_join_state_with_a_buffer_per_key_is_refused():
    with pytest.raises(StateError, match="buffer per key"):
        JoinOperator.restore(pickle.dumps({"query": None, "buffers": {}}))


def legacy_lossy_run(text: str, seed: int, given=outputs) -> tuple:
    """The workload of a legacy lossy state (certain instants, as before imprecise times:
    the operator was saved after 100 events, in blocks of 25), and what the current
    operator for ``text`` gives for it: the blocks, what each gave, and the counters."""
    streams, events = workload(seed, LOSSY_STREAMS, 200, 1.0)
    blocks = [events[i:i + 25] for i in range(0, len(events), 25)]
    operator = compile_query(text, streams)
    whole = [given(operator.feed(block)) for block in blocks] + [given(operator.flush())]
    return blocks, whole, operator.counters


@pytest.mark.parametrize("held_parts", ["saved", "from before imprecise times"])
def test_an_unversioned_lossy_state_holding_events_continues_exactly(held_parts):
    data = (LEGACY / "sequence_held.bin").read_bytes()
    if held_parts != "saved":      # a state from before imprecise times kept no parts of held events
        config, saved = state.unpickle(data)
        assert saved["held_times"], "the saved operator holds events"
        del saved["held_parts"]
        buffer = io.BytesIO()
        pickler = pickle.Pickler(buffer)
        pickler.dispatch_table = {**copyreg.dispatch_table, MappingProxyType: lambda m: (state.read_only, (dict(m),))}
        pickler.dump((config, saved))
        data = buffer.getvalue()
    blocks, whole, counters = legacy_lossy_run(
        "SEQUENCE(S x, !T y, U z) WHERE x.k = z.k AND y.k = x.k WITHIN 12 THRESHOLD 0.2", 7)
    restored = LossyOperator.restore(data)
    assert [outputs(restored.feed(block)) for block in blocks[4:]] + [outputs(restored.flush())] == whole[4:]
    assert restored.counters == counters


#: lossy states older than the ones above, with matches waiting for the window of a trailing
#: negative, each written by the Penumbra of its time after four blocks of the workload of seed
#: 11: before a queue marked the instants of imprecise events (``wide``), and before imprecise
#: timestamps (no held parts, no imprecise events kept or waiting for worlds, no ``wide``) and
#: before a waiting match kept its factors; by the commit that wrote it
OLDER_LOSSY = {"sequence_before_wide.bin": "4eb7f3f", "sequence_before_factors.bin": "322cb17"}


def with_factors(result) -> tuple:
    return outputs(result), [m.factors for m in result.matches]


@pytest.mark.parametrize("name", list(OLDER_LOSSY))
def test_an_older_lossy_state_with_waiting_matches_continues_exactly(name):
    data = (LEGACY / name).read_bytes()
    _, saved = state.unpickle(data)
    queues = [*saved["paqs"], *(queue for queues in saved["naqs"].values() for queue in queues)]
    assert saved["pending"] and not any(hasattr(queue, "wide") for queue in queues), \
        f"written as the code of {OLDER_LOSSY[name]} did"
    if name == "sequence_before_factors.bin":
        assert {len(item) for item in saved["pending"]} == {7} and "vague" not in saved and "held_parts" not in saved
    blocks, whole, counters = legacy_lossy_run(
        "SEQUENCE(S x, U z, !T y) WHERE x.k = z.k AND y.k = x.k WITHIN 12 THRESHOLD 0.2", 11, with_factors)
    restored = LossyOperator.restore(data)
    assert [with_factors(restored.feed(block)) for block in blocks[4:]] + [with_factors(restored.flush())] == whole[4:]
    assert restored.counters == counters
