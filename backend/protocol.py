"""The service's HTTP/1.1 protocol: uvicorn's (httptools), with a time limit on a request's
headers.

uvicorn waits for a request's headers as long as the client likes: 3,000 connections that
each send half a header hold 3,000 sockets for good. Here a request's headers must be
complete within ``header_timeout`` seconds of its first byte (or of the connection, for a
client that sends nothing); otherwise it is answered 408 and closed (a connection that sent
nothing is closed without an answer). Between requests, the
keep-alive timeout closes an idle connection as before.
"""

from __future__ import annotations

import asyncio

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["TIMED_OUT", "with_header_timeout"]

_REASON = b"the request's headers came too late"
#: The answer to a request whose headers did not come in time.
TIMED_OUT = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
             b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(_REASON), _REASON))


class _HeaderTimeout(HttpToolsProtocol):
    header_timeout = 10.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._header_timer: asyncio.TimerHandle | None = None
        self._begun = False
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._begun = True
        if self._header_timer is None:
            self._arm()

    def on_headers_complete(self) -> None:
        self._disarm()
        self._begun = False
        super().on_headers_complete()

    def _arm(self) -> None:
        self._header_timer = self.loop.call_later(self.header_timeout, self._too_late)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _too_late(self) -> None:
        self._header_timer = None
        if self.transport.is_closing():
            return
        # a 408 only where it answers a request begun and no other answer is under way
        # (pipelined); a connection that sent nothing is just closed
        idle = self.cycle is None or self.cycle.response_complete
        if idle and self._begun:
            self.transport.write(TIMED_OUT)
        self.transport.close()


def with_header_timeout(seconds: float) -> type[HttpToolsProtocol]:
    """uvicorn's ``http`` protocol class, closing a request whose headers take longer than
    ``seconds``."""
    return type("HttpWithHeaderTimeout", (_HeaderTimeout,), {"header_timeout": float(seconds)})
