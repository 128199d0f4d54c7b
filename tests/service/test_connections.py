"""Connections that could hold the service's memory or sockets: a websocket message larger
than a client ever needs, sockets that never authenticate, more connections than the
process takes. Against a real API server (uvicorn) where the limit is uvicorn's."""

from __future__ import annotations

import asyncio
import json
import socket
import time

import httpx
import pytest
from fastapi.testclient import TestClient
from starlette.websockets import WebSocketDisconnect
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from backend import Settings, create_app
from penumbra.cli.processes import ApiServer

from .conftest import ADMIN_TOKEN


def test_a_websocket_message_over_the_limit_closes_the_socket_before_it_is_read(api_server):
    async def send_a_megabyte() -> int:
        async with connect(api_server.ws_url, proxy=None, compression=None, max_size=None) as ws:
            await ws.send(json.dumps({"token": "x" * 1_000_000}))
            with pytest.raises(ConnectionClosed) as closed:
                await asyncio.wait_for(ws.recv(), 10)
            return closed.value.rcvd.code

    assert asyncio.run(send_a_megabyte()) == 1009  # message too big


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
