"""Connections that could hold the service's memory or sockets: a websocket message larger
than a client ever needs, sockets that never authenticate, more connections than the
process takes. Against a real API server (uvicorn) where the limit is uvicorn's."""

from __future__ import annotations

import base64
import json
import os
import socket
import time

import httpx
import pytest
from fastapi.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from backend import Settings, create_app
from penumbra.cli.processes import ApiServer

from .conftest import ADMIN_TOKEN


def test_a_websocket_message_over_the_limit_closes_the_socket_before_it_is_read(api_server):
    """A frame that announces a megabyte is refused on its header: only its first bytes are
    sent, and the server answers with a close frame, 1009 (message too big). Over a raw
    socket, so that nothing races the close: a client still writing the megabyte may find
    the socket closed under it before it reads the answer."""
    port = int(api_server.ws_url.rsplit(":", 1)[1].split("/", 1)[0])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        key = base64.b64encode(os.urandom(16)).decode()
        sock.sendall((f"GET /ws HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                      f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
        answer = b""
        while b"\r\n\r\n" not in answer:
            answer += sock.recv(4096) or pytest.fail(f"closed during the handshake: {answer!r}")
        assert answer.split(b"\r\n", 1)[0].split()[1] == b"101", answer
        head, _, pending = answer.partition(b"\r\n\r\n")
        # a final text frame of 1,000,000 bytes, masked as a client's must be: its header and 16 bytes
        mask = os.urandom(4)
        part = bytes(byte ^ mask[i % 4] for i, byte in enumerate(b'{"token": "xxxxx'))
        sock.sendall(bytes([0x81, 0x80 | 127]) + (1_000_000).to_bytes(8, "big") + mask + part)
        frame = _read(sock, 2, pending)
        assert frame[0] & 0x0F == 0x8, frame  # a close frame
        body = _read(sock, frame[1] & 0x7F, frame[2:])
        assert int.from_bytes(body[:2], "big") == 1009, body  # message too big


def _read(sock: socket.socket, count: int, pending: bytes) -> bytes:
    """At least ``count`` bytes: ``pending``, then what the socket gives."""
    while len(pending) < count:
        chunk = sock.recv(4096)
        assert chunk, f"closed after {pending!r}"
        pending += chunk
    return pending


def test_sockets_waiting_to_authenticate_are_capped(redis_server):
    settings = Settings(redis_url=redis_server.url, admin_token=ADMIN_TOKEN, ws_max_unauthenticated=2,
                        ws_auth_timeout=30)
    with TestClient(create_app(settings)) as client:
        with client.websocket_connect("/ws"), client.websocket_connect("/ws"):
            with client.websocket_connect("/ws") as third:
                with pytest.raises(WebSocketDisconnect) as closed:
                    third.receive_text()
                assert closed.value.code == 1013 and "wait to authenticate" in closed.value.reason
        # once they are gone, a socket authenticates as ever
        with client.websocket_connect("/ws") as ws:
            ws.send_text(json.dumps({"token": ADMIN_TOKEN}))
            assert json.loads(ws.receive_text())["type"] == "welcome"


def test_connections_beyond_the_limit_are_answered_503(redis_server, tmp_path):
    with ApiServer(redis_server.url, log=tmp_path / "api.log", admin_token=ADMIN_TOKEN, max_connections=16) as api:
        idle = [socket.create_connection(("127.0.0.1", api.port)) for _ in range(16)]
        try:
            with httpx.Client(base_url=api.url, timeout=10) as http:
                assert http.get("/api/health").status_code == 503
        finally:
            for connection in idle:
                connection.close()
        with httpx.Client(base_url=api.url, timeout=10) as http:
            assert http.get("/api/health").status_code == 200


def read_until_closed(connection: socket.socket, timeout: float) -> tuple[bytes, float]:
    """What the server sends until it closes the connection, and how long that took."""
    connection.settimeout(timeout)
    started, got = time.monotonic(), b""
    while True:
        chunk = connection.recv(4096)
        if not chunk:
            return got, time.monotonic() - started
        got += chunk


def test_a_request_whose_headers_do_not_come_in_time_is_answered_408_and_closed(redis_server, tmp_path):
    with ApiServer(redis_server.url, log=tmp_path / "api.log", admin_token=ADMIN_TOKEN, header_timeout=1) as api:
        address = ("127.0.0.1", api.port)
        half, silent = socket.create_connection(address), socket.create_connection(address)
        slow = None
        try:
            half.sendall(b"GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")   # and no more
            answer, took = read_until_closed(half, 10)
            assert answer.startswith(b"HTTP/1.1 408 ") and took < 5
            assert read_until_closed(silent, 10)[1] < 5     # a connection that sends nothing
            # headers that come bit by bit, but within the limit, are served
            request = b"GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
            slow = socket.create_connection(address)
            for start in range(0, len(request), 20):
                slow.sendall(request[start:start + 20])
                time.sleep(0.1)
            assert read_until_closed(slow, 10)[0].startswith(b"HTTP/1.1 200 ")
        finally:
            for connection in (half, silent, slow):
                if connection is not None:
                    connection.close()
        # a keep-alive client idle for longer than the limit between requests is served
        with httpx.Client(base_url=api.url, timeout=10) as http:
            assert http.get("/api/health").status_code == 200
            time.sleep(1.5)
            assert http.get("/api/health").status_code == 200
