"""backend/web.py without a browser: the page, its files and Plotly.js from the app's own
origin, the page's Content-Security-Policy (on every HTML answer of the app, the docs
included), and the API's JSON errors left as they were."""

from __future__ import annotations

import base64
import hashlib

import pytest
from fastapi.testclient import TestClient

from backend import Settings, create_app
from backend.web import FRONTEND, plotly_js
from tests.service.conftest import ADMIN_TOKEN, redis_server  # noqa: F401 - fixture reused


@pytest.fixture(scope="module")
def client(redis_server):  # noqa: F811
    with TestClient(create_app(Settings(redis_url=redis_server.url, admin_token=ADMIN_TOKEN))) as test_client:
        yield test_client


def test_the_page_and_its_policy(client):
    answer = client.get("/")
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/html")
    assert answer.text == (FRONTEND / "index.html").read_text()
    policy = answer.headers["content-security-policy"]
    assert "default-src 'self'" in policy and "script-src 'self'" in policy and "connect-src 'self'" in policy
    assert "http" not in policy  # no other origin anywhere
    assert client.head("/").status_code == 200


def test_modules_and_plotly_come_from_the_app(client):
    module = client.get("/static/js/app.js")
    assert module.status_code == 200 and "javascript" in module.headers["content-type"]
    assert module.headers["x-content-type-options"] == "nosniff"
    bundle = client.get("/static/plotly.min.js")
    assert bundle.status_code == 200 and "javascript" in bundle.headers["content-type"]
    assert bundle.content == plotly_js().read_bytes()


def test_no_module_loads_from_another_origin():
    for path in FRONTEND.rglob("*"):
        if path.suffix in (".js", ".html", ".css"):
            text = path.read_text()
            assert "https://" not in text and "http://" not in text, path


def test_the_api_still_answers_json_errors(client):
    assert client.get("/api/nowhere").json()["error"]["message"]
    refused = client.post("/")
    assert refused.status_code == 405 and "error" in refused.json()
    assert client.get("/static/missing.js").status_code == 404
    assert all(not path.startswith("/static") and path != "/" for path in client.get("/openapi.json").json()["paths"])


def html_routes(client) -> list[str]:
    """Every GET route of the app without path parameters, and the page's copy under /static."""
    paths = {route.path for route in client.app.routes
             if "GET" in getattr(route, "methods", ()) and "{" not in route.path}
    return sorted(paths | {"/static/index.html"})


def test_every_html_answer_carries_the_security_headers(client):
    served = 0
    for path in html_routes(client):
        answer = client.get(path)
        if not answer.headers.get("content-type", "").startswith("text/html"):
            continue
        served += 1
        policy = answer.headers.get("content-security-policy", "")
        assert "frame-ancestors 'none'" in policy and "object-src 'none'" in policy, path
        assert answer.headers["x-content-type-options"] == "nosniff", path
        assert "unsafe-inline" not in policy.split("script-src", 1)[1].split(";")[0], path
    assert served >= 4  # /, /static/index.html, /docs, /docs/oauth2-redirect


def test_the_docs_page_may_run_its_own_inline_script_and_nothing_else(client):
    answer = client.get("/docs")
    policy = answer.headers["content-security-policy"]
    script = answer.text.split("<script>", 1)[1].split("</script>", 1)[0].encode()
    digest = base64.b64encode(hashlib.sha256(script).digest()).decode()
    assert f"'sha256-{digest}'" in policy and "https://cdn.jsdelivr.net" in policy
    assert client.get("/static/index.html").headers["content-security-policy"] == \
        client.get("/").headers["content-security-policy"]
