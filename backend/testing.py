"""The API in a child process (``python -m backend``) on a free loopback port, for tests
and benchmarks: started with its settings as ``PENUMBRA_`` variables, stopped by its pid.

>>> ApiServer("redis://127.0.0.1:6379/0", port=8123).url
'http://127.0.0.1:8123'
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

__all__ = ["ApiServer"]

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class ApiServer:
    """``with ApiServer(redis_url, admin_token="...", ws_queue=40) as api: api.ws_url``.
    Keyword settings become ``PENUMBRA_<NAME>`` variables; its output goes to ``log``
    (a path) or nowhere."""

    def __init__(self, redis_url: str, *, port: int | None = None, log: Path | None = None, **settings):
        self.port = port or _free_port()
        self.env = {**os.environ, "PENUMBRA_REDIS_URL": redis_url, "PENUMBRA_HOST": "127.0.0.1",
                    "PENUMBRA_PORT": str(self.port),
                    **{f"PENUMBRA_{k.upper()}": str(v).lower() if isinstance(v, bool) else str(v)
                       for k, v in settings.items()}}
        self.log = log
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws"

    def start(self, timeout: float = 30.0) -> ApiServer:
        out = open(self.log, "ab") if self.log else subprocess.DEVNULL
        try:
            self.process = subprocess.Popen([sys.executable, "-m", "backend"], cwd=ROOT, env=self.env,
                                            stdout=out, stderr=out)
        finally:
            if self.log:
                out.close()
        deadline = time.monotonic() + timeout
        while True:
            try:
                httpx.get(f"{self.url}/api/health", timeout=1.0)
                return self
            except httpx.TransportError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"the API did not start on port {self.port}") from None
                time.sleep(0.1)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.process = None

    def __enter__(self) -> ApiServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
