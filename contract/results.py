"""The job's writes of matches and of the alarm instances they touch, in one script per call.

A match is about a key (:attr:`penumbra.operator.Match.key`); each (query, key) is an
alarm instance (:mod:`contract.alarms`). The sink hands a query's matches of one batch to
:func:`queue_matches`, which queues on the batch's MULTI/EXEC one script per
:data:`MATCHES_PER_CALL` matches: it appends every match to the query's result stream
(``{m, b, g, i, k}``: :func:`contract.entries.match_entry`) and merges into each touched
instance's record (``pn:instances:<qid>``) its count, its highest and latest
probability, its first and latest match's cursor and the batch's time. An instance opens
an *episode* at its first match ever, at the first match after someone resolved it in
its current episode, and at the first match after the query's ``auto_resolve_minutes``
of quiet; each opening is noted in ``pn:alarm-events`` for the notifiers. Being in the
batch's transaction, all of it is written exactly once.
"""

from __future__ import annotations

import json
from typing import Sequence

import orjson
import redis

from .alarms import EVENTS_MAXLEN, instance_id, key_json, key_mark
from .entries import encode
from .keys import Keys

__all__ = ["MATCHES_PER_CALL", "match_payload", "queue_matches", "read_match_payload"]

#: KEYS: result stream, instance records, instance states (the service's), alarm events,
#: the registry's queries. ARGV: maxlen, batch, now, query id, instance count n, the
#: batch's time in ms and the call's first match's place in the batch, then n times
#: (instance id, key JSON, count, highest probability, latest probability), then per match
#: (match JSON, key group, instance index from 0, times JSON, partition, records JSON, factors JSON;
#: the last two left out of the entry when empty). Probabilities stay the
#: strings Python wrote (cjson would round them to 14 digits). Returns the entries appended.
_APPEND_MATCHES = """
local stream, records, states, events, queries = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local maxlen, batch, now, query, n = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5])
local first, last = {}, {}
local base = 8 + 5 * n
local at, seq = tonumber(ARGV[6]), tonumber(ARGV[7])
-- ids <at>-<seq>, unless the stream already went past them (written by an older version): Redis's own
local ours = true
if redis.call('EXISTS', stream) == 1 then
  local info = redis.call('XINFO', 'STREAM', stream)
  for field = 1, #info, 2 do
    if info[field] == 'last-generated-id' then
      local ms, n = string.match(info[field + 1], '(%%d+)-(%%d+)')
      ours = tonumber(ms) < at or (tonumber(ms) == at and tonumber(n) < seq)
    end
  end
end
for i = base, #ARGV, 7 do
  local k = tonumber(ARGV[i + 2])
  local fields = {'m', ARGV[i], 'b', batch, 'g', ARGV[i + 1], 'i', ARGV[8 + 5 * k], 'k', ARGV[9 + 5 * k],
                  't', ARGV[i + 3], 'p', ARGV[i + 4]}
  if ARGV[i + 5] ~= '' then fields[#fields + 1] = 'r'; fields[#fields + 1] = ARGV[i + 5] end
  if ARGV[i + 6] ~= '' then fields[#fields + 1] = 'f'; fields[#fields + 1] = ARGV[i + 6] end
  local id = redis.call('XADD', stream, 'MAXLEN', '~', maxlen, ours and (ARGV[6] .. '-' .. seq) or '*',
                        unpack(fields))
  seq = seq + 1
  if first[k] == nil then first[k] = id end
  last[k] = id
end
local quiet = nil
local entry = redis.call('HGET', queries, query)
if entry then
  local minutes = cjson.decode(entry)['auto_resolve_minutes']
  if type(minutes) == 'number' then quiet = minutes * 60 end
end
for k = 0, n - 1 do
  local o = 8 + 5 * k
  local iid, count, high, latest = ARGV[o], tonumber(ARGV[o + 2]), ARGV[o + 3], ARGV[o + 4]
  local raw = redis.call('HGET', records, iid)
  local r, opens
  if raw then
    r = cjson.decode(raw)
    local state = redis.call('HGET', states, iid)
    state = state and cjson.decode(state)
    opens = (state and state['state'] == 'resolved' and state['episode'] == r['episode'])
            or (quiet ~= nil and now - r['last_at'] >= quiet)
  else
    r = {key = ARGV[o + 1], added = 0, episode = 0}
    opens = true
  end
  if opens then
    r['episode'] = r['episode'] + 1
    r['opened_added'] = r['added']
    r['opened_at'] = now
    r['first'] = first[k]
    r['high'] = high
    redis.call('XADD', events, 'MAXLEN', '~', %d, '*', 'i', iid, 'q', query,
               'event', r['episode'] == 1 and 'opened' or 'reopened', 'episode', r['episode'], 'at', ARGV[3])
  elseif tonumber(high) > tonumber(r['high']) then
    r['high'] = high
  end
  r['added'] = r['added'] + count
  r['last'] = last[k]
  r['last_at'] = now
  r['last_prob'] = latest
  redis.call('HSET', records, iid, cjson.encode(r))
end
return (#ARGV - base + 1) / 7
""" % EVENTS_MAXLEN
MATCHES_PER_CALL = 10_000


