"""Notifications of alarm instances: contact points, routing rules and deliveries in Redis.

- ``pn:contacts``: contact point id -> JSON ``{"id", "name", "kind", "url", "secret",
  "created", "by"}`` (``kind`` webhook: a POST of the notification's JSON, signed;
  alertmanager: the instances pushed to a Prometheus Alertmanager, :func:`alert_of`);
- ``pn:routes``: routing rule id -> JSON ``{"id", "queries", "priorities", "contacts",
  "created", "by"}``: a notification of an instance whose query is in ``queries`` (null:
  any) and whose priority is in ``priorities`` (null: any) goes to each of ``contacts``;
- ``pn:deliveries``: notification id (``<alarm event id>:<contact id>``, also its
  ``Idempotency-Key``) -> JSON ``{"id", "contact", "body", "created", "attempts",
  "last_error"}``, and ``pn:deliveries:due`` (sorted set: id by the time of its next attempt);
- ``pn:delivery-failures``: stream of the deliveries given up on, with their reasons;
- ``pn:silence-ends``: sorted set of silences to look at when they end (an instance's,
  ``i:<instance id>``, or a matcher's, ``m:<silence id>``), by their end.

The notifier (backend/notify.py) reads ``pn:alarm-events`` in a consumer group
(:data:`GROUP`), so that of several API processes one handles each event.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from datetime import datetime, timezone
from typing import Any, Iterable, Mapping

import redis

from .keys import Keys

__all__ = ["CONTACT_KINDS", "GROUP", "SIGNATURE_HEADER", "alert_of", "claim_due", "enqueue", "routed_contacts", "sign"]

#: The consumer group of the notifiers on the alarm events.
GROUP = "notifier"
CONTACT_KINDS = ("webhook", "alertmanager")
#: The webhook's signature header: ``t=<seconds since the epoch>,v1=<hex HMAC-SHA256 of "<t>.<body>">``.
SIGNATURE_HEADER = "X-Penumbra-Signature"


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """The signature header's value of ``body`` sent at ``timestamp`` (a receiver computes
    the same over the raw body and compares, and refuses an old timestamp)."""
    digest = hmac.new(secret.encode(), b"%d." % timestamp + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


def routed_contacts(routes: Iterable[Mapping[str, Any]], query: str, priority: str) -> list[str]:
    """The contact points the rules send an instance of ``query`` with ``priority`` to, each once, in order."""
    out: list[str] = []
    for route in routes:
        if route.get("queries") and query not in route["queries"]:
            continue
        if route.get("priorities") and priority not in route["priorities"]:
            continue
        out += [c for c in route["contacts"] if c not in out]
    return out


#: KEYS: deliveries, due. ARGV: id, record JSON, when due. A notification is enqueued once:
#: handling its alarm event again (a notifier that died before acknowledging it) adds nothing.
_ENQUEUE = """
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 1 then
  redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
  return 1
end
return 0
"""


def enqueue(client: redis.Redis, keys: Keys, notification: str, contact: str, body: dict, now: float) -> bool:
    """Queue one notification for one contact point, due now; False when it was queued before."""
    record = {"id": notification, "contact": contact, "body": body, "created": now, "attempts": 0, "last_error": None}
    return bool(client.eval(_ENQUEUE, 2, keys.deliveries, keys.deliveries_due, notification, json.dumps(record), now))


#: KEYS: due. ARGV: now, lease end, most. The due deliveries, each leased to the caller
#: until the lease ends (another notifier takes it only after).
_CLAIM = """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[3]))
for _, id in ipairs(due) do
  redis.call('ZADD', KEYS[1], ARGV[2], id)
end
return due
"""


def claim_due(client: redis.Redis, keys: Keys, now: float, lease: float, most: int) -> list[str]:
    return [i.decode() for i in client.eval(_CLAIM, 1, keys.deliveries_due, now, now + lease, most)]


def _rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _label(name: str) -> str:
    """A Prometheus label name from a key attribute's (letters, digits and _ only)."""
    cleaned = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return f"key_{cleaned}"


def alert_of(view: Mapping[str, Any], link: str, now: float, expires: float) -> dict:
    """An alarm instance as an Alertmanager v2 alert: labels (``alertname``, ``query``,
    ``priority`` and ``severity``, the key's attributes as ``key_<name>``, ``instance``),
    annotations (summary, the latest and highest probability, the link), ``startsAt`` when
    the instance opened and ``endsAt``: when it was resolved, or ``expires`` seconds from
    now while it is active (so that it ends by itself if Penumbra stops sending it)."""
    labels = {"alertname": "PenumbraAlarm", "query": view["query"], "priority": view["priority"],
              "severity": view["priority"], "instance": view["id"]}
    for name, value in (view.get("key") or {}).items():
        labels[_label(name)] = str(value)
    about = ", ".join(f"{name} {value}" for name, value in (view.get("key") or {}).items())
    annotations = {"summary": f"{view['name']}{f' ({about})' if about else ''}: {view['matches']} matches",
                   "probability": f"{view['last_prob']:.4f}" if view.get("last_prob") is not None else "",
                   "highest_probability": f"{view['high_prob']:.4f}" if view.get("high_prob") is not None else "",
                   "state": view["state"], "link": link}
    if view["state"] == "resolved":
        ends = view.get("updated_at") or view.get("last_at") or now
    else:
        ends = now + expires
    return {"labels": labels, "annotations": annotations, "startsAt": _rfc3339(view.get("opened_at") or now),
            "endsAt": _rfc3339(ends), "generatorURL": link}
