"""The History view in a real Chromium: a day of matches from the archive and the live
tail, charted, paged, filtered by key and downloaded; the tuner's backtest over it.
"""

from __future__ import annotations

import json
import re
import time

from contract.archive import ArchiveWriter
from tests.browser import wait_until


def test_the_history_view_pages_filters_charts_and_downloads_a_period(tab, api, store, keys, join_query, archive_root):
    """A day of matches, most only in the archive: the period's bars, its rows with clock
    times and keys, a key filter, a CSV download of the same rows; the tuner's backtest."""
    query_id, _, _ = join_query
    writer = ArchiveWriter(archive_root, "web-job")
    now = int(time.time() * 1000)
    written = []
    for batch in range(40):
        at = now - (40 - batch) * 30 * 60_000                 # every 30 minutes over the last 20 hours
        rows = [(json.dumps({"events": {"A": f"s{batch}.{n}", "B": f"a{batch}.{n}"}, "prob": 0.6 + n / 10}).encode(),
                 0, {"region": n}, 0.6 + n / 10) for n in range(3)]
        writer.write(batch, at, {query_id: rows}, {query_id: {"0.40": 2}})
        written += [(f"{at}-{n}", at, n) for n in range(3)]
    page = tab.page
    tab.sign_in(api.tokens["viewer"], f"history?query={query_id}")
    page.wait_for_selector("#hist-table tbody tr")
    wait_until(page, "document.querySelector('#hist-chart')?.data?.[0]?.y?.length > 0")
    bars = page.evaluate("document.querySelector('#hist-chart').data[0].y.reduce((a, b) => a + b, 0)")
    assert bars == len(written)
    assert "120 matches" in page.locator("#hist-total").inner_text()
    page.click("#hist-more")
    wait_until(page, f"document.querySelectorAll('#hist-table tbody tr').length === {len(written)}")
    ids = page.evaluate("[...document.querySelectorAll('#hist-table tbody tr')].map(r => r.dataset.match)")
    assert ids == [w[0] for w in written]
    first = page.locator("#hist-table tbody tr").first.inner_text()
    assert time.strftime("%H:%M:%S", time.gmtime(written[0][1] / 1000)) in first and "region 0" in first
    assert not re.search(r"\d[\d,.\u202f]{9,}", first), first
    page.fill("#hist-key", "region=2")
    page.click("#hist-form button[type=submit]")
    wait_until(page, "document.querySelectorAll('#hist-table tbody tr').length === 40")
    with page.expect_download() as download:
        page.click("#hist-csv")
    lines = open(download.value.path()).read().splitlines()
    assert len(lines) == 41 and lines[0].replace('"', "").startswith("id,at,time")
    # the tuner's backtest over the archive's last day: matches and alarms at each threshold
    tab.open(f"tuner?query={query_id}")
    page.wait_for_selector("#tune-batches")
    page.select_option("#tune-batches", "last:24h")
    wait_until(page, "document.querySelector('#tune-chart')?.data?.length === 2")
    assert "Backtest over the last day" in page.locator("#tune-window").inner_text()
