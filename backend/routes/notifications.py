"""Notifications: contact points and routing rules (admins), deliveries (analysts).

A contact point is a webhook; its secret signs every notification (HMAC-SHA256, the
``X-Penumbra-Signature`` header) and is shown once, in the answer that creates it. A
routing rule sends the notifications of some queries' (or any query's) instances of some
priorities (or any) to contact points. ``POST /contact-points/{id}/test`` queues a test
notification. ``GET /deliveries`` shows what is being delivered or retried and what was
given up on, with the reason. The delivery itself is backend/notify.py.
"""

from __future__ import annotations

import json
import secrets
import time

from fastapi import APIRouter, Response

from contract.notify import enqueue

from ..deps import AdminDep, AnalystDep, ServiceDep
from ..errors import ApiError
from ..models import ContactIn, ContactList, ContactOut, DeliveryList, RuleIn, RuleList, RuleOut
from . import errors

router = APIRouter(tags=["notifications"])

#: contact points and routing rules kept at most
MAX_ITEMS = 1000


def _public(contact: dict) -> dict:
    return {k: v for k, v in contact.items() if k != "secret"}


@router.get("/contact-points", response_model=ContactList, responses=errors(401, 403), summary="Contact points")
def list_contacts(who: AdminDep, service: ServiceDep) -> dict:
    found = [_public(json.loads(raw)) for raw in service.redis.hvals(service.keys.contacts)]
    return {"items": sorted(found, key=lambda c: (c["created"], c["id"]))}


@router.post("/contact-points", status_code=201, response_model=ContactOut, responses=errors(401, 403, 409),
             summary="Add a contact point (its secret is shown once)")
def create_contact(who: AdminDep, body: ContactIn, service: ServiceDep) -> dict:
    if service.redis.hlen(service.keys.contacts) >= MAX_ITEMS:
        raise ApiError(409, f"at most {MAX_ITEMS} contact points: remove one first")
    contact = {"id": f"c-{secrets.token_hex(6)}", "name": body.name, "kind": body.kind, "url": body.url,
               "secret": body.secret or secrets.token_urlsafe(32), "created": time.time(), "by": who.label}
    service.redis.hset(service.keys.contacts, contact["id"], json.dumps(contact))
    service.audit(who.label, "contact.create", contact["id"], {"name": body.name, "url": body.url})
    return contact


@router.delete("/contact-points/{contact_id}", status_code=204, response_class=Response,
               responses=errors(401, 403, 404), summary="Remove a contact point")
def delete_contact(who: AdminDep, contact_id: str, service: ServiceDep) -> Response:
    return _remove(service, who.label, service.keys.contacts, contact_id, "contact point", "contact")


@router.post("/contact-points/{contact_id}/test", status_code=202, responses=errors(401, 403, 404),
             summary="Send a test notification to a contact point")
def test_contact(who: AdminDep, contact_id: str, service: ServiceDep) -> dict:
    if not service.redis.hexists(service.keys.contacts, contact_id):
        raise ApiError(404, f"no contact point {contact_id!r}", field="contact_id")
    now = time.time()
    notification = f"test-{secrets.token_hex(6)}:{contact_id}"
    enqueue(service.redis, service.keys, notification, contact_id,
            {"id": notification, "event": "test", "at": now, "alarm": None, "by": who.label}, now)
    return {"id": notification}


@router.get("/routing-rules", response_model=RuleList, responses=errors(401, 403), summary="Routing rules")
def list_rules(who: AdminDep, service: ServiceDep) -> dict:
    found = [json.loads(raw) for raw in service.redis.hvals(service.keys.routes)]
    return {"items": sorted(found, key=lambda r: (r["created"], r["id"]))}


@router.post("/routing-rules", status_code=201, response_model=RuleOut, responses=errors(401, 403, 404, 409),
             summary="Route some queries' or priorities' notifications to contact points")
def create_rule(who: AdminDep, body: RuleIn, service: ServiceDep) -> dict:
    if service.redis.hlen(service.keys.routes) >= MAX_ITEMS:
        raise ApiError(409, f"at most {MAX_ITEMS} routing rules: remove one first")
    known = service.redis.hmget(service.keys.contacts, body.contacts)
    missing = [c for c, raw in zip(body.contacts, known) if raw is None]
    if missing:
        raise ApiError(404, f"no contact point {missing[0]!r}", field="contacts")
    _, queries, _ = service.snapshot()
    unknown = [q for q in body.queries or () if q not in queries]
    if unknown:
        raise ApiError(404, f"no query {unknown[0]!r}", field="queries")
    rule = {"id": f"r-{secrets.token_hex(6)}", "queries": body.queries or None, "priorities": body.priorities or None,
            "contacts": list(dict.fromkeys(body.contacts)), "created": time.time(), "by": who.label}
    service.redis.hset(service.keys.routes, rule["id"], json.dumps(rule))
    service.audit(who.label, "rule.create", rule["id"], {k: rule[k] for k in ("queries", "priorities", "contacts")})
    return rule


@router.delete("/routing-rules/{rule_id}", status_code=204, response_class=Response,
               responses=errors(401, 403, 404), summary="Remove a routing rule")
def delete_rule(who: AdminDep, rule_id: str, service: ServiceDep) -> Response:
    return _remove(service, who.label, service.keys.routes, rule_id, "routing rule", "rule")


def _remove(service, who: str, key: str, item_id: str, what: str, name: str) -> Response:
    """Delete one contact point or rule (404 naming it when there is none), audited."""
    if not service.redis.hdel(key, item_id):
        raise ApiError(404, f"no {what} {item_id!r}", field=f"{name}_id")
    service.audit(who, f"{name}.remove", item_id)
    return Response(status_code=204)


def _delivery(record: dict) -> dict:
    body = record.get("body") or {}
    return {"id": record["id"], "contact": record["contact"], "event": body.get("event"),
            "alarm": (body.get("alarm") or {}).get("id"), "attempts": int(record.get("attempts") or 0),
            "last_error": record.get("last_error"), "created": float(record["created"]),
            "reason": record.get("reason"), "at": float(record["at"]) if record.get("at") else None}


@router.get("/deliveries", response_model=DeliveryList, responses=errors(401, 403),
            summary="Notifications being delivered, and those given up on")
def list_deliveries(who: AnalystDep, service: ServiceDep) -> dict:
    pending = [_delivery(json.loads(raw)) for raw in service.redis.hvals(service.keys.deliveries)]
    failed = []
    for _, fields in service.redis.xrevrange(service.keys.delivery_failures, count=100):
        record = {k.decode(): v.decode(errors="replace") for k, v in fields.items()}
        try:
            record["body"] = json.loads(record.get("body", "{}"))
        except ValueError:
            record["body"] = {}
        failed.append(_delivery(record))
    return {"pending": sorted(pending, key=lambda d: d["created"])[:100], "failed": failed}
