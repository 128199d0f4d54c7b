"""Event identity (DESIGN.md): an event is identified by its stream and id, and the system
processes each identity once.

The ingest remembers, for every identity it appended, a digest of the event's content:

- an event whose identity it remembers with the same digest is a duplicate (a client's
  retry, a batch sent twice, two clients at once): not appended again, and answered as
  such;
- an event whose identity it remembers with another digest is a conflict: refused, and
  kept as a dead letter with its reason;
- anything else is appended, and remembered.

Identities are remembered for ``horizon`` seconds of ingest time at least and twice that at
most: they live in generations of ``horizon`` seconds (``pn:ids:<generation>:<bucket>``),
the current and the previous one consulted, each expiring once the next has passed. Each
generation spreads its identities over :data:`BUCKETS` hashes, which Redis keeps as compact
listpacks while they hold at most ``hash-max-listpack-entries`` (128 by default): a
remembered identity is a 12-byte hash of (stream, id) and an 8-byte digest of the content,
about 28 bytes of Redis memory up to two million identities a generation and 74 beyond
(docs/redis.md).

Stream names compare case-insensitively (as in queries), so the identity takes the stream
name case-folded. The content is what the parsed event says (the core's
:func:`~penumbra.events.content_of`: timestamp as sent, attributes with their JSON kinds),
so the order of a client's keys or ``1`` against ``1.0`` in a timestamp makes no
conflict. Within one request (or one file of ``penumbra eval``) the core's parser takes
each identity once already by the same rule; this module carries it across requests,
clients and restarts. Generations are numbered by Redis's clock (``TIME`` in the script),
so writers on other hosts agree on them.
"""

from __future__ import annotations

import functools
import hashlib
from typing import NamedTuple

import orjson

from penumbra.events import Admitted, Event, content_of

__all__ = ["BUCKETS", "CONFLICT_REASON", "DEFAULT_HORIZON_HOURS", "Identified", "content_digest", "identified",
           "identity"]

#: Why an event whose identity came before with other content is refused.
CONFLICT_REASON = ("conflict: an event of this stream with this id was accepted before with other content "
                   "(an id is unique within its stream; a retry must send the same event)")
#: Hashes each generation spreads its identities over.
BUCKETS = 16384
#: How long an identity is remembered at least, by default: a day of ingest time.
DEFAULT_HORIZON_HOURS = 24.0
IDENTITY_BYTES = 12
DIGEST_BYTES = 8
# the hashers, keyed once: a copy costs less than a new one with its parameters
_IDENTITY = hashlib.blake2b(digest_size=IDENTITY_BYTES, person=b"pn-identity")
_CONTENT = hashlib.blake2b(digest_size=DIGEST_BYTES, person=b"pn-content")


class Identified(NamedTuple):
    """An event on its way to the ingest stream: its identity (None for an entry that names
    no stream and id: the job rejects it), its bucket, its content digest and its JSON."""

    identity: bytes | None
    bucket: int
    digest: bytes
    payload: bytes


def identity(stream: str, event_id: str) -> bytes:
    """The event's identity: a 96-bit hash of its stream (case-folded, length first) and its id."""
    hasher = _IDENTITY.copy()
    hasher.update(_stream_key(stream) + event_id.encode("utf-8", "surrogatepass"))
    return hasher.digest()


@functools.lru_cache(maxsize=4096)
def _stream_key(stream: str) -> bytes:
    name = stream.casefold().encode("utf-8", "surrogatepass")
    return len(name).to_bytes(4, "big") + name


def content_digest(event: Event | Admitted) -> bytes:
    """A 64-bit digest of what a parsed event says beyond its identity (the core's
    :func:`~penumbra.events.content_of`: the one rule for "the same content" within a block
    and across requests alike; an :class:`~penumbra.events.Admitted` carries it)."""
    content = event.content if type(event) is Admitted else content_of(event)
    try:
        canonical = orjson.dumps(content)
    except TypeError:  # what orjson does not write (an integer beyond 64 bits)
        canonical = repr(content).encode("utf-8", "surrogatepass")
    hasher = _CONTENT.copy()
    hasher.update(canonical)
    return hasher.digest()


def identified(event: Event | Admitted | None, payload: bytes) -> Identified:
    """A parsed (or admitted) event on its way to the ingest stream as ``payload``, with its
    identity; None (an entry that is not a valid event: the job rejects it) has none."""
    if event is None:
        return Identified(None, 0, b"", payload)
    key = identity(event.stream, event.id)
    return Identified(key, int.from_bytes(key[:4], "big") % BUCKETS, content_digest(event), payload)
