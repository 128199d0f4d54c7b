"""The Queries view in a real Chromium: the editor marking a query's error at the parser's
line and column, fixed, registered, paused and deleted; a quarantined query's error and its
retry; the three templates built from the live streams and validating; an attribute no
event carried warned of, and the list flagging silent sources.
"""

from __future__ import annotations

import json
import time

from contract import Registry

from .conftest import unique


def test_a_bad_query_is_marked_at_its_line_and_column_then_registered(tab, api, store, keys, join_query):
    _, a, b = join_query
    page = tab.page
    tab.sign_in(api.tokens["analyst"], "queries")
    text = page.locator("#query-text")
    text.click()
    page.keyboard.type(f"SELECT * FROM {a} A, {b} B\nWHERE WINDOW(A, B) 2000")
    status = page.locator("#validation")
    status.locator("text=Line 2").wait_for()
    expected = api.post("/validate", json={"text": text.input_value()}, headers=api.as_("viewer")).json()
    assert expected["valid"] is False and expected["line"] == 2
    assert f"Line 2, column {expected['column']}" in status.inner_text()
    mark = page.locator("#backdrop mark.err")
    assert (mark.get_attribute("data-line"), mark.get_attribute("data-column")) == ("2", str(expected["column"]))
    # the mark sits on that character: the text before it is everything up to line 2, column c
    before = page.evaluate("(() => { const m = document.querySelector('#backdrop mark.err');"
                           " let n = 0; for (const node of m.parentNode.childNodes) { if (node === m) break;"
                           " n += node.textContent.length; } return n; })()")
    lines = text.input_value().split("\n")
    assert before == len(lines[0]) + 1 + expected["column"] - 1
    assert "^" in page.inner_text("#pointer")

    # fixed: valid, marked no more, and registered
    text.fill(f"SELECT * FROM {a} A, {b} B\nWHERE WINDOW(A, B) = 2000\nWITH THRESHOLD 0.7")
    status.locator("text=Valid join query").wait_for()
    assert page.locator("#backdrop mark.err").count() == 0
    query_id = unique("fixed-")
    page.fill("#query-id", query_id)
    page.click("#register-button")
    row = page.locator(f'tr[data-query="{query_id}"]')
    row.wait_for()
    assert "70.0" in row.inner_text()
    assert json.loads(store.hget(keys.queries, query_id))["threshold"] == 0.7

    # pause, then delete with confirmation
    row.locator('button[data-act="pause"]').click()
    row.locator("text=Paused").wait_for()
    assert json.loads(store.hget(keys.queries, query_id))["paused"] is True
    row.locator('button[data-act="delete"]').click()
    page.click("#confirm-ok")
    row.wait_for(state="detached")
    assert store.hget(keys.queries, query_id) is None


def test_a_quarantined_query_shows_its_error_on_queries_and_health_and_is_retried(tab, api, store, keys,
                                                                                  join_query):
    query_id, _, _ = join_query
    registry = Registry(store, keys)
    entry = registry.query(query_id)
    assert registry.fail(query_id, "MemoryError: the operator ran out of memory",
                         seen_version=entry["version"]) is not None
    page = tab.page
    tab.sign_in(api.tokens["analyst"], "health")
    tile = page.locator("#stats .card", has_text="Failed queries")
    tile.locator(".v.bad", has_text=entry["name"]).wait_for()
    tab.open("queries")
    row = page.locator(f'tr[data-query="{query_id}"]')
    row.locator("text=Failed").wait_for()
    assert "MemoryError: the operator ran out of memory" in row.inner_text()
    assert row.locator('button[data-act="pause"]').count() == 0
    row.locator('button[data-act="retry"]').click()
    row.locator("text=Running").wait_for()
    assert "failed" not in json.loads(store.hget(keys.queries, query_id))
    assert api.get("/health").json()["failed_queries"] == 0


