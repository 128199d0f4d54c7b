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
