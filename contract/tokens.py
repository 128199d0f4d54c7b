"""Bearer tokens, stored hashed with a per-token salt, and the roles they carry: the
contract's ``pn:tokens``, which the API checks and ``penumbra up`` bootstraps.

A token is any high-entropy string (generated ones are ``pn_`` + 32 random bytes in
base64url). Redis never holds it in plain: the hash ``pn:tokens`` maps the token's
*id* (the first 16 hex digits of its SHA-256, which reveals nothing usable) to its
record ``{"id", "role", "label", "salt", "hash", "created"}`` with ``hash`` =
SHA-256(salt + token). Checking a token finds its record by id and compares the
hashes in constant time.

>>> Role.viewer < Role.analyst < Role.admin
True
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import json
import logging
import secrets
import sys
import time
from dataclasses import dataclass

import redis

from .keys import Keys

__all__ = ["Principal", "Role", "TokenStore", "new_token", "token_id"]

log = logging.getLogger("penumbra.api")


class Role(enum.IntEnum):
    """What a token may do; each role may do everything the roles below it may."""

    viewer = 1    # read queries, results, alarms, health
    analyst = 2   # + register and change queries, post events, act on alarms
    admin = 3     # + stream parameters, tokens


@dataclass(frozen=True)
class Principal:
    """Who is calling: the token's id, role and label (the label is who the audit names)."""

    id: str
    role: Role
    label: str


def new_token() -> str:
    return "pn_" + secrets.token_urlsafe(32)


def token_id(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _hash(salt: str, token: str) -> str:
    return hashlib.sha256((salt + token).encode("utf-8", "surrogatepass")).hexdigest()


class TokenStore:
    """Tokens in the Redis hash ``<prefix>:tokens``."""

    def __init__(self, client: redis.Redis, keys: Keys):
        self.redis = client
        self.key = keys.tokens
        self.bootstrap_key = keys.tokens_bootstrap

    def add(self, token: str, role: Role, label: str) -> dict:
        salt = secrets.token_hex(16)
        record = {"id": token_id(token), "role": role.name, "label": label, "salt": salt,
                  "hash": _hash(salt, token), "created": time.time()}
        self.redis.hset(self.key, record["id"], json.dumps(record))
        return record

    def create(self, role: Role, label: str) -> tuple[str, dict]:
        """A new token (shown once to whoever asked for it) and its record."""
        token = new_token()
        return token, self.add(token, role, label)

    def check(self, token: str) -> Principal | None:
        return self.verify(token, self.redis.hget(self.key, token_id(token)))

    def verify(self, token: str, raw: bytes | None) -> Principal | None:
        """The principal of ``token`` if ``raw`` (its id's record, as stored) holds its hash."""
        if raw is None:
            return None
        record = json.loads(raw)
        if not hmac.compare_digest(record["hash"], _hash(record["salt"], token)):
            return None
        return Principal(record["id"], Role[record["role"]], record["label"])

    def records(self) -> list[dict]:
        return sorted((json.loads(v) for v in self.redis.hvals(self.key)), key=lambda r: (r["created"], r["id"]))

    def get(self, ident: str) -> dict | None:
        raw = self.redis.hget(self.key, ident)
        return json.loads(raw) if raw is not None else None

    def revoke(self, ident: str) -> bool:
        return bool(self.redis.hdel(self.key, ident))

    def bootstrap(self, admin_token: str | None) -> str | None:
        """Make sure an admin can get in: ``admin_token`` (PENUMBRA_ADMIN_TOKEN) becomes an
        admin token; without it, when no admin token exists, one is generated. Returns a
        generated token (to print once), else None."""
        if admin_token:
            found = self.check(admin_token)
            if found is None or found.role != Role.admin:
                self.add(admin_token, Role.admin, "admin")
            return None
        if any(r["role"] == Role.admin.name for r in self.records()):
            return None
        # processes starting together (several workers) generate one token between them
        if not self.redis.set(self.bootstrap_key, 1, nx=True, ex=60):
            return None
        token, _ = self.create(Role.admin, "admin")
        print(f"Penumbra admin token (shown once): {token}", file=sys.stderr, flush=True)
        log.info("generated the first admin token")
        return token
