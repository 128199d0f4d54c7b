"""Tokens: admins create (the token is shown once), list and revoke them; anyone may ask who they are."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response

from contract.tokens import Role

from ..deps import AdminDep, ServiceDep, TokenDep
from ..errors import ApiError
from ..models import TokenCreated, TokenIn, TokenList, TokenOut
from . import errors

router = APIRouter(tags=["tokens"])

TokenId = Annotated[str, Path(min_length=1, max_length=64, description="the token's id (not the token)")]


def _public(record: dict) -> dict:
    return {k: record[k] for k in ("id", "role", "label", "created")}


@router.post("/tokens", status_code=201, response_model=TokenCreated, responses=errors(401, 403),
             summary="Create a token")
def create_token(who: AdminDep, body: TokenIn, service: ServiceDep) -> dict:
    """The answer holds the token itself; it is not shown again (Redis keeps only its salted hash)."""
    token, record = service.tokens.create(Role[body.role], body.label)
    service.audit(who.label, "token.create", record["id"], {"role": body.role, "label": body.label})
    return {**_public(record), "token": token}


@router.get("/tokens", response_model=TokenList, responses=errors(401, 403), summary="List tokens")
def list_tokens(who: AdminDep, service: ServiceDep) -> dict:
    return {"items": [_public(r) for r in service.tokens.records()]}


@router.get("/me", response_model=TokenOut, responses=errors(401), summary="The calling token")
def whoami(who: TokenDep, service: ServiceDep) -> dict:
    record = service.tokens.get(who.id)
    if record is None:
        raise ApiError(401, "invalid or revoked token", headers={"WWW-Authenticate": "Bearer"})
    return _public(record)


@router.delete("/tokens/{token_id}", status_code=204, response_class=Response, responses=errors(401, 403, 404, 409),
               summary="Revoke a token")
def revoke_token(who: AdminDep, token_id: TokenId, service: ServiceDep) -> Response:
    """Refused (409) for the last admin token, so an admin can always get in."""
    record = service.tokens.get(token_id)
    if record is None:
        raise ApiError(404, f"no token {token_id!r}", field="token_id")
    admins = [r for r in service.tokens.records() if r["role"] == Role.admin.name]
    if record["role"] == Role.admin.name and len(admins) == 1:
        raise ApiError(409, "the last admin token cannot be revoked", field="token_id")
    service.tokens.revoke(token_id)
    service.audit(who.label, "token.revoke", token_id, {"role": record["role"], "label": record["label"]})
    return Response(status_code=204)
