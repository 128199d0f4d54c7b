"""Alarm instances: one per (query, key), their records, states and silences.

A match is about a key (:attr:`penumbra.operator.Match.key`: the query's equality key
values, ``None`` without one); each (query, key) is an *instance*, named
``<query>`` for the key ``None`` and ``<query>:<12 hex digits>`` (a digest of the key's
canonical JSON) otherwise. Three parts:

- the job keeps each instance's *record* with the matches (:mod:`contract.results`):
  ``pn:instances:<qid>``, instance id -> JSON of ``key`` (canonical JSON text),
  ``added`` (matches ever), ``episode`` (how many times it opened), ``opened_added`` and
  ``opened_at`` (the count and time when the current episode opened), ``first`` and
  ``last`` (cursors of the episode's first and the latest match), ``last_at``, and
  ``high`` and ``last_prob`` (probabilities as the job wrote them);
- the service keeps what people did (:func:`act`): ``pn:alarm-states:<qid>``, instance
  id -> JSON of ``state``, ``by``, ``at``, ``until`` (a silence), ``comment`` and the
  ``episode`` it was done in: a state of an earlier episode no longer applies;
- silences by matcher (``pn:silences``: a query, optionally a key, start, end, author,
  comment) cover instances that exist and those that do not yet.

:func:`instance_view` puts them together: the state, the matches since the episode
opened, the probabilities, who acted last. Priorities order the alarms list
(:func:`sort_key`).

>>> instance_id("intrusion", None), instance_id("intrusion", {"region": 17}) == instance_id("intrusion", {"region": 17.0})
('intrusion', True)
>>> key_json({"zone": "n", "region": True})
'{"region":true,"zone":"n"}'
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any, Iterable, Mapping

import redis

from .keys import Keys

__all__ = ["EVENTS_MAXLEN", "PRIORITIES", "STATES", "act", "instance_id", "instance_view", "key_json",
           "read_instance", "read_silence", "read_state", "silence_covers", "silence_matches", "sort_key"]

#: Alarm events (an instance opened or reopened) kept for the notifiers (MAXLEN ~).
EVENTS_MAXLEN = 100_000
PRIORITIES = ("critical", "warning", "info")
#: Alarm states, in the order the alarms list shows them.
STATES = ("new", "acknowledged", "silenced", "resolved")
#: The priority of a query registered without one.
DEFAULT_PRIORITY = "warning"


def _canonical(value: Any) -> Any:
    """One spelling per key value the operators do not tell apart (``1`` and ``1.0``)."""
    if isinstance(value, float) and value.is_integer() and math.isfinite(value):
        return int(value)
    return value


def key_json(key: Mapping[str, Any] | None) -> str | None:
    """The canonical JSON text of a key (sorted attributes, ``1.0`` as ``1``), or None; a
    key holding a lone surrogate, which UTF-8 cannot carry, with its characters escaped."""
    if key is None:
        return None
    canonical = {name: _canonical(value) for name, value in key.items()}
    text = json.dumps(canonical, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:      # a lone surrogate: UTF-8 cannot carry it, its JSON escape can
            text = json.dumps(canonical, sort_keys=True, separators=(",", ":"))
    return text


def key_mark(key: Mapping[str, Any] | None) -> tuple | None:
    """A key as a hashable mark: keys of equal marks spell one canonical JSON (values
    compared by value and, for booleans, kind: true is not 1, while 1 and 1.0 are one), so
    a batch's matches spell each key once."""
    return None if key is None else tuple([(name, type(value) is bool, value) for name, value in key.items()])


def instance_id(query: str, key: Mapping[str, Any] | None, spelled: str | None = None) -> str:
    """The id of the (query, key) instance; ``spelled`` is :func:`key_json` of the key when known."""
    spelled = key_json(key) if spelled is None else spelled
    if spelled is None:
        return query
    return f"{query}:{hashlib.blake2b(spelled.encode('utf-8', 'surrogatepass'), digest_size=6).hexdigest()}"


def query_of(instance: str) -> str:
    """The query an instance id belongs to."""
    return instance.split(":", 1)[0]


def read_instance(raw: bytes | str) -> dict:
    """A record as the job wrote it, numbers as numbers and the key as an object."""
    record = json.loads(raw)
    record["key"] = json.loads(record["key"]) if isinstance(record.get("key"), str) else None
    for name in ("high", "last_prob"):
        record[name] = float(record[name]) if record.get(name) is not None else None
    return record


def read_state(raw: bytes | str | None) -> dict | None:
    return json.loads(raw) if raw else None


def read_silence(silence_id: str, raw: bytes | str) -> dict:
    return {"id": silence_id, **json.loads(raw)}


