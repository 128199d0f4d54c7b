"""The app itself: OpenAPI with descriptions and examples, CORS only when configured, the
access log, and ``python -m backend`` serving on its port."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time

import httpx
from fastapi.testclient import TestClient

from backend import create_app
from spark_jobs.redis_server import free_port


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


def test_access_log_is_json(client, caplog):
    with caplog.at_level(logging.INFO, logger="penumbra.api"):
        client.get("/api/health")
    assert '"path":"/api/health","status":200' in caplog.text


def test_python_m_backend_serves(redis_server, tmp_path):
    port = free_port()
    env = {**os.environ, "PENUMBRA_REDIS_URL": redis_server.url, "PENUMBRA_PORT": str(port),
           "PENUMBRA_ADMIN_TOKEN": "served-admin-" + "y" * 20}
    process = subprocess.Popen([sys.executable, "-m", "backend"], env=env, cwd=tmp_path,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                answer = httpx.get(f"http://127.0.0.1:{port}/api/me",
                                   headers={"Authorization": "Bearer served-admin-" + "y" * 20})
                break
            except httpx.TransportError:
                assert process.poll() is None and time.monotonic() < deadline, "the API did not start"
                time.sleep(0.1)
        assert answer.status_code == 200 and answer.json()["role"] == "admin"
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGTERM)
            process.wait(10)


def test_the_service_never_imports_pyspark():
    code = ("import sys; from backend import Settings, create_app; "
            "create_app(Settings(redis_url='redis://127.0.0.1:1/0')).openapi(); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'pandas', 'pyarrow')))")
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "[]"
