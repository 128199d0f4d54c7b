"""The latency benchmark's warm-ups lie wholly before the measured events: none of those
comes late, and their matches are those they make alone."""

from __future__ import annotations

import json

from bench.pipeline import QUERY, SPAN, STREAMS, WINDOW, intrusions, warm_ups
from penumbra.engine import build_operator
from penumbra.events import parse_events, parse_streams
from penumbra.query import parse


def detected(lines: list[str]) -> list[int]:
    return [json.loads(line)["ts"]["detected"] for line in lines]


def test_each_warm_up_ends_before_the_next_events_begin():
    first, warm = warm_ups(20_000)
    measured = intrusions(20_000)
    assert len(warm) == 100_000
    assert max(detected(first)) + WINDOW + SPAN < min(detected(warm))
    assert max(detected(warm)) + WINDOW + SPAN < min(detected(measured))


def test_after_the_warm_ups_the_measured_events_make_their_own_matches():
    # 4,000 events/s: a warm-up spanning about an hour of event time (more than the half hour
    # it was once moved back by)
    first, warm = warm_ups(4_000)
    measured = intrusions(20_000)
    streams = parse_streams(STREAMS)

    def run(*parts: list[str]):
        operator, found, late = build_operator(parse(QUERY), streams), [], []
        for lines in parts:
            result = operator.feed(parse_events(lines, streams)[0])
            found.append({tuple(m.to_json()["events"].values()) for m in result.matches})
            late.append(len(result.late))
        flushed = {tuple(m.to_json()["events"].values()) for m in operator.flush().matches}
        found[-1] |= flushed
        return found, late

    (_, _, after), late = run(first, warm, measured)
    (alone,), _ = run(measured)
    assert late == [0, 0, 0]
    assert after == alone and len(alone) > 1_000
