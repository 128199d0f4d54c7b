"""Fixtures of the dashboard tests (a file per view, ``test_<view>.py``; the shell's sign-in
and tabs in test_session.py, every view at two widths in test_views.py): one real
redis-server and one ``python -m backend`` on a free loopback port per session (stopped by
their process ids), one Debian Chromium driven by Playwright per session, and a fresh
browser context per test that records console errors, uncaught exceptions and any request
to another origin, fails its test on any of them, and when its test fails leaves a
screenshot under var/test-artifacts/web/.

Results are written into Redis in the job's shape (as tests/service does, and
``observation`` here for a join's per-batch observations), so no Spark job runs.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from penumbra.cli.processes import ApiServer
from tests.browser import CHROMIUM, Tab, WAIT_MS, failed, sync_api
from tests.service.conftest import (ADMIN_TOKEN, keys, redis_server, store, unique,  # noqa: F401 - fixtures reused
                                    write_batch)

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "var" / "test-artifacts" / "web"

if not CHROMIUM.exists():
    pytest.skip("Debian's chromium is not installed (scripts/system-deps.sh installs it)", allow_module_level=True)


@pytest.fixture(scope="session")
def archive_root(tmp_path_factory) -> Path:
    """The archive the service reads (the tests write it as the job would)."""
    return tmp_path_factory.mktemp("archive")


@pytest.fixture(scope="session")
def base_url(redis_server, archive_root, tmp_path_factory):  # noqa: F811
    """http:// URL of the service (API, websocket and dashboard) over the session's Redis."""
    server = ApiServer(redis_server.url, log=tmp_path_factory.mktemp("web") / "server.log", admin_token=ADMIN_TOKEN,
                       ws_poll=0.5, auth_failure_limit=100_000,
                       write_rate_limit=100_000, archive=archive_root)
    try:
        yield server.start(timeout=60).url
    finally:
        server.stop()


@pytest.fixture(scope="session")
def api(base_url):
    """An HTTP client of the API; ``api.as_(role)`` gives the headers of a token of that role."""
    client = httpx.Client(base_url=f"{base_url}/api", timeout=15)
    tokens = {"admin": ADMIN_TOKEN}
    for role in ("viewer", "analyst"):
        answer = client.post("/tokens", json={"role": role, "label": f"web-{role}"},
                             headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
        assert answer.status_code == 201, answer.text
        tokens[role] = answer.json()["token"]
    client.tokens = tokens
    client.as_ = lambda role: {"Authorization": f"Bearer {tokens[role]}"}
    yield client
    client.close()


@pytest.fixture
def tab(browser, base_url, request):
    context = browser.new_context(viewport={"width": 1280, "height": 800}, locale="en-US", timezone_id="UTC")
    context.set_default_timeout(WAIT_MS)
    page = context.new_page()
    opened = Tab(page, base_url)
    try:
        yield opened
    finally:
        if failed(request):
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            try:
                page.screenshot(path=str(ARTIFACTS / f"{request.node.name}.png"), full_page=True)
            except sync_api.Error:
                pass
        context.close()
    opened.assert_clean()


# ---- what the job would write


SEISMIC = json.loads((ROOT / "examples" / "seismic" / "streams.json").read_text())


def observation(threshold: float, near: list[float], buffers: dict, watermark: float) -> dict:
    """A join's per-batch observations as the job writes them (combined over key groups)."""
    # buffer_bounds: per side in the query's order, the max time below which a buffered event is obsolete
    return {"buffers": buffers, "buffer_bounds": [watermark - 40 - 20 * k for k in range(len(buffers))],
            "watermark": watermark,
            "threshold": threshold, "floor": 0.3, "groups": 1,
            "counters": {"near_misses": len(near), "late": 1, "evicted": 2, "matches": 0},
            "near_misses": [{"prob": p} for p in near],
            "partitions": [{"stream": "A", "id": "s-1", "lpr": [watermark - 100, watermark],
                            "sr": [watermark, watermark + 50], "rpr": [watermark + 50, None]}]}


@pytest.fixture
def join_query(api):
    """A registered join over two fresh streams with the seismic example's templates:
    (query id, stream A, stream B)."""
    a, b = unique("Seis"), unique("Acou")
    for name, params in ((a, SEISMIC["seismic"]), (b, SEISMIC["acoustic"])):
        assert api.put(f"/streams/{name}", json=params, headers=api.as_("admin")).status_code == 200
    query_id = unique("quake-")
    text = f"SELECT * FROM {a} A, {b} B\nWHERE WINDOW(A, B) = 2000\nWITH THRESHOLD 0.6"
    answer = api.post("/queries", json={"text": text, "id": query_id, "name": f"Quakes {query_id[-4:]}"},
                      headers=api.as_("analyst"))
    assert answer.status_code == 201, answer.text
    return query_id, a, b
