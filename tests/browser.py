"""What the browser tests share (tests/web against the service, tests/e2e against the whole
system): Debian's Chromium and its flags, Playwright's waits, and a page that records what
it must not do (console errors, uncaught exceptions, requests to another origin)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright (the test extra)")

CHROMIUM = Path("/usr/bin/chromium")
BROWSER_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run"]
#: Playwright's waits, milliseconds (a shared two-core machine is slow at times).
WAIT_MS = 30_000


def wait_until(page, expression: str, timeout: float = WAIT_MS / 1000):
    """Polls a JavaScript expression until it is truthy. (Playwright's wait_for_function
    evaluates its predicate with eval inside the page, which the dashboard's
    Content-Security-Policy forbids; page.evaluate goes through the debugger instead.)"""
    deadline = time.monotonic() + timeout
    while True:
        value = page.evaluate(expression)
        if value:
            return value
        assert time.monotonic() < deadline, f"still false after {timeout:g} s: {expression}"
        time.sleep(0.1)


def failed(request) -> bool:
    """Whether the test's set-up or body failed (tests/conftest.py), asked in a fixture's teardown."""
    return getattr(request.node, "failed", False)


class Tab:
    """A page with what it logged: console errors, uncaught exceptions, foreign requests."""

    def __init__(self, page, base_url: str):
        self.page = page
        self.base_url = base_url
        self.errors: list[str] = []
        self.foreign: list[str] = []
        self.allowed: list[re.Pattern] = []
        origin = base_url.split("://", 1)[1]
        page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(f"uncaught: {e}"))
        page.on("request", lambda r: None if r.url.split("://", 1)[-1].startswith(origin)
                or r.url.startswith(("data:", "blob:")) else self.foreign.append(r.url))
        page.on("websocket", lambda ws: None if ws.url.split("://", 1)[-1].startswith(origin)
                else self.foreign.append(ws.url))

    def allow(self, pattern: str) -> None:
        """A console error this test provokes on purpose (a refused token)."""
        self.allowed.append(re.compile(pattern))

    def open(self, view: str = "alarms") -> None:
        self.page.goto(f"{self.base_url}/#/{view}")

    def sign_in(self, token: str, view: str = "alarms") -> None:
        self.open(view)
        self.page.fill("#token", token)
        self.page.click("#signin-form button[type=submit]")
        self.page.wait_for_selector("#shell:not([hidden])")
        self.page.wait_for_selector('#connection[data-state="live"]')

    def unexpected_errors(self) -> list[str]:
        return [e for e in self.errors if not any(p.search(e) for p in self.allowed)]

    def assert_clean(self) -> None:
        assert not self.unexpected_errors(), self.unexpected_errors()
        assert not self.foreign, f"requests left the app's origin: {self.foreign}"
