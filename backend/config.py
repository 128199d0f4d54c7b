"""The service's settings: the shared ones (Redis, prefix, home) and the service's own,
environment variables with the ``PENUMBRA_`` prefix, each with a local default."""

from __future__ import annotations

from pydantic import Field, SecretStr, model_validator

from contract.registry import MAX_QUERIES, MAX_STREAMS
from contract.settings import SharedSettings

__all__ = ["Settings"]


class Settings(SharedSettings):
    """Where the service listens, which Redis it uses and the limits it enforces.

    >>> Settings(port=9000, admin_token="secret").port
    9000
    """

    redis_timeout: float = Field(2.0, gt=0, description="seconds before a Redis call counts as unavailable")
    host: str = Field("127.0.0.1", description="address the API listens on")
    port: int = Field(8000, ge=1, le=65535, description="port of the API (and the dashboard)")
    admin_token: SecretStr | None = Field(
        None, description="the first admin token; when unset and no admin exists, one is generated and printed once")
    cors_origins: list[str] = Field(default_factory=list, description="origins allowed by CORS (none: no CORS)")
    max_body_bytes: int = Field(8 * 1024 * 1024, ge=1024, description="largest request body; larger answers 413")
    ingest_max_events: int = Field(10_000, ge=1, description="most events in one POST /api/events")
    ingest_rate_limit: int = Field(200, ge=1, description="ingest requests per token per rate window; more answers 429")
    ingest_rate_window: int = Field(1, ge=1, description="length of the ingest rate window, seconds")
    auth_failure_limit: int = Field(20, ge=1, description=(
        "failed authentications per client address per window; more answers 429 (REST) or closes 4429 (websocket)"))
    auth_failure_window: int = Field(60, ge=1, description="length of the failed-authentication window, seconds")
    ws_queue: int = Field(1000, ge=10, description=(
        "matches and alarms waiting for one live-feed client; beyond, it is closed with 4008 and resumes"))
    ws_compression: bool = Field(False, description="per-message deflate on the websocket (costs CPU per client)")
    ws_poll: float = Field(1.0, gt=0, description=(
        "seconds between reads of the result streams when no pn:live message wakes the live feed"))
    ws_auth_timeout: float = Field(10.0, gt=0, description="seconds a websocket may take to send its token")
    ws_max_message_bytes: int = Field(64 * 1024, ge=1024, description=(
        "largest websocket message a client may send (a token, a subscription); larger closes with 1009"))
    ws_max_unauthenticated: int = Field(256, ge=1, description=(
        "websockets of this process still waiting for their token; more are closed at once with 1013"))
    max_connections: int = Field(4096, ge=16, description="open connections of this process; beyond, 503")
    header_timeout: float = Field(10.0, gt=0, description=(
        "seconds a request's headers may take from its first byte; beyond, 408 and the connection closed"))
    max_queries: int = Field(MAX_QUERIES, ge=1, description="queries the registry holds at most; beyond, 409")
    max_streams: int = Field(MAX_STREAMS, ge=1, description="streams the registry holds at most; beyond, 409")
    write_rate_limit: int = Field(60, ge=1, description=(
        "changes (POST, PUT, PATCH, DELETE but events and validation) per token per write window; more answers 429"))
    write_rate_window: int = Field(10, ge=1, description="length of the write rate window, seconds")
    notify: bool = Field(True, description="deliver alarm notifications to the contact points (backend/notify.py)")
    notify_poll: float = Field(0.5, gt=0, description="seconds between the notifier's looks when it has nothing to do")
    notify_timeout: float = Field(10.0, gt=0, description="seconds a webhook has to answer one notification")
    notify_give_up_minutes: float = Field(15.0, gt=0, description=(
        "minutes a notification is retried (1, 2, 4, ... 60 s apart) before it is kept as failed"))
    alertmanager_resend: float = Field(60.0, gt=0, description=(
        "seconds between two pushes of the active alarm instances to an Alertmanager contact point"))
    public_url: str | None = Field(None, description=(
        "the dashboard's address as people reach it, for links in notifications (default: http://host:port)"))

    @model_validator(mode="after")
    def _public_url(self) -> Settings:
        if not self.public_url:
            self.public_url = f"http://{self.host}:{self.port}"
        return self

