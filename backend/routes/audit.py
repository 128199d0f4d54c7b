"""The audit trail: who changed which query, threshold, stream, alarm or token, and when
(the ``pn:audit`` stream, written by the registry and the service). Analysts and admins."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from contract.entries import read_audit

from ..deps import AnalystDep, ServiceDep
from ..errors import ApiError
from ..models import AuditPage, Cursor
from . import errors

router = APIRouter(prefix="/audit", tags=["audit"])

#: entries read per step while looking for a subject's, and at most in one request
_CHUNK = 1000
_SCAN_LIMIT = 20_000


@router.get("", response_model=AuditPage, responses=errors(401, 403), summary="Who changed what, newest first")
def list_audit(who: AnalystDep, service: ServiceDep,
               subject: Annotated[str | None, Query(min_length=1, max_length=200,
                                                    description="only changes to this query, stream or token")] = None,
               limit: Annotated[int, Query(ge=1, le=500, description="entries per page")] = 50,
               before: Annotated[Cursor | None, Query(description="only older than this cursor (paging)")] = None
               ) -> dict:
    """Pages go back in time: pass the answer's ``next`` as ``before``. With ``subject``,
    up to 20,000 entries are looked through per request; ``next`` says where to go on."""
    if before:
        parts = [int(p) for p in before.split("-")]
        if any(p >= 2 ** 64 for p in parts):
            raise ApiError(422, f"before: {before!r} is not a stream id (each part below 2^64)", field="before")
        if parts == [0, 0]:
            return {"items": [], "next": None}  # nothing is older
    top = f"({before}" if before else "+"
    items: list[dict] = []
    scanned = 0
    while True:
        found = service.redis.xrevrange(service.keys.audit, top, "-", count=_CHUNK)
        for entry_id, fields in found:
            scanned += 1
            record = read_audit(entry_id, fields)
            if subject is None or record["subject"] == subject:
                if len(items) == limit:
                    return {"items": items, "next": items[-1]["id"]}
                items.append(record)
            if scanned >= _SCAN_LIMIT:
                return {"items": items, "next": entry_id.decode()}
        if len(found) < _CHUNK:
            return {"items": items, "next": None}
        top = f"({found[-1][0].decode()}"
