"""Notifications in a real Chromium: a browser notification for a critical alarm that
opens while the tab is hidden, and the Alarms view's Notifications panel (admins manage
contact points and routing rules; analysts see the deliveries given up on).
"""

from __future__ import annotations

import json
import time

from contract.alarms import instance_id
from tests.browser import wait_until

from .conftest import unique, write_batch


def test_a_critical_alarm_opening_while_the_tab_is_hidden_raises_a_browser_notification(tab, api, store, keys):
    page = tab.page
    # the browser's Notification API, allowed, and a hidden tab: as a user who allowed it and looks elsewhere
    page.add_init_script("""
        window.__notes = [];
        window.Notification = class { constructor(title, options) { window.__notes.push({title, ...options}); }
                                      static permission = "granted"; static requestPermission() { return "granted"; } };
        Object.defineProperty(document, "hidden", {get: () => true});""")
    made = {}
    for priority in ("critical", "warning"):
        a, b = unique("NA"), unique("NB")
        for stream in (a, b):
            api.put(f"/streams/{stream}", json={"pi": 20}, headers=api.as_("admin"))
        made[priority] = api.post("/queries", headers=api.as_("analyst"), json={
            "text": f"SELECT * FROM {a} A, {b} B WHERE WINDOW(A, B) = 10 AND A.k = B.k WITH THRESHOLD 0.5",
            "priority": priority, "name": f"{priority} watch"}).json()["id"]
    tab.sign_in(api.tokens["viewer"], "alarms")
    write_batch(store, keys, 1, {made["warning"]: [{"events": {"A": "w1", "B": "w2"}, "prob": 0.9, "key": {"k": 1}}],
                                 made["critical"]: [{"events": {"A": "c1", "B": "c2"}, "prob": 0.875, "key": {"k": 4}}]})
    wait_until(page, "window.__notes.length >= 1")
    time.sleep(0.5)
    notes = page.evaluate("window.__notes")
    assert [(n["title"], n["tag"]) for n in notes] == [("Critical alarm: critical watch (k 4)",
                                                        instance_id(made["critical"], {"k": 4}))]
    assert "87.5 %" in notes[0]["body"]
    # more matches of the same open instance notify nobody again
    write_batch(store, keys, 2, {made["critical"]: [{"events": {"A": "c3", "B": "c4"}, "prob": 0.9, "key": {"k": 4}}]})
    page.locator(f'.group[data-alarm="{instance_id(made["critical"], {"k": 4})}"] [data-testid="count"]',
                 has_text="2").wait_for()
    assert page.evaluate("window.__notes.length") == 1


def test_admins_manage_contact_points_and_rules_and_see_failed_deliveries(tab, api, store, keys, join_query):
    query_id, _, _ = join_query
    store.xadd(keys.delivery_failures, {"id": "e-1:c-gone", "contact": "c-gone", "reason": "answered 500",
                                        "attempts": 9, "created": time.time() - 900, "at": time.time(),
                                        "body": json.dumps({"event": "opened", "alarm": {"id": f"{query_id}:abc"}})})
    page = tab.page
    tab.sign_in(api.tokens["admin"], "alarms")
    page.click("#notify-panel > summary")
    page.locator("#failed tbody tr", has_text="answered 500").first.wait_for()
    assert "9" in page.locator("#failed tbody tr", has_text="answered 500").first.inner_text()
    page.fill("#c-name", "night shift pager")
    page.fill("#c-url", "http://127.0.0.1:9/hook")
    page.click("#contact-form button[type=submit]")
    page.locator("#contact-secret", has_text="shown once").wait_for()
    page.locator("#contacts li", has_text="night shift pager").wait_for()
    page.select_option("#r-query", query_id)
    page.select_option("#r-priority", "critical")
    page.click("#rule-form button[type=submit]")
    page.locator("#rules li", has_text=query_id).wait_for()
    rules = [r for r in api.get("/routing-rules", headers=api.as_("admin")).json()["items"] if r["queries"] == [query_id]]
    assert len(rules) == 1 and rules[0]["priorities"] == ["critical"]
    # an analyst sees the failures, not the contact points
    page.click("#signout")
    tab.sign_in(api.tokens["analyst"], "alarms")
    page.click("#notify-panel > summary")
    page.locator("#failed tbody tr", has_text="answered 500").first.wait_for()
    assert page.is_hidden("#contact-form")
