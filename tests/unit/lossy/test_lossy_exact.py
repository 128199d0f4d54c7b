"""With epsilon = 0 the lossy operator is exact CEP with negation: every match has
probability 1 and the matches are those a brute-force enumeration finds."""

from __future__ import annotations

import itertools
from collections import Counter

import hypothesis.strategies as st
from hypothesis import given, settings

from penumbra.events import parse_event, parse_streams
from penumbra.lossy import build_operator
from penumbra.query import parse

STREAMS = ("A", "B", "C")


def event(stream, ident, t, tag, value):
    return parse_event({"stream": stream, "id": ident, "ts": {"lo": t, "hi": t},
                        "attrs": {"tag": tag, "v": value}})


# Extra literals: query text and the same condition in Python, on two positive components
# (p, q) or on a negative n and the positive before it (p).
EXTRAS = {
    "none": ("", None),
    "order": ("{p}.v <= {q}.v", lambda b, p, q: b[p]["v"] <= b[q]["v"]),
    "either": ("({p}.v = 0 OR {q}.v = 2)", lambda b, p, q: b[p]["v"] == 0 or b[q]["v"] == 2),
    "not_both": ("NOT ({p}.v = 1 AND {q}.v = 1)", lambda b, p, q: not (b[p]["v"] == 1 and b[q]["v"] == 1)),
}


@st.composite
def scenarios(draw):
    size = draw(st.integers(2, 4))
    negated = draw(st.lists(st.booleans(), min_size=size, max_size=size))
    if all(negated):
        negated[draw(st.integers(0, size - 1))] = False
    streams = draw(st.lists(st.sampled_from(STREAMS), min_size=size, max_size=size))
    names = [f"c{k}" for k in range(size)]
    tagged = draw(st.booleans())
    extra = draw(st.sampled_from(sorted(EXTRAS)))
    negative_value = draw(st.booleans())     # a negative only counts when its v is 1
    window = draw(st.integers(2, 12))
    events = []
    for n in range(draw(st.integers(0, 22))):
        events.append((draw(st.sampled_from(STREAMS)), f"e{n}", draw(st.integers(0, 30)),
                       draw(st.integers(0, 2)), draw(st.integers(0, 2))))
    blocks = draw(st.integers(1, 4))
    return dict(negated=negated, streams=streams, names=names, tagged=tagged, extra=extra,
                negative_value=negative_value, window=window, events=events, blocks=blocks)


def query_text(s):
    parts = ", ".join(("!" if neg else "") + f"{stream} {name}"
                      for neg, stream, name in zip(s["negated"], s["streams"], s["names"]))
    positives = [n for n, neg in zip(s["names"], s["negated"]) if not neg]
    conditions = []
    if s["tagged"]:
        conditions += [f"{positives[0]}.tag = {n}.tag" for n in s["names"] if n != positives[0]]
    if s["extra"] != "none" and len(positives) >= 2:
        conditions.append(EXTRAS[s["extra"]][0].format(p=positives[0], q=positives[-1]))
    if s["negative_value"]:
        conditions += [f"{n}.v = 1" for n, neg in zip(s["names"], s["negated"]) if neg]
    where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
    return f"SEQUENCE({parts}){where} WITHIN {s['window']} THRESHOLD 0.5"