# --- what people do ---------------------------------------------------------------------------

#: KEYS: the query's instance records, its instance states. ARGV: instance id, the new
#: state's JSON. The state is stamped with the record's episode, read in the same script:
#: a match that reopens the instance afterwards starts a new episode, to which it does not apply.
_ACT = """
local raw = redis.call('HGET', KEYS[1], ARGV[1])
local episode = 0
if raw then episode = cjson.decode(raw)['episode'] end
local state = cjson.decode(ARGV[2])
state['episode'] = episode
redis.call('HSET', KEYS[2], ARGV[1], cjson.encode(state))
return episode
"""


def act(client: redis.Redis | redis.client.Pipeline, keys: Keys, instance: str, state: str, by: str, at: float,
        **fields: Any) -> Any:
    """Set an instance's state (acknowledged, silenced with ``until``, resolved; a
    ``comment``), for its current episode."""
    query = query_of(instance)
    return client.eval(_ACT, 2, keys.instances(query), keys.alarm_states(query), instance,
                       json.dumps({"state": state, "by": by, "at": at, **fields}))


# --- what an instance shows -------------------------------------------------------------------

def silence_covers(silence: Mapping[str, Any], query: str, key: Mapping[str, Any] | None, now: float) -> bool:
    """The silence is in force at ``now`` and matches the instance (:func:`silence_matches`)."""
    return silence["start"] <= now < silence["end"] and silence_matches(silence, query, key)


def silence_matches(silence: Mapping[str, Any], query: str, key: Mapping[str, Any] | None) -> bool:
    """The silence names the instance's query, and its key (each attribute the silence
    names has the instance's value; none named: every key)."""
    if silence["query"] != query:
        return False
    wanted = silence.get("key")
    if not wanted:
        return True
    if key is None:
        return False
    have = json.loads(key_json(key))
    return all(name in have and have[name] == _canonical(value) for name, value in wanted.items())


def instance_view(query: Mapping[str, Any], instance: str, record: Mapping[str, Any] | None,
                  stored: Mapping[str, Any] | None, silences: Iterable[Mapping[str, Any]], now: float) -> dict:
    """An instance as the API shows it, from the job's record, the stored state and the
    silences. ``stored`` applies in the episode it was set in; after ``auto_resolve_minutes``
    of quiet the instance is resolved by itself; a silence in force covers a new or
    acknowledged instance (an instance silenced by someone stays so until its time, also
    before its first match and across a reopening)."""
    record = record or {"key": None, "added": 0, "episode": 0, "opened_added": 0}
    episode = record.get("episode", 0)
    # what was done applies in its episode; a silence, until its time, whatever reopens meanwhile
    current = stored if stored and (stored.get("episode") == episode or (
        stored.get("state") == "silenced" and (stored.get("until") or 0) > now)) else None
    matches = record["added"] - record.get("opened_added", 0)
    quiet = query.get("auto_resolve_minutes")
    by, at, until, silence = (current or {}).get("by"), (current or {}).get("at"), None, None
    if current is None:
        state = "new" if matches else "resolved"
    else:
        state = current["state"]
        if state == "silenced":
            until = current.get("until")
            if until is not None and now >= until:
                state = "new" if record.get("last_at", 0) > current["at"] else "acknowledged"
                until = None
    if state in ("new", "acknowledged") and quiet and record.get("last_at") is not None \
            and now - record["last_at"] >= quiet * 60:
        state, by, at = "resolved", "auto", record["last_at"] + quiet * 60
    if state in ("new", "acknowledged"):
        for candidate in silences:
            if silence_covers(candidate, query["id"], record.get("key"), now):
                silence = candidate
                state, until = "silenced", candidate["end"]
                break
    return {"id": instance, "query": query["id"], "name": query.get("name", query["id"]), "key": record.get("key"),
            "state": state, "priority": query.get("priority") or DEFAULT_PRIORITY, "matches": matches,
            "episode": episode, "opened_at": record.get("opened_at"), "last_at": record.get("last_at"),
            "first": record.get("first"), "last": record.get("last"), "last_prob": record.get("last_prob"),
            "high_prob": record.get("high"), "silenced_until": until, "silence": silence["id"] if silence else None,
            "updated_by": by, "updated_at": at, "comment": (current or {}).get("comment"),
            "verdict": (current or {}).get("verdict")}


def sort_key(view: Mapping[str, Any]) -> tuple:
    """Priority, then state, then the latest match first."""
    return (PRIORITIES.index(view["priority"]) if view["priority"] in PRIORITIES else len(PRIORITIES),
            STATES.index(view["state"]), -(view["last_at"] or 0), view["id"])
