"""Structured logs: the API process writes JSON lines (its output is a file), every request
has an id answered in X-Request-Id, and the ingest's record of a request names the entries
it appended, which the job's record of a micro-batch brackets (tests/integration)."""

from __future__ import annotations

import json
import time

import httpx

from .conftest import bearer, fresh_streams


def records(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{")]


def test_the_api_logs_json_lines_and_follows_a_request_by_its_id(api_server, client, tokens):
    (stream,) = fresh_streams(client, "L")
    batch = [{"stream": stream, "id": f"l{n}", "ts": {"lo": n, "hi": n + 1}} for n in range(3)]
    with httpx.Client(base_url=api_server.url, headers=bearer(tokens["analyst"]), timeout=10) as http:
        chosen = http.post("/api/events", json=batch, headers={"X-Request-Id": "trace-17"})
        generated = http.get("/api/health")
        refused = http.get("/api/health", headers={"X-Request-Id": "no spaces allowed"})
    assert chosen.headers["x-request-id"] == "trace-17"
    assert len(generated.headers["x-request-id"]) == 16 and refused.headers["x-request-id"] != "no spaces allowed"
    log = api_server.child.log
    deadline = time.monotonic() + 10
    while True:
        found = [r for r in records(log) if r.get("request") == "trace-17"]
        if len(found) >= 2 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert all({"time", "level", "process", "logger", "message"} <= set(r) and r["process"] == "api" for r in found)
    (ingest,) = [r for r in found if "first_id" in r]
    answer = chosen.json()
    assert (ingest["first_id"], ingest["last_id"], ingest["accepted"]) == (answer["first_id"], answer["last_id"], 3)
    (access,) = [r for r in found if r.get("path") == "/api/events"]
    assert (access["method"], access["status"]) == ("POST", 202) and access["ms"] >= 0
