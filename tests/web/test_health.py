"""The Buffers and health view in a real Chromium: its verdict never says keeping up
without a recent micro-batch, an outage is a gap in its lines, and each restart is listed
with its cause.
"""

from __future__ import annotations

import time

from tests.browser import wait_until


def test_health_never_says_keeping_up_without_a_recent_micro_batch_and_shows_an_outage_as_a_gap(tab, api):
    page = tab.page
    tab.sign_in(api.tokens["viewer"], "health")
    said = page.evaluate("""async () => {
        const { verdict, withGaps } = await import('/static/js/views/health.js');
        const alive = (age, lag) => ({ status: "ok", redis: true, job: { alive: true, last_batch_age: age },
                                       lag_seconds: 0, lag_entries: lag });
        const series = withGaps([{ at: 0 }, { at: 1 }, { at: 2 }, { at: 200 }, { at: 201 }], 30);
        return { none: verdict(alive(null, 0)), waiting: verdict(alive(null, 40)), stalled: verdict(alive(120, 5)),
                 idle: verdict(alive(300, 0)), fresh: verdict(alive(0.4, 0)), gaps: series.map((m) => !!m.gap) };
    }""")
    assert said["fresh"] == ["Keeping up", "good"]
    assert said["none"][1] == "meh" and "no micro-batch yet" in said["none"][0]
    assert said["waiting"] == ["No micro-batch yet; 40 events wait", "meh"]
    assert said["stalled"][1] == "bad" and said["stalled"][0].startswith("No micro-batch for 2 min")
    assert said["idle"][1] == "good" and "idle" in said["idle"][0]
    assert said["gaps"] == [False, False, False, True, False, False]      # a break between 2 and 200


def test_health_shows_each_restart_with_its_cause(tab, api, store, keys):
    from contract.entries import restart_entry

    store.delete(keys.restarts)
    page = tab.page
    tab.sign_in(api.tokens["viewer"], "health")
    page.locator('[data-testid="restarts"]', has_text="No part of Penumbra was restarted").wait_for()
    now = time.time()
    store.xadd(keys.restarts, restart_entry("job", 4242, "was killed by SIGKILL", now - 30, 125.0, 1, 1))
    store.xadd(keys.restarts, restart_entry("redis", 77, "exited with status 1", now - 5, 3.2, 2, 2))
    rows = page.locator('[data-testid="restarts"] tbody tr')
    wait_until(page, "document.querySelectorAll('[data-testid=restarts] tbody tr').length === 2")
    newest, older = rows.nth(0).inner_text(), rows.nth(1).inner_text()
    assert "Redis" in newest and "exited with status 1" in newest and "2 failures in a row" in newest
    assert "Spark job" in older and "pid 4242" in older and "was killed by SIGKILL" in older
    assert "2 min 5 s" in older and "1.0 s" in older
    store.delete(keys.restarts)
