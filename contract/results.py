"""The job's writes of matches: thousands of entries of one query in one command.

Each entry has :func:`contract.entries.match_entry`'s shape, ``{m, b, g}``.
"""

from __future__ import annotations

from typing import Sequence

import redis

from .keys import Keys

__all__ = ["MATCHES_PER_CALL", "queue_matches"]

#: Appends a query's matches of one batch to its result stream (KEYS[1], capped at about
#: ARGV[1] entries), each as ``{m: match JSON, b: batch id (ARGV[2]), g: key group}`` from the
#: pairs that follow. One command for thousands of matches: an XADD each in the
#: transaction cost redis-py a queued reply each, three times the time of the script
#: (12,000 matches: 64-76 ms against 21-23 ms).
_APPEND_MATCHES = """
local stream, maxlen, batch = KEYS[1], ARGV[1], ARGV[2]
for i = 3, #ARGV, 2 do
  redis.call('XADD', stream, 'MAXLEN', '~', maxlen, '*', 'm', ARGV[i], 'b', batch, 'g', ARGV[i + 1])
end
return (#ARGV - 2) / 2
"""
MATCHES_PER_CALL = 10_000


def queue_matches(pipe: redis.client.Pipeline, keys: Keys, query: str, batch: int,
                  matches: Sequence[tuple[bytes, int]], maxlen: int) -> None:
    """Queue a query's ``(match JSON, key group)`` pairs of one batch on ``pipe`` (the
    batch's MULTI/EXEC), in order, the stream capped at about ``maxlen`` entries."""
    for start in range(0, len(matches), MATCHES_PER_CALL):
        args: list = [maxlen, batch]
        for data, group in matches[start:start + MATCHES_PER_CALL]:
            args += (data, group)
        # EVAL, not EVALSHA: a script Redis does not know would fail inside EXEC alone
        pipe.eval(_APPEND_MATCHES, 1, keys.matches(query), *args)