def brute_force(s):
    """Every assignment of events to the positive components, checked directly."""
    names, negated, streams, window = s["names"], s["negated"], s["streams"], s["window"]
    events = [dict(stream=e[0], id=e[1], t=e[2], tag=e[3], v=e[4]) for e in s["events"]]
    positives = [k for k, neg in enumerate(negated) if not neg]
    extra = EXTRAS[s["extra"]][1] if len(positives) >= 2 else None
    found = Counter()
    for chosen in itertools.product(events, repeat=len(positives)):
        times = [e["t"] for e in chosen]
        if any(a >= b for a, b in zip(times, times[1:])) or times[-1] - times[0] >= window:
            continue
        if any(e["stream"] != streams[k] for e, k in zip(chosen, positives)):
            continue
        if s["tagged"] and len({e["tag"] for e in chosen}) > 1:
            continue
        binding = {names[k]: e for k, e in zip(positives, chosen)}
        if extra and not extra(binding, names[positives[0]], names[positives[-1]]):
            continue
        at = dict(zip(positives, times))
        violated = False
        for k in (k for k, neg in enumerate(negated) if neg):
            before = [p for p in positives if p < k]
            after = [p for p in positives if p > k]
            lo = at[before[-1]] if before else times[-1] - window
            hi = at[after[0]] if after else times[0] + window
            for e in events:
                if e["stream"] == streams[k] and lo < e["t"] < hi \
                        and (not s["tagged"] or e["tag"] == chosen[0]["tag"]) \
                        and (not s["negative_value"] or e["v"] == 1):
                    violated = True
        if not violated:
            found[tuple(sorted((names[k], e["id"]) for k, e in zip(positives, chosen)))] += 1
    return found


def run_operator(s, miss_prob=0.0):
    streams = parse_streams({name: {"miss_prob": miss_prob} for name in STREAMS})
    op = build_operator(parse(query_text(s)), streams)
    events = [event(*e) for e in s["events"]]
    size = max(1, -(-len(events) // s["blocks"]))
    ordered = sorted(events, key=lambda e: e.ts.lo)
    matches = []
    for start in range(0, len(ordered), size):
        matches += op.feed(ordered[start:start + size]).matches
    matches += op.flush().matches
    return matches


@settings(max_examples=250, deadline=None)
@given(scenarios())
def test_epsilon_zero_equals_brute_force(s):
    matches = run_operator(s)
    assert all(m.prob == 1.0 for m in matches)
    assert Counter(tuple(sorted(m.events.items())) for m in matches) == brute_force(s)


def test_block_order_does_not_matter_within_a_block():
    s = dict(negated=[False, True, False], streams=["A", "B", "C"], names=["x", "y", "z"], tagged=True,
             extra="none", negative_value=False, window=10,
             events=[("C", "c1", 5, 1, 0), ("A", "a1", 1, 1, 0), ("B", "b1", 3, 2, 0)], blocks=1)
    streams = parse_streams({})
    op = build_operator(parse(query_text(s)), streams)
    out = op.feed([event(*e) for e in s["events"]])     # not in time order
    assert [m.events for m in out.matches] == [{"x": "a1", "z": "c1"}]
    assert Counter(tuple(sorted(m.events.items())) for m in out.matches) == brute_force(s)


SHOPLIFTING = ("SEQUENCE(Shelf x, !Counter y, Exit z) WHERE x.tag = z.tag AND y.tag = x.tag "
               "WITHIN 600 THRESHOLD 0.5")


def rfid(reader, ident, t, tag):
    return parse_event({"stream": reader, "id": ident, "ts": {"lo": t, "hi": t}, "attrs": {"tag": tag}})


def test_shoplifting_exact():
    """Reader A over the shelves, B at the counter (negated), C at the exit; same tag."""
    op = build_operator(parse(SHOPLIFTING), parse_streams({}))
    block = [
        rfid("shelf", "a1", 10, "t1"), rfid("shelf", "a2", 12, "t2"), rfid("shelf", "a3", 15, "t3"),
        rfid("counter", "b2", 40, "t2"),                     # t2 was paid for
        rfid("exit", "c1", 60, "t1"), rfid("exit", "c2", 70, "t2"),
        rfid("exit", "c3", 900, "t3"),                       # outside the window
        rfid("counter", "b1", 950, "t1"), rfid("exit", "c4", 960, "t1"),
    ]
    matches = op.feed(block).matches
    assert sorted((m.events["x"], m.events["z"], m.prob) for m in matches) == [("a1", "c1", 1.0)]
