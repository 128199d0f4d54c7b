"""The "Why this match" view in a real Chromium: a join match the core found, explained
with the exact integration's numbers, its events and probing ranges; a lossy match over
imprecise times explained by its worlds.
"""

from __future__ import annotations

import re

import pytest

from penumbra.query import parse as parse_query

from .conftest import unique, write_batch


def test_why_explains_a_real_match_with_its_events_and_the_cores_numbers(tab, api, store, keys, join_query):
    """A match the core found on two events of the seismic example (epoch-millisecond
    times), written as the sink writes it: "why?" on its feed row opens its explanation,
    whose probability and terms equal the exact integration of tests/oracle.py; the events'
    attributes, the probing range it fell in and both charts are shown, and no epoch number."""
    from penumbra.engine import build_operator
    from penumbra.events import parse_event, parse_streams
    from penumbra.query import parse
    from tests.oracle import p_geq_exact, p_within_exact

    query_id, a, b = join_query
    entry = api.get(f"/queries/{query_id}", headers=api.as_("viewer")).json()
    streams = parse_streams(entry["streams"])
    t0 = 1_795_554_015_600.0
    events = [parse_event({"stream": a, "id": "s-17", "ts": {"detected": t0, "template": "s1"},
                           "attrs": {"sector": 17, "depth_km": 12}}, streams),
              parse_event({"stream": b, "id": "a-17", "ts": {"detected": t0 + 1850, "template": "m1"},
                           "attrs": {"sector": 17}}, streams)]
    operator = build_operator(parse(entry["text"]), streams)
    (match,) = list(operator.feed(events).matches) + list(operator.flush().matches)
    (cursor,) = write_batch(store, keys, 1, {query_id: [{
        "events": match.events, "prob": match.prob, "times": match.times, "partition": match.partition,
        "records": match.records}]})[query_id]
    page = tab.page
    tab.sign_in(api.tokens["viewer"], f"alarms?query={query_id}")
    page.locator(f'#feed li[data-id="{cursor}"] a.why').click()
    page.wait_for_selector('[data-testid="join-formula"]')
    h_a, h_b = (e.histogram for e in events)
    within = float(p_within_exact(h_a.edges, h_a.probs, h_b.edges, h_b.probs, 2000))
    no_later = float(p_geq_exact(h_a.edges, h_a.probs, h_b.edges, h_b.probs, 2000))
    pct = lambda p: f"{p * 100:.2f}\u00a0%" if p < 1 else "100\u00a0%"  # noqa: E731 (format.js's percent)
    assert page.inner_text('[data-testid="explained-prob"]') == pct(within)
    formula = page.inner_text('[data-testid="join-formula"]')
    assert f"= {pct(within)}" in formula and pct(no_later) in formula, formula
    table = page.inner_text('[data-testid="explained-events"]')
    assert "sector 17" in table and "depth_km 12" in table and "s-17" in table and "template s1" in table
    chosen = page.inner_text('[data-testid="ranges"] tr.chosen')
    assert "is here" in chosen and {"lpr": "LPR", "sr": "SR", "rpr": "RPR"}[match.partition] in chosen
    assert page.get_attribute(f'abbr.term[title*="{ {"lpr": "left", "sr": "safe", "rpr": "right"}[match.partition] }"]',
                              "title")
    page.wait_for_selector("#ex-chart .main-svg")
    page.wait_for_selector("#ex-curve .main-svg")
    text = page.inner_text("#main")
    assert not re.search(r"\d[\d,.\u202f]{9,}", text), text           # no epoch-like number
    ticks = page.eval_on_selector_all("#ex-chart .xtick text, #ex-curve .xtick text", "els => els.map(e => e.textContent)")
    assert ticks and all(re.fullmatch(r"\d\d:\d\d:\d\d(\.\d+)?", t) for t in ticks), ticks
    tab.assert_clean()


def test_why_explains_a_lossy_match_over_imprecise_times_by_its_worlds(tab, api, store, keys):
    """A lossy match whose exit time is known to 3 instants, found by the core and written as
    the sink writes it: its explanation says the probability is a sum over the combinations
    of the events' instants, and gives the count and the probability."""
    from penumbra.engine import build_operator
    from penumbra.events import parse_event, parse_streams

    shelf, leave = unique("Shelf"), unique("Exit")
    for name in (shelf, leave):
        assert api.put(f"/streams/{name}", json={}, headers=api.as_("admin")).status_code == 200
    query_id = unique("lift-")
    text = f"SEQUENCE({shelf} x, {leave} z) WHERE x.tag = z.tag WITHIN 4 THRESHOLD 0.01"
    answer = api.post("/queries", json={"text": text, "id": query_id}, headers=api.as_("analyst"))
    assert answer.status_code == 201, answer.text
    streams = parse_streams({})
    events = [parse_event({"stream": shelf, "id": "x1", "ts": {"lo": 1, "hi": 2}, "attrs": {"tag": 7}}, streams),
              parse_event({"stream": leave, "id": "z1", "ts": {"lo": 3, "hi": 5}, "attrs": {"tag": 7}}, streams)]
    operator = build_operator(parse_query(text), streams)
    (match,) = list(operator.feed(events).matches) + list(operator.flush().matches)
    assert match.prob == pytest.approx(5 / 6, rel=1e-12)   # (1,3) (1,4) (2,3) (2,4) (2,5) of 6, W = 4
    (cursor,) = write_batch(store, keys, 1, {query_id: [{
        "events": match.events, "prob": match.prob, "times": match.times, "key": match.key,
        "records": match.records, "factors": match.factors}]})[query_id]
    page = tab.page
    tab.sign_in(api.tokens["viewer"], f"alarms?query={query_id}")
    page.locator(f'#feed li[data-id="{cursor}"] a.why').click()
    page.locator("#main", has_text="combinations").wait_for()
    text = page.inner_text("#main")
    assert "sum over 5 combinations" in text and "83.33\u00a0%" in text, text
    tab.assert_clean()
