"""The app itself: OpenAPI with descriptions and examples, CORS only when configured, the
access log, and ``python -m backend`` serving on its port."""

from __future__ import annotations

import json
import logging
import subprocess
import sys

import httpx
from fastapi.testclient import TestClient

from backend import create_app
from contract.logs import JsonLines
from penumbra.cli.processes import ApiServer


def test_openapi_documents_every_operation(client):
    schema = client.get("/openapi.json").json()
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            assert operation.get("summary"), (method, path)
            codes = set(operation["responses"])
            assert {"422", "503"} <= codes or path == "/api/health", (method, path, codes)
            if path != "/api/health":
                assert "401" in codes and operation.get("security"), (method, path)
    events = schema["paths"]["/api/events"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert events["oneOf"][1]["maxItems"] == 500
    assert schema["components"]["schemas"]["EventIn"]["examples"]
    assert client.get("/docs").status_code == 200


def test_no_cors_unless_configured(client, settings):
    preflight = {"Origin": "http://example.test", "Access-Control-Request-Method": "GET"}
    assert "access-control-allow-origin" not in client.options("/api/queries", headers=preflight).headers
    with TestClient(create_app(settings.model_copy(update={"cors_origins": ["http://example.test"]}))) as cors:
        answer = cors.options("/api/queries", headers=preflight)
        assert answer.headers["access-control-allow-origin"] == "http://example.test"
        other = cors.options("/api/queries", headers={**preflight, "Origin": "http://elsewhere.test"})
        assert "access-control-allow-origin" not in other.headers


def test_the_access_log_record_carries_its_fields_as_json(client, caplog):
    with caplog.at_level(logging.INFO, logger="penumbra.api"):
        answer = client.get("/api/health")
    (record,) = [r for r in caplog.records if getattr(r, "path", None) == "/api/health"]
    line = json.loads(JsonLines("api").format(record))
    assert (line["method"], line["path"], line["status"], line["request"]) == \
        ("GET", "/api/health", 200, answer.headers["x-request-id"])


def test_python_m_backend_serves(redis_server, tmp_path):
    with ApiServer(redis_server.url, cwd=tmp_path, admin_token="served-admin-" + "y" * 20) as server:
        answer = httpx.get(f"{server.url}/api/me", headers={"Authorization": "Bearer served-admin-" + "y" * 20})
        assert answer.status_code == 200 and answer.json()["role"] == "admin"


def test_the_service_never_imports_pyspark():
    code = ("import sys; from backend import Settings, create_app; "
            "create_app(Settings(redis_url='redis://127.0.0.1:1/0')).openapi(); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'pandas')))")
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "[]"
