"""The live feed's fan-out: one Redis reader per process, a bounded queue and one sender
task per websocket client.

A client subscribes to *feeds*: a kind (``matches``, ``alarms``, ``partitions``,
``buffers``) of a query, or ``metrics``. Each feed reads one result stream
(docs/redis.md): matches and alarms ``pn:out:matches:<qid>``, partitions and buffers
``pn:out:obs:<qid>``, metrics ``pn:metrics``; every message carries the id of the
stream entry it comes from, the client's cursor for that feed.

The reader is woken by the job's ``pn:live`` messages (and every ``ws_poll`` seconds,
for writers that publish nothing), reads every stream some feed needs with one
non-blocking XREAD from where it stopped, and hands each entry to the live feeds on
that stream: a call that appends to the client's queue and never waits for it. Each
client's sender task empties its queue onto the socket, so a slow client only delays
itself.

- :mod:`.cursor`: stream ids as cursors, and the messages' encoding;
- :mod:`.client`: one client's feeds, bounded queue and sender task;
- :mod:`.hub`: the subscriptions, each feed's catch-up, and the reader that fans the
  streams out to the feeds.
"""

from .client import (CLOSE_FORBIDDEN, CLOSE_THROTTLED, CLOSE_TOO_SLOW, CLOSE_UNAUTHORIZED, CLOSE_UNAVAILABLE, KINDS,
                     Client)
from .cursor import Cursor, parse_cursor
from .hub import REDIS_CONNECTIONS, Hub

__all__ = ["CLOSE_FORBIDDEN", "CLOSE_THROTTLED", "CLOSE_TOO_SLOW", "CLOSE_UNAUTHORIZED", "CLOSE_UNAVAILABLE", "KINDS",
           "REDIS_CONNECTIONS", "Client", "Cursor", "Hub", "parse_cursor"]
