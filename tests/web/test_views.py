"""Every view in a real Chromium at 1280 and 390 pixels: no console error, its charts
drawn (the inspector's LPR / SR / RPR and threshold, the health view's buffer bounds), no
horizontal scroll, no epoch number, and a visible focus ring.
"""

from __future__ import annotations

import json
import re
import time

import pytest

from tests.browser import wait_until

from .conftest import observation, write_batch


VIEWS = ("alarms", "queries", "tuner", "history", "inspector", "health")


@pytest.mark.parametrize("width", [1280, 390])
def test_every_view_renders_without_errors_and_fits(tab, api, store, keys, join_query, width):
    query_id, _, _ = join_query
    write_batch(store, keys, 1, {query_id: [{"events": {"A": "s-long-event-identifier-1", "B": "a-1"}, "prob": 0.91}]},
                {query_id: observation(0.6, [0.4], {"A": 2, "B": 1}, 1500.0)})
    store.xadd(keys.metrics, {"metrics": json.dumps({"batch": 1, "at": time.time(), "rows": 10, "duration_ms": 420,
                                                     "input_rate": 12.5, "processed_rate": 30.0,
                                                     "lag_entries": 0, "lag_seconds": 0.2})})
    page = tab.page
    page.set_viewport_size({"width": width, "height": 800})
    tab.sign_in(api.tokens["admin"], "alarms")
    for view in VIEWS:
        tab.open(f"{view}?query={query_id}")
        page.wait_for_selector(f'.tabs a[data-view="{view}"][aria-current="page"]')
        if view == "inspector":
            wait_until(page, "document.querySelector('#ins-chart')?.layout?.annotations?.length >= 3")
            labels = page.evaluate("document.querySelector('#ins-chart').layout.annotations.map(a => a.text)")
            assert {"<b>LPR</b>", "<b>SR</b>"} <= set(labels) and any("threshold" in t for t in labels)
        elif view == "health":
            wait_until(page, "document.querySelector('#c-buffers')?.data?.length === 4")
            # the bound it names: how far behind the watermark each side's buffer must keep events
            kept = page.evaluate("document.querySelector('#c-buffers').data.filter(t => t.yaxis === 'y2')"
                                 ".map(t => [t.name, t.y[t.y.length - 1]])")
            assert kept == [["A kept back (bound)", 40], ["B kept back (bound)", 60]], kept
            page.locator('[data-testid="verdict"]').wait_for()
        elif view == "tuner":
            wait_until(page, "document.querySelector('#tune-chart')?.data?.length === 1")
        else:
            page.wait_for_timeout(500)
        overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
        assert overflow <= 0, f"{view} scrolls sideways by {overflow} px at {width} px"
        # no epoch number anywhere: not in the view's text, not on a chart's ticks
        text = page.inner_text("#main")
        assert not re.search(r"\d[\d,.\u202f]{9,}", text), (view, text)
        ticks = page.eval_on_selector_all("#main .xtick text, #main .ytick text", "els => els.map(e => e.textContent)")
        assert not [t for t in ticks if re.search(r"\d[\d,.\u202f]{9,}", t)], (view, ticks)
        page.screenshot(path=str(tab_artifact(f"{view}-{width}.png")))
    # every element reached by Tab shows a visible focus ring
    tab.open("alarms")
    page.wait_for_selector('.tabs a[aria-current="page"]')
    page.keyboard.press("Tab")
    page.keyboard.press("Tab")
    outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    assert outline not in ("", "none")


def tab_artifact(name: str):
    from .conftest import ARTIFACTS

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS / name
