"""Fixtures every test folder may use."""

from __future__ import annotations

import pytest


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """``item.failed`` once a phase of the test failed (its set-up or its body), for fixtures
    that leave something behind only for a failure (tests/browser.py's ``failed``)."""
    report = yield
    if report.failed:
        item.failed = True
    return report


#: what stops once a test is torn down (by node id): session fixtures no later test uses
_after: dict[str, list] = {}


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    try:
        return (yield)
    finally:
        for stop in _after.pop(item.nodeid, ()):
            stop()


def stop_after_last_user(request, stop) -> None:
    """``stop()`` runs once the session's last test using this fixture is torn down (the
    tests after it do not share the machine with what it runs), also when that test fails."""
    users = [item for item in request.session.items if request.fixturename in getattr(item, "fixturenames", ())]
    if users:
        _after.setdefault(users[-1].nodeid, []).append(stop)


@pytest.fixture(scope="session")
def demo(request, tmp_path_factory):
    """The session's one ``penumbra up --demo`` (tests/demo.py), ready; everything it
    started is stopped by pid after the last test that uses it, or at the end of the
    session, also after a failure."""
    from tests.demo import launch

    running = launch(tmp_path_factory.mktemp("demo-home"))
    stop_after_last_user(request, running.up.kill_everything)
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


@pytest.fixture(scope="session", autouse=True)
def background(request, tmp_path_factory):
    """The long runs the session's tests ask for (``@pytest.mark.background``,
    tests/background.py), started with the session's first test; None when none asks.
    Everything they started is stopped by process group at the end of the session."""
    from tests.background import start

    lanes = start(request.session.items, lambda name: tmp_path_factory.mktemp(f"background-{name}"))
    try:
        yield lanes
    finally:
        if lanes is not None:
            lanes.stop()
