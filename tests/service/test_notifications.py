"""Notifications: contact points and routing rules over REST, and the notifier delivering
alarm instances that open to a real webhook receiver on 127.0.0.1, which is stopped and
started again mid-stream. Every notification arrives at least once, a repeat carries the
same Idempotency-Key, each is signed (HMAC-SHA256 over timestamp and body, checked here),
a silenced instance notifies nobody until its silence ends, and a delivery that keeps
failing is kept with its reason.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from fastapi.testclient import TestClient

from backend import create_app
from contract.alarms import instance_id
from penumbra.cli.processes import free_port

from .conftest import ADMIN_TOKEN, own_app_settings, unique, write_batch


class Receiver:
    """A webhook on 127.0.0.1: keeps every POST (headers, body); stopped and started on the same port."""

    def __init__(self):
        self.port = free_port()
        self.got: list[tuple[dict, bytes]] = []
        self.server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def start(self) -> Receiver:
        got = self.got

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - the http.server name
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                got.append(({k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def bodies(self) -> list[dict]:
        return [json.loads(body) for _, body in self.got]


@pytest.fixture
def receiver():
    hook = Receiver().start()
    yield hook
    hook.stop()


def wait_for(what: str, check, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"no {what} within {timeout:g} s"
        time.sleep(0.05)


def verify(secret: str, headers: dict, body: bytes) -> None:
    """The signature header is HMAC-SHA256 of "<t>.<body>" with the contact point's secret."""
    parts = dict(part.split("=", 1) for part in headers["x-penumbra-signature"].split(","))
    wanted = hmac.new(secret.encode(), parts["t"].encode() + b"." + body, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(parts["v1"], wanted) and abs(int(parts["t"]) - time.time()) < 120


def keyed(n: int, key: dict) -> dict:
    return {"events": {"A": f"a{n}", "B": f"b{n}"}, "prob": 0.9, "key": key}


def test_contact_points_and_rules_are_for_admins_and_name_what_exists(client, as_role, join_query):
    query_id, _, _ = join_query
    made = client.post("/api/contact-points", json={"name": "ops", "url": "http://127.0.0.1:9/hook"},
                       headers=as_role("admin"))
    assert made.status_code == 201 and len(made.json()["secret"]) >= 32
    contact = made.json()["id"]
    assert "secret" not in json.dumps(client.get("/api/contact-points", headers=as_role("admin")).json())
    assert client.get("/api/contact-points", headers=as_role("analyst")).status_code == 403
    bad = client.post("/api/contact-points", json={"name": "x", "url": "ftp://host/x"}, headers=as_role("admin"))
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "url"
    rule = client.post("/api/routing-rules", json={"queries": [query_id], "contacts": [contact]},
                       headers=as_role("admin"))
    assert rule.status_code == 201 and rule.json()["priorities"] is None
    for body, field in (({"contacts": ["c-nope"]}, "contacts"), ({"queries": ["nope"], "contacts": [contact]}, "queries"),
                        ({"priorities": ["urgent"], "contacts": [contact]}, "priorities")):
        refused = client.post("/api/routing-rules", json=body, headers=as_role("admin"))
        assert refused.status_code in (404, 422) and refused.json()["error"]["field"].startswith(field)
    assert client.delete(f"/api/routing-rules/{rule.json()['id']}", headers=as_role("admin")).status_code == 204
    assert client.delete(f"/api/contact-points/{contact}", headers=as_role("admin")).status_code == 204
    assert client.delete(f"/api/contact-points/{contact}", headers=as_role("admin")).status_code == 404


def test_every_notification_arrives_at_least_once_across_a_receiver_outage(client, as_role, store, keys,
                                                                          join_query, receiver):
    query_id, _, _ = join_query
    contact = client.post("/api/contact-points", json={"name": unique("hook"), "url": receiver.url},
                          headers=as_role("admin")).json()
    assert client.post("/api/routing-rules", json={"queries": [query_id], "contacts": [contact["id"]]},
                       headers=as_role("admin")).status_code == 201
    write_batch(store, keys, 1, {query_id: [keyed(n, {"region": n}) for n in range(3)]})
    wait_for("three notifications", lambda: len(receiver.got) >= 3)
    first = receiver.bodies()
    assert sorted(b["alarm"]["key"]["region"] for b in first) == [0, 1, 2]
    assert {b["event"] for b in first} == {"opened"} and all(query_id in b["link"] for b in first)
    for headers, body in receiver.got:
        verify(contact["secret"], headers, body)
        assert headers["idempotency-key"] == json.loads(body)["id"] and headers["idempotency-key"].endswith(contact["id"])

    # the receiver goes away mid-stream: new instances open, one reopens after a resolution
    receiver.stop()
    resolved = client.post(f"/api/alarms/{instance_id(query_id, {'region': 0})}/resolve", headers=as_role("analyst"))
    assert resolved.status_code == 200
    write_batch(store, keys, 2, {query_id: [keyed(n, {"region": n}) for n in (0, 3, 4, 5)]})

    def retried():
        pending = client.get("/api/deliveries", headers=as_role("analyst")).json()["pending"]
        mine = [d for d in pending if d["contact"] == contact["id"]]
        return len(mine) == 4 and all(d["attempts"] >= 1 and d["last_error"] for d in mine) and mine

    waiting = wait_for("four deliveries being retried", retried)
    assert {d["event"] for d in waiting} == {"opened", "reopened"}
    receiver.start()
    wait_for("every notification", lambda: len({h["idempotency-key"] for h, _ in receiver.got}) >= 7, timeout=30)
    by_key: dict[str, set[bytes]] = {}
    for headers, body in receiver.got:
        verify(contact["secret"], headers, body)
        by_key.setdefault(headers["idempotency-key"], set()).add(body)
    assert len(by_key) == 7 and all(len(bodies) == 1 for bodies in by_key.values())  # a repeat is the same
    events = sorted((b["alarm"]["key"]["region"], b["event"]) for b in receiver.bodies())
    assert sorted(set(events)) == [(0, "opened"), (0, "reopened"), (1, "opened"), (2, "opened"), (3, "opened"),
                                   (4, "opened"), (5, "opened")]
    wait_for("nothing pending", lambda: not [d for d in client.get("/api/deliveries", headers=as_role("analyst"))
                                             .json()["pending"] if d["contact"] == contact["id"]])


def test_a_silenced_instance_notifies_nobody_until_its_silence_ends(client, as_role, store, keys, join_query,
                                                                    receiver):
    query_id, _, _ = join_query
    contact = client.post("/api/contact-points", json={"name": unique("hook"), "url": receiver.url},
                          headers=as_role("admin")).json()
    client.post("/api/routing-rules", json={"queries": [query_id], "contacts": [contact["id"]]},
                headers=as_role("admin"))
    window = client.post("/api/silences", json={"query": query_id, "key": {"region": 7}, "end": time.time() + 2.0},
                         headers=as_role("analyst"))
    assert window.status_code == 201
    write_batch(store, keys, 1, {query_id: [keyed(1, {"region": 7}), keyed(2, {"region": 8})]})
    wait_for("the unsilenced instance's notification", lambda: receiver.got)
    time.sleep(0.5)
    assert [b["alarm"]["key"] for b in receiver.bodies()] == [{"region": 8}]
    # once the silence ends, the instance that matched under it is told
    ended = wait_for("the silence's end", lambda: [b for b in receiver.bodies() if b["event"] == "silence_ended"])
    assert [b["alarm"]["key"] for b in ended] == [{"region": 7}]


def test_a_delivery_that_keeps_failing_is_kept_with_its_reason(redis_server):
    keys, settings = own_app_settings(redis_server, "notify", notify_give_up_minutes=0.02, notify_poll=0.05)
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    with TestClient(create_app(settings)) as client:
        dead_end = f"http://127.0.0.1:{free_port()}/nobody"
        contact = client.post("/api/contact-points", json={"name": "gone", "url": dead_end}, headers=admin).json()
        queued = client.post(f"/api/contact-points/{contact['id']}/test", headers=admin)
        assert queued.status_code == 202

        def failed():
            return [d for d in client.get("/api/deliveries", headers=admin).json()["failed"] if d["id"] == queued.json()["id"]]

        (failure,) = wait_for("the failure", failed)
        assert failure["attempts"] >= 2 and "Connect" in failure["reason"] and failure["event"] == "test"
        assert client.get("/api/deliveries", headers=admin).json()["pending"] == []


def test_an_app_started_again_notifies_again(redis_server, receiver, caplog):
    """A second lifespan of the same app (an ASGI host starting it again) starts its notifier
    again: the test notification of each run arrives, and nothing is logged as an error."""
    _, settings = own_app_settings(redis_server, "restarted", notify_poll=0.05)
    app = create_app(settings)
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    for run in range(2):
        with TestClient(app) as client:
            contact = client.post("/api/contact-points", json={"name": f"hook{run}", "url": receiver.url},
                                  headers=admin).json()
            queued = client.post(f"/api/contact-points/{contact['id']}/test", headers=admin).json()["id"]
            wait_for(f"run {run}'s notification", lambda: queued in [b["id"] for b in receiver.bodies()])
    assert [r.getMessage() for r in caplog.records if r.name == "penumbra.notify" and r.levelname == "ERROR"] == []
