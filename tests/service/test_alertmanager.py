"""An Alertmanager contact point against a real Prometheus Alertmanager on 127.0.0.1 (Debian's
binary, fetched by the set-up): the alerts it holds follow the alarm instances as they
open, resolve and reopen, with the query, key and priority as labels."""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx
import pytest
import redis
from fastapi.testclient import TestClient

from backend import create_app
from contract.alarms import instance_id
from penumbra.cli.processes import Child, free_port

from .conftest import ADMIN_TOKEN, own_app_settings, write_batch
from .test_notifications import wait_for

ROOT = Path(__file__).resolve().parents[2]
BINARY = next((str(p) for p in (ROOT / "var" / "tools" / "alertmanager", shutil.which("prometheus-alertmanager"))
               if p and Path(p).exists()), None)
CONFIG = """route:
  receiver: nobody
  group_wait: 1s
receivers:
  - name: nobody
"""

pytestmark = pytest.mark.skipif(BINARY is None, reason="no alertmanager binary (make setup fetches it)")


@pytest.fixture
def alertmanager(tmp_path):
    port = free_port()
    (tmp_path / "alertmanager.yml").write_text(CONFIG)
    child = Child("alertmanager", "Prometheus Alertmanager",
                  [BINARY, f"--config.file={tmp_path / 'alertmanager.yml'}", f"--storage.path={tmp_path / 'data'}",
                   f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="],
                  tmp_path / "alertmanager.log", cwd=tmp_path,
                  probe=lambda c: _answers(f"http://127.0.0.1:{port}/-/ready"))
    child.start().wait_ready(30)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        child.stop()


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def active(base: str) -> dict[str, dict]:
    """The alerts the Alertmanager holds (it lists none that ended), by their ``key_region`` label."""
    return {a["labels"].get("key_region"): a for a in httpx.get(f"{base}/api/v2/alerts", timeout=5).json()}


def test_alertmanager_holds_the_active_instances_as_they_open_resolve_and_reopen(redis_server, alertmanager):
    keys, settings = own_app_settings(redis_server, "am", alertmanager_resend=0.5, notify_poll=0.1)
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    with TestClient(create_app(settings)) as client:
        store = redis.Redis.from_url(redis_server.url)
        for stream in ("AmA", "AmB"):
            client.put(f"/api/streams/{stream}", json={"pi": 20}, headers=admin)
        query = client.post("/api/queries", headers=admin, json={
            "text": "SELECT * FROM AmA A, AmB B WHERE WINDOW(A, B) = 10 AND A.region = B.region WITH THRESHOLD 0.5",
            "priority": "critical", "name": "Intrusion"}).json()["id"]
        contact = client.post("/api/contact-points", headers=admin,
                              json={"name": "team alertmanager", "kind": "alertmanager", "url": alertmanager})
        assert contact.status_code == 201, contact.text
        assert client.post("/api/routing-rules", headers=admin,
                           json={"queries": [query], "contacts": [contact.json()["id"]]}).status_code == 201
        write_batch(store, keys, 1, {query: [{"events": {"A": f"a{n}", "B": f"b{n}"}, "prob": 0.8 + n / 100,
                                              "key": {"region": n}} for n in (1, 2)]})
        held = wait_for("two alerts", lambda: (lambda a: a if set(a) == {"1", "2"} else None)(active(alertmanager)))
        one = held["1"]
        assert {k: one["labels"][k] for k in ("alertname", "query", "priority", "severity", "instance")} == \
            {"alertname": "PenumbraAlarm", "query": query, "priority": "critical", "severity": "critical",
             "instance": instance_id(query, {"region": 1})}
        assert one["annotations"]["probability"] == "0.8100" and "Intrusion (region 1)" in one["annotations"]["summary"]
        assert one["status"]["state"] == "active"
        # resolved in Penumbra: the Alertmanager sees it end
        assert client.post(f"/api/alarms/{instance_id(query, {'region': 1})}/resolve",
                           headers=admin).status_code == 200
        wait_for("the resolved alert gone", lambda: set(active(alertmanager)) == {"2"})
        # reopened by the next match: active again, from its new start
        write_batch(store, keys, 2, {query: [{"events": {"A": "a9", "B": "b9"}, "prob": 0.95, "key": {"region": 1}}]})
        again = wait_for("the reopened alert", lambda: active(alertmanager).get("1"))
        assert again["startsAt"] > one["startsAt"] and again["annotations"]["probability"] == "0.9500"
        store.close()
