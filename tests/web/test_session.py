"""The dashboard's shell in a real Chromium: sign-in with a bad and a good token, what a
viewer and an analyst see (and the server refuses), the session kept over a reload and
forgotten on sign-out, tabs of one browser sharing the session (also by a late answer),
and the new alarms counted in the title and on the Alarms tab from every view.
"""

from __future__ import annotations

from contract.alarms import instance_id
from tests.browser import wait_until

from .conftest import write_batch


def test_sign_in_roles_and_session(tab, api, store, keys, join_query):
    query_id, _, _ = join_query
    write_batch(store, keys, 1, {query_id: [{"events": {"A": "s-1", "B": "a-1"}, "prob": 0.8}]})
    page = tab.page

    # a refused token: a message, still signed out (the 401 is the one console error expected)
    tab.allow(r"status of 401")
    tab.open()
    page.fill("#token", "pn_not-a-token")
    page.press("#token", "Enter")
    page.wait_for_selector("#signin-error:not([hidden])")
    assert "not valid" in page.text_content("#signin-error")
    assert page.is_hidden("#shell")

    # a viewer sees everything and no control that changes anything
    page.fill("#token", api.tokens["viewer"])
    page.press("#token", "Enter")
    page.wait_for_selector('#connection[data-state="live"]')
    assert page.text_content('[data-testid="role"]') == "viewer"
    card = page.locator(f'.group[data-query="{query_id}"]')
    card.wait_for()
    assert card.locator("button").count() == 0 or not card.locator("button").first.is_visible()
    tab.open("queries")
    page.locator(f'tr[data-query="{query_id}"]').wait_for()
    assert page.is_hidden("#register")
    assert page.locator('tr button[data-act="delete"]:visible').count() == 0
    assert page.locator('tr button[data-act="pause"]:visible').count() == 0
    tab.open("tuner")
    page.wait_for_selector("#tune-slider")
    assert page.is_hidden("#tune-apply")
    # ... and the server refuses them anyway
    refused = api.patch(f"/queries/{query_id}", json={"threshold": 0.9}, headers=api.as_("viewer"))
    assert refused.status_code == 403

    # the token is kept for the tab's session: a reload stays signed in
    page.reload()
    page.wait_for_selector('#connection[data-state="live"]')
    assert page.text_content('[data-testid="role"]') == "viewer"
    assert page.evaluate("sessionStorage.getItem('penumbra.token')") == api.tokens["viewer"]

    # an analyst gets the controls; signing out forgets the token
    page.click("#signout")
    page.wait_for_selector("#signin:not([hidden])")
    assert page.evaluate("sessionStorage.getItem('penumbra.token')") is None
    page.fill("#token", api.tokens["analyst"])
    page.press("#token", "Enter")
    page.wait_for_selector('#connection[data-state="live"]')
    assert page.text_content('[data-testid="role"]') == "analyst"
    tab.open("queries")
    page.wait_for_selector("#register", state="visible")
    assert page.locator(f'tr[data-query="{query_id}"] button[data-act="pause"]').is_visible()


def test_a_second_tab_shares_the_session_and_signing_out_signs_out_every_tab(tab, api):
    page = tab.page
    tab.sign_in(api.tokens["analyst"], "alarms")
    second = page.context.new_page()
    second.goto(f"{tab.base_url}/#/queries")
    second.wait_for_selector("#shell:not([hidden])")           # no sign-in asked
    assert second.text_content('[data-testid="role"]') == "analyst"
    page.click("#signout")
    page.wait_for_selector("#signin:not([hidden])")
    second.wait_for_selector("#signin:not([hidden])")
    assert "another tab" in second.text_content("#signin-error")
    assert second.evaluate("sessionStorage.getItem('penumbra.token')") is None
    second.close()


def test_a_new_tab_takes_a_late_answer_from_another_tab(tab, api):
    """A busy tab may answer after the new one stopped waiting and showed the sign-in form:
    the late answer still signs the new tab in."""
    page = tab.page
    tab.open("alarms")
    page.wait_for_selector("#signin:not([hidden])")
    second = page.context.new_page()
    second.goto(f"{tab.base_url}/#/queries")
    second.wait_for_selector("#signin:not([hidden])")          # no tab answered in time
    page.evaluate("(token) => new BroadcastChannel('penumbra.session').postMessage({type: 'token', token})",
                  api.tokens["analyst"])
    second.wait_for_selector("#shell:not([hidden])")
    assert second.text_content('[data-testid="role"]') == "analyst"
    assert second.evaluate("sessionStorage.getItem('penumbra.token')") == api.tokens["analyst"]
    second.close()


def test_new_alarms_are_counted_in_the_title_and_on_the_alarms_tab_from_every_view(tab, api, store, keys,
                                                                                    join_query):
    query_id, _, _ = join_query
    page = tab.page
    tab.sign_in(api.tokens["analyst"], "health")
    before, cursor = 0, None
    while True:                                   # every new instance of the session, page by page
        page_of = api.get("/alarms", params={"state": "new", "limit": 1000, **({"next": cursor} if cursor else {})},
                          headers=api.as_("viewer")).json()
        before += len(page_of["items"])
        cursor = page_of["next"]
        if cursor is None:
            break
    write_batch(store, keys, 1, {query_id: [{"events": {"A": f"t{n}", "B": f"u{n}"}, "prob": 0.8, "key": {"zone": n}}
                                            for n in range(3)]})
    wait_until(page, f"document.title.startsWith('({before + 3}) ')")
    assert page.title().endswith("Buffers and health · Penumbra")
    badge = page.locator('.tabs a[data-view="alarms"] [data-testid="new-alarms"]')
    assert badge.inner_text() == (str(before + 3) if before + 3 <= 999 else "999+")
    api.post(f"/alarms/{instance_id(query_id, {'zone': 1})}/acknowledge", headers=api.as_("analyst"))
    wait_until(page, f"document.title.startsWith('({before + 2}) ')")
