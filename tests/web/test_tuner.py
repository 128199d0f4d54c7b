"""The threshold tuner in a real Chromium: the preview moving with the slider before
anything is applied, and applying it (registry and audit stream); verdicts from the alarm
cards and the feed filling its reliability diagram.
"""

from __future__ import annotations

import json

from contract.alarms import instance_id
from tests.browser import wait_until

from .conftest import observation, write_batch


def test_resolving_with_a_verdict_fills_the_tuners_reliability_diagram(tab, api, store, keys, join_query):
    query_id, _, _ = join_query
    ids = write_batch(store, keys, 1, {query_id: [
        {"events": {"A": f"a{n}", "B": f"b{n}"}, "prob": p, "key": {"region": n}}
        for n, p in enumerate((0.95, 0.9, 0.65, 0.62))]})[query_id]
    for cursor, said in zip(ids[1:3], ("real", "false")):
        assert api.post(f"/queries/{query_id}/verdicts", json={"match": cursor, "verdict": said},
                        headers=api.as_("analyst")).status_code == 201
    page = tab.page
    tab.sign_in(api.tokens["analyst"], f"alarms?query={query_id}")
    card = page.locator(f'.group[data-alarm="{instance_id(query_id, {"region": 0})}"]')
    card.locator("select[data-verdict]").select_option("real")
    card.locator('button[data-act="resolve"]').click()
    card.locator("text=(real)").wait_for()
    # one more match judged from the feed: real
    row = page.locator(f'#feed li[data-id="{ids[3]}"]')
    row.locator('button[data-judge="real"]').click()
    row.locator(".judged", has_text="judged real").wait_for()
    tab.open(f"tuner?query={query_id}")
    page.select_option("#tune-query", query_id)
    page.locator("#calib-summary", has_text="3 real, 1 false").wait_for()
    wait_until(page, "document.querySelector('#calib-chart')?.data?.length === 2")
    page.fill("#calib-target", "100")
    page.dispatch_event("#calib-target", "change")
    page.locator("#calib-threshold", has_text="90.0 %").wait_for()   # both at 90 % and above were real
    shown = page.evaluate("document.querySelector('#calib-chart').data[0]")
    # the 62 % (real) and 65 % (false) matches share a bin: half real
    assert [(round(x), round(y)) for x, y in sorted(zip(shown["x"], shown["y"]))] == [(65, 50), (95, 100)]


def test_the_tuner_previews_with_the_slider_and_applies(tab, api, store, keys, join_query):
    query_id, _, _ = join_query
    for batch in range(1, 11):
        write_batch(store, keys, batch,
                    {query_id: [{"events": {"A": f"s{batch}-{n}", "B": f"b{batch}-{n}"}, "prob": 0.6 + 0.04 * n}
                                for n in range(10)]},
                    {query_id: observation(0.6, [0.31 + 0.03 * n for n in range(10)], {"A": 5, "B": 3}, 1000 + batch)})
    page = tab.page
    tab.sign_in(api.tokens["analyst"], f"tuner?query={query_id}")
    wait_until(page, "document.querySelector('#tune-chart')?.data?.length === 1")
    preview = page.locator('[data-testid="preview-count"]')
    preview.wait_for()
    assert page.input_value("#tune-slider") == "60"
    at_current = preview.inner_text()
    # the slider by keyboard: 20 steps of half a percent up
    page.focus("#tune-slider")
    for _ in range(20):
        page.keyboard.press("ArrowRight")
    page.locator("#tune-value", has_text="70.0").wait_for()
    assert preview.inner_text() != at_current
    assert page.evaluate("document.querySelector('#tune-chart').layout.shapes[0].x0") == 70
    # nothing applied yet
    assert json.loads(store.hget(keys.queries, query_id))["threshold"] == 0.6
    page.click("#tune-apply")
    page.locator("#tune-applied", has_text="Applied 70.0").wait_for()
    assert json.loads(store.hget(keys.queries, query_id))["threshold"] == 0.7
    audit = store.xrevrange(keys.audit, count=5)
    assert any(f[b"subject"].decode() == query_id and json.loads(f[b"details"]) == {"threshold": 0.7}
               for _, f in audit)
