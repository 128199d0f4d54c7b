"""A live-feed client for the benchmarks: a websocket that reconnects after any close and
subscribes again from the cursors its subclass keeps."""

from __future__ import annotations

import json
import threading
import time


class ResumingClient(threading.Thread):
    """Connects to ``url``'s ``/ws`` with ``token``, sends :meth:`subscription` (the
    subclass's, from its cursors), hands each message to :meth:`handle`; after any close
    (too slow, API killed, Redis away) it counts a reconnect, waits ``pause`` seconds and
    starts again, until :attr:`stop` is set."""

    def __init__(self, url: str, token: str, pause: float = 0.5):
        super().__init__(daemon=True)
        self.ws_url = url.replace("http://", "ws://") + "/ws"
        self.token, self.pause = token, pause
        self.reconnects = 0
        self.stop = threading.Event()

    def subscription(self) -> dict:
        raise NotImplementedError

    def handle(self, message: dict) -> None:
        raise NotImplementedError

    def run(self) -> None:
        from websockets.sync.client import connect

        while not self.stop.is_set():
            try:
                with connect(self.ws_url, open_timeout=30, max_size=None) as socket:
                    socket.send(json.dumps({"token": self.token}))
                    socket.send(json.dumps({"type": "subscribe", **self.subscription()}))
                    while not self.stop.is_set():
                        try:
                            message = json.loads(socket.recv(timeout=1.0))
                        except TimeoutError:
                            continue
                        self.handle(message)
            except Exception:  # noqa: BLE001 - closed: resume from the cursors
                if self.stop.is_set():
                    break
                self.reconnects += 1
                time.sleep(self.pause)
