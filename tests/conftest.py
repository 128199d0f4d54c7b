"""Fixtures every test folder may use."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def demo(tmp_path_factory):
    """The session's one ``penumbra up --demo`` (tests/demo.py), ready; everything it
    started is stopped by pid at the end of the session, also after a failure."""
    from tests.demo import launch

    running = launch(tmp_path_factory.mktemp("demo-home"))
    try:
        yield running.ready()
    finally:
        running.up.kill_everything()


@pytest.fixture(scope="session")
def browser():
    """Debian's Chromium driven by Playwright, one per session (Playwright's sync API runs
    one instance per thread): the dashboard tests of tests/web/ and tests/e2e/ share it."""
    from tests.browser import BROWSER_ARGS, CHROMIUM, sync_api

    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=BROWSER_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()
