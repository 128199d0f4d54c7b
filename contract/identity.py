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

Stream names compare case-insensitively (as in queries), so the identity and the content
digest take the stream name case-folded. The content is the event's JSON with its keys
sorted (so that the order of a client's keys does not make a conflict). Within one
request (or one file of ``penumbra eval``) the core's parser takes each identity once
already (:func:`penumbra.events.codec.same_content`); this module carries the rule across
requests, clients and restarts.
"""

from __future__ import annotations

import hashlib
import math
import time
from typing import Any, NamedTuple

import orjson

__all__ = ["BUCKETS", "CONFLICT_REASON", "DEFAULT_HORIZON_HOURS", "Identified", "content_digest", "generation",
           "identified", "identity"]

#: Why an event whose identity came before with other content is refused.
CONFLICT_REASON = ("conflict: an event of this stream with this id was accepted before with other content "
                   "(an id is unique within its stream; a retry must send the same event)")
#: Hashes each generation spreads its identities over.
BUCKETS = 16384
#: How long an identity is remembered at least, by default: a day of ingest time.
DEFAULT_HORIZON_HOURS = 24.0
IDENTITY_BYTES = 12
DIGEST_BYTES = 8


class Identified(NamedTuple):
    """An event on its way to the ingest stream: its identity (None for an entry that names
    no stream and id: the job rejects it), its bucket, its content digest and its JSON."""

    identity: bytes | None
    bucket: int
    digest: bytes
    payload: bytes


def identity(stream: str, event_id: str) -> bytes:
    """The event's identity: a 96-bit hash of its stream (case-folded, length first) and its id."""
    name = stream.casefold().encode("utf-8", "surrogatepass")
    key = len(name).to_bytes(4, "big") + name + event_id.encode("utf-8", "surrogatepass")
    return hashlib.blake2b(key, digest_size=IDENTITY_BYTES, person=b"pn-identity").digest()


def content_digest(event: dict) -> bytes:
    """A 64-bit digest of the event's content: its JSON with sorted keys, the stream case-folded."""
    stream = event.get("stream")
    if isinstance(stream, str):
        event = {**event, "stream": stream.casefold()}
    try:
        canonical = orjson.dumps(event, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # what orjson does not write (an integer beyond 64 bits, a lone surrogate)
        import json

        canonical = json.dumps(event, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.blake2b(canonical, digest_size=DIGEST_BYTES, person=b"pn-content").digest()


def identified(event: Any, payload: bytes) -> Identified:
    """``event`` (the decoded JSON) and ``payload`` (what goes to the ingest stream) with its
    identity; an entry that is no object with a string stream and id has none."""
    if isinstance(event, dict):
        stream, event_id = event.get("stream"), event.get("id")
        if isinstance(stream, str) and isinstance(event_id, str):
            key = identity(stream, event_id)
            return Identified(key, int.from_bytes(key[:4], "big") % BUCKETS, content_digest(event), payload)
    return Identified(None, 0, b"", payload)


def generation(horizon: float, now: float | None = None) -> int:
    """The generation of identities ingested at ``now`` (seconds since the epoch)."""
    return math.floor((time.time() if now is None else now) / horizon)
