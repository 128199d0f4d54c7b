"""The writers of the dead-letter stream ``pn:dead``: the service's rejected events and the
job's rejected and late ones (:func:`contract.entries.rejected_letter`,
:func:`contract.entries.late_letter`).

The stream is capped twice: by count (``XADD ... MAXLEN ~``, ``dead_maxlen``) and by the
memory Redis reports for it (``dead_max_mb``): after a write that added letters, the
writer asks Redis what the stream uses (``MEMORY USAGE``, sampled) and trims the oldest
letters beyond the budget. Each letter is small already (what it quotes is cut to
:data:`contract.entries.DEAD_RAW_BYTES`, its reason to 1 KB), so the budget holds within
a few letters.
"""

from __future__ import annotations

import logging
from typing import Iterable

import redis

from .keys import Keys

__all__ = ["DEAD_MAX_MB", "DEAD_SAMPLES", "queue_dead", "trim_dead"]

#: The default memory budget of the stream, MB (``PENUMBRA_DEAD_MAX_MB``).
DEAD_MAX_MB = 256

log = logging.getLogger("penumbra.dead")

#: Stream nodes ``MEMORY USAGE`` samples to estimate the stream's size.
DEAD_SAMPLES = 16


def queue_dead(pipe: redis.client.Pipeline, keys: Keys, letters: Iterable[dict], maxlen: int) -> int:
    """Queue dead letters on ``pipe`` (with the rest of the caller's transaction), the
    stream capped at about ``maxlen``; how many were queued."""
    count = 0
    for letter in letters:
        pipe.xadd(keys.dead, {name: _text(value) for name, value in letter.items()}, maxlen=maxlen, approximate=True)
        count += 1
    return count


def _text(value):
    """A letter's field as Redis takes it: text with a lone surrogate (a name sent as the
    JSON escape ``"\\ud800"``, which UTF-8 cannot carry) keeps it as that escape."""
    if type(value) is str:
        try:
            return value.encode()
        except UnicodeEncodeError:
            return value.encode("utf-8", "backslashreplace")
    return value


def trim_dead(client: redis.Redis, keys: Keys, max_bytes: int) -> int:
    """Trim the oldest dead letters until the stream uses about ``max_bytes`` of Redis's
    memory at most; how many went. Best effort, after the writer's work is committed: a
    Redis error here fails nothing (the next write trims)."""
    try:
        used = client.memory_usage(keys.dead, samples=DEAD_SAMPLES)
        if not used or used <= max_bytes:
            return 0
        length = client.xlen(keys.dead)
        return client.xtrim(keys.dead, maxlen=int(length * max_bytes / used), approximate=False)
    except redis.RedisError as error:
        log.warning("trimming the dead-letter stream failed (%s); the next write trims", error)
        return 0
