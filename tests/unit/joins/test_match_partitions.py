"""Each join match names the probing range its pair falls in (``Match.partition``): the
range of its A event (the PTJoin paper's Theorem 3 for a template event, Eqs. 4-6 for
any other, with B's longest timestamp pi) that holds its B event's max time. Checked
against the ranges computed here from the events themselves, one pair at a time."""

from __future__ import annotations

import math

import pytest

from penumbra.engine import build_operator
from penumbra.query import parse
from tests.unit.joins.test_join_operator import workload


def expected_partition(operator, a, b) -> str | None:
    d = operator.d
    side_a, side_b = operator.sides
    hist_a = a.histogram
    lo, hi = float(hist_a.edges[0]), float(hist_a.edges[-1])
    x = float(b.histogram.edges[-1])
    template = side_a.template_index.get(a.template, -1) if a.template is not None else -1
    if template >= 0 and operator.tables is not None:
        # Theorem 3: the template's bounds shifted to the event's max time
        ranges = operator.tables.probing_ranges(template, hi, d)
    else:
        pi = side_b.params.longest
        pi = math.inf if pi is None else pi
        ranges = {"lpr": [lo - d, hi - d + pi], "sr": [hi - d + pi, lo + d], "rpr": [lo + d, hi + d + pi]}
    for name in ("lpr", "sr", "rpr"):
        low, high = ranges[name]
        if low <= x <= high:
            return name
    return None


@pytest.mark.parametrize("kind", ["templates", "mixed", "intervals"])
@pytest.mark.parametrize("window", [10, 40])
def test_each_join_match_names_the_probing_range_its_pair_falls_in(kind, window):
    streams, events = workload(71, kind, n=400, late_share=0.0)
    operator = build_operator(parse(f"SELECT * FROM S A, T B WHERE WINDOW(A, B) = {window} WITH THRESHOLD 0.3"),
                              streams)
    by_id = {(e.stream.casefold(), e.id): e for e in events}
    found = []
    for start in range(0, len(events), 50):
        found += list(operator.feed(events[start:start + 50]).matches)
    found += list(operator.flush().matches)
    assert found
    seen = set()
    for m in found:
        want = expected_partition(operator, by_id[("s", m.events["A"])], by_id[("t", m.events["B"])])
        assert m.partition == want, (m, want)
        seen.add(m.partition)
    assert len(seen) >= 2, seen       # the workload reaches more than one range