def test_templates_of_the_three_forms_validate(tab, api):
    """Built from the registered streams, each form validates (streams of its own here, so
    the test does not depend on what others registered)."""
    for name, params in ((unique("Tf"), {"templates": {"t1": {"edges": [0, 100], "probs": [1.0]}}}),
                         (unique("Tf"), {"templates": {"t1": {"edges": [0, 100], "probs": [1.0]}}}),
                         (unique("Tf"), {"miss_prob": 0.1})):
        assert api.put(f"/streams/{name}", json={**params, "max_delay": 1000}, headers=api.as_("admin")).status_code == 200
    page = tab.page
    tab.sign_in(api.tokens["analyst"], "queries")
    for form, kind in (("join", "join"), ("pattern", "pattern"), ("sequence", "sequence")):
        page.click(f'button[data-template="{form}"]')
        page.locator("#validation", has_text=f"Valid {kind} query").wait_for()


def test_the_editor_warns_of_an_attribute_never_seen_and_the_list_flags_silent_sources(tab, api, store, keys,
                                                                                      join_query):
    query_id, a, b = join_query
    events = [{"stream": a, "id": "ed1", "ts": {"detected": 1000, "template": "s1"}, "attrs": {"region": "north"}}]
    answer = api.post("/events", json=events, headers=api.as_("analyst"))
    assert answer.status_code == 202, answer.text
    page = tab.page
    tab.sign_in(api.tokens["analyst"], "queries")
    page.fill("#query-text", f"SELECT * FROM {a} A, {b} B\nWHERE WINDOW(A, B) = 2000 AND A.regoin = B.region\n"
                             "WITH THRESHOLD 0.6")
    status = page.locator("#validation")
    status.locator("text=Line 2, column 31").wait_for()
    assert "regoin" in status.inner_text() and "did you mean 'region'" in status.inner_text()
    assert f"No event of {b.casefold()} has arrived yet" in status.inner_text()
    assert page.locator("#backdrop mark.err").get_attribute("data-line") == "2"
    # the list: the query's silent source is flagged, the one just heard from is not
    flag = page.locator(f'tr[data-query="{query_id}"] [data-testid="idle"]')
    flag.wait_for()
    assert f"{b.casefold()}: no event yet" in flag.inner_text() and a.casefold() not in flag.inner_text()
    # Health lists the sources the same way
    tab.open("health")
    silent = page.locator(f'#sources tr[data-stream="{b.casefold()}"]')
    silent.wait_for()
    assert "none yet" in silent.inner_text() and "idle-row" in silent.get_attribute("class")
    heard = page.locator(f'#sources tr[data-stream="{a.casefold()}"]')
    assert "⚠" not in heard.inner_text() and (heard.get_attribute("class") or "") == ""


def test_templates_are_built_from_the_live_streams_and_join_on_their_key(tab, api):
    """Two fresh streams with templates, their events carrying a sector: the Join template
    reads them (the most recently heard from) and joins them on sector, and validates."""
    a, b = unique("Tpa"), unique("Tpb")
    template = {"templates": {"t1": {"edges": [0, 200, 400], "probs": [0.5, 0.5]}}, "max_delay": 1000}
    for name in (a, b):
        assert api.put(f"/streams/{name}", json=template, headers=api.as_("admin")).status_code == 200
    now = time.time() * 1000
    events = [{"stream": name, "id": f"{name}-1", "ts": {"detected": now, "template": "t1"},
               "attrs": {"sector": 4, "gain": 1.5}} for name in (a, b)]
    assert api.post("/events", json=events, headers=api.as_("analyst")).status_code in (200, 202)
    page = tab.page
    tab.sign_in(api.tokens["analyst"], "queries")
    page.locator(f'#streams button[data-stream="{a}"]').wait_for()
    page.click('button[data-template="join"]')
    text = page.input_value("#query-text")
    assert f"FROM {b} A, {a} B" in text or f"FROM {a} A, {b} B" in text, text
    assert "A.sector = B.sector" in text and "WINDOW(A, B) = 2000" in text, text
    page.locator("#validation", has_text="✓ Valid join query").wait_for()