#: orjson reads an integer literal beyond 64 bits as a float of this magnitude or more
_WIDEST = float(2 ** 63)


def match_payload(key, prob: float, times, partition: str | None, records, factors) -> bytes:
    """What the job's stateful step hands the sink of a match beside its JSON: its key,
    probability and partition, then its times, records and factors each as the JSON its
    entry keeps (so the sink and the archive pass them on without reading them), one per
    line (JSON text holds no raw newline)."""
    return b"\n".join((encode([key, prob, partition]), encode(times), encode(records) if records else b"",
                       encode(factors) if factors else b""))


def read_match_payload(raw: bytes) -> tuple:
    """``(key, probability, times, partition, records, factors)`` of :func:`match_payload`,
    times, records and factors as their JSON (None for none): a row for :func:`queue_matches`."""
    head, times, records, factors = raw.split(b"\n", 3)
    try:
        key, prob, partition = orjson.loads(head)
    except orjson.JSONDecodeError:      # a lone surrogate in a key value: the json module reads it
        key, prob, partition = json.loads(head)
    else:
        if key and any(type(value) is float and not -_WIDEST < value < _WIDEST for value in key.values()):
            key, prob, partition = json.loads(head)     # orjson reads an integer beyond 64 bits as a float
    return key, prob, times, partition, records or None, factors or None


def _json(value) -> bytes:
    """A value as its JSON, or the JSON it already is."""
    return value if type(value) is bytes else orjson.dumps(value)


def queue_matches(pipe: redis.client.Pipeline, keys: Keys, query: str, batch: int,
                  matches: Sequence[tuple], maxlen: int, at: int) -> None:
    """Queue a query's matches of one batch on ``pipe`` (the batch's MULTI/EXEC), in order:
    each ``(match JSON, key group, key, probability[, times[, partition[, records[, factors]]]]])``
    (:class:`~penumbra.operator.Match`'s fields of those names; times, records and factors
    as values or as their JSON, :func:`read_match_payload`); the stream capped at about
    ``maxlen`` entries. ``at`` is the batch's time in milliseconds: the n-th match's entry
    id is ``<at>-<n>`` (the id the archive gives it too), and the instances it touches are
    stamped with it. ``at`` must be later than the stream's last entry's."""
    for start in range(0, len(matches), MATCHES_PER_CALL):
        chunk = matches[start:start + MATCHES_PER_CALL]
        index: dict[str, int] = {}
        known: dict[tuple | None, int] = {}
        touched: list[list] = []
        rows: list = []
        for data, group, key, prob, *more in chunk:
            seen = key_mark(key)        # a key's instance spelled once a call
            k = known.get(seen)
            if k is None:
                spelled = key_json(key)
                iid = instance_id(query, key, spelled)
                k = index.get(iid)
                if k is None:
                    k = index[iid] = len(touched)
                    touched.append([iid, spelled or "null", 0, prob, prob])
                known[seen] = k
            instance = touched[k]
            instance[2] += 1
            if prob > instance[3]:
                instance[3] = prob
            instance[4] = prob
            times, partition, records, factors = (more + [None] * 4)[:4]
            rows += (data, group, k, _json(times), partition or "", _json(records) if records else "",
                     _json(factors) if factors else "")
        args: list = [maxlen, batch, repr(at / 1000.0), query, len(touched), at, start]
        for iid, spelled, count, high, latest in touched:
            args += (iid, spelled, count, repr(float(high)), repr(float(latest)))
        # EVAL, not EVALSHA: a script Redis does not know would fail inside EXEC alone
        pipe.eval(_APPEND_MATCHES, 5, keys.matches(query), keys.instances(query), keys.alarm_states(query),
                  keys.alarm_events, keys.queries, *args, *rows)
