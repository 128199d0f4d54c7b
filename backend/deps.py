"""What routes depend on, as named ``Annotated`` aliases.

``ServiceDep`` is the process's shared state (settings, Redis client, registry, tokens);
``TokenDep`` the caller (any valid token); ``ViewerDep``, ``AnalystDep`` and
``AdminDep`` a caller of at least that role (401 without a valid token, 403 below the role).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Annotated

import redis
from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from contract.history import History
from contract.keys import Keys
from contract.registry import Registry
from contract.tokens import Principal, Role, TokenStore, token_id
from penumbra.events import Streams, parse_streams

from .config import Settings
from .errors import ApiError
from .limits import FailedAuthentications, RateLimiter

__all__ = ["AdminDep", "AnalystDep", "QueryDep", "Service", "ServiceDep", "TokenDep", "ViewerDep"]

log = logging.getLogger("penumbra.api")


@dataclass
class Service:
    """Everything one process of the service shares between requests."""

    settings: Settings
    redis: redis.Redis
    keys: Keys
    registry: Registry = field(init=False)
    tokens: TokenStore = field(init=False)
    ingest_limiter: RateLimiter = field(init=False)
    auth_failures: FailedAuthentications = field(init=False)
    write_limiter: RateLimiter = field(init=False)
    history: History = field(init=False)
    bootstrapped: bool = False
    #: the admin token generated at the first start (None when given or already there)
    generated_admin_token: str | None = None
    _streams: tuple[int, Streams] | None = field(default=None, init=False, repr=False)

    def __post_init__(self):
        self.registry = Registry(self.redis, self.keys, max_queries=self.settings.max_queries,
                                 max_streams=self.settings.max_streams)
        self.tokens = TokenStore(self.redis, self.keys)
        self.ingest_limiter = RateLimiter(self.redis, self.keys, self.settings.ingest_rate_limit,
                                          self.settings.ingest_rate_window)
        self.write_limiter = RateLimiter(self.redis, self.keys, self.settings.write_rate_limit,
                                         self.settings.write_rate_window, what="write")
        self.history = History(self.settings.archive_dir, self.redis, self.keys, self.settings.archive_retention_days)
        self.auth_failures = FailedAuthentications(self.redis, self.keys, self.settings.auth_failure_limit,
                                                   self.settings.auth_failure_window)

    @classmethod
    def connect(cls, settings: Settings) -> Service:
        client = settings.redis_client(settings.redis_timeout, health_check_interval=15)
        return cls(settings, client, settings.keys)

    def snapshot(self) -> tuple[int, dict[str, dict], dict[str, dict]]:
        """The registry's version, queries and stream parameters (:meth:`Registry.snapshot`)."""
        return self.registry.snapshot()

    def streams(self) -> Streams:
        """The registered stream parameters, decoded once per registry version."""
        version = self.registry.version()
        if self._streams is None or self._streams[0] != version:
            version, _, params = self.snapshot()
            self._streams = (version, parse_streams(params))
        return self._streams[1]

    def authenticate(self, token: str, address: str) -> Principal | None:
        """The token's principal (None: wrong or revoked, counted against the address);
        429 first when the address failed too often."""
        self.bootstrap()
        pipe = self.redis.pipeline(transaction=False)
        judge = self.auth_failures.check(pipe, address)
        pipe.hget(self.tokens.key, token_id(token))
        failures, record = pipe.execute()
        judge(failures)  # before the token's record is looked at
        principal = self.tokens.verify(token, record)
        if principal is None:
            self.auth_failures.failed(address)
        return principal

    def audit(self, who: str, action: str, subject: str, details=None) -> None:
        self.registry.audit(who, action, subject, details)

    def bootstrap(self) -> None:
        """Create the first admin token once Redis can be reached (retried on requests until then)."""
        if self.bootstrapped:
            return
        admin = self.settings.admin_token.get_secret_value() if self.settings.admin_token else None
        self.generated_admin_token = self.tokens.bootstrap(admin)
        self.bootstrapped = True


def get_service(request: Request) -> Service:
    return request.app.state.service


ServiceDep = Annotated[Service, Depends(get_service)]

bearer = HTTPBearer(auto_error=False, description="a token from POST /api/tokens (or the admin token)")


def current_principal(request: Request, service: ServiceDep,
                      credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]) -> Principal:
    if credentials is None or not credentials.credentials:
        raise ApiError(401, "missing bearer token", headers={"WWW-Authenticate": "Bearer"})
    principal = service.authenticate(credentials.credentials, request.client.host if request.client else "unknown")
    if principal is None:
        raise ApiError(401, "invalid or revoked token", headers={"WWW-Authenticate": "Bearer"})
    return principal


TokenDep = Annotated[Principal, Depends(current_principal)]


def require(role: Role):
    def check(principal: TokenDep) -> Principal:
        if principal.role < role:
            raise ApiError(403, f"this needs the {role.name} role; the token has {principal.role.name}",
                           role=principal.role.name, required=role.name)
        return principal

    check.__name__ = f"require_{role.name}"
    return check


ViewerDep = Annotated[Principal, Depends(require(Role.viewer))]
AnalystDep = Annotated[Principal, Depends(require(Role.analyst))]
AdminDep = Annotated[Principal, Depends(require(Role.admin))]


def existing_query(service: ServiceDep, query_id: str) -> dict:
    """The registry entry of the query in the path, or 404."""
    entry = service.registry.query(query_id)
    if entry is None:
        raise ApiError(404, f"no query {query_id!r}", field="query_id")
    return entry


QueryDep = Annotated[dict, Depends(existing_query)]
