"""The app factory: ``create_app(settings)`` builds the Penumbra API.

Routers live in ``backend/routes/`` (one per resource) and are mounted under ``/api``;
the live feed's websocket is ``/ws`` (its reader runs in the app's lifespan); the browser
dashboard is ``/`` (``backend/web.py``). OpenAPI is at ``/openapi.json``, its pages at
``/docs``.
"""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager

import redis
from fastapi import Depends, FastAPI
from fastapi.concurrency import run_in_threadpool
from fastapi.middleware.cors import CORSMiddleware
from fastapi.openapi.utils import get_openapi

from .config import Settings
from .deps import Service
from .errors import Response, install_error_handlers
from .idempotency import Idempotency
from .limits import AccessLog, BodySizeLimit, WriteRateLimit
from .live import Hub
from .models import EventIn
from .notify import Notifier
from .operations import Operations, reject_unknown_query
from .protocol import with_header_timeout
from .routes import (alarms, audit, events, explain, health, history, live, notifications, queries, results, silences,
                     streams, tokens, validate, verdicts)
from .web import HtmlPolicy, mount_frontend

__all__ = ["ROUTERS", "create_app", "server_options"]

log = logging.getLogger("penumbra.api")

ROUTERS = (health.router, queries.router, validate.router, events.router, streams.router, results.router,
           history.router, explain.router, alarms.router, silences.router, notifications.router, verdicts.router,
           audit.router, tokens.router)

DESCRIPTION = """Live monitoring of events with uncertain timestamps.

Authenticate with `Authorization: Bearer <token>`. Roles: **viewer** reads queries,
results, alarms and metrics; **analyst** also registers and changes queries, posts events
and acts on alarms; **admin** also sets stream parameters and manages tokens.
`GET /api/health` needs no token. Every error is `{"error": {"message": ..., ...}}`.
"""


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    service = Service.connect(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        try:
            await run_in_threadpool(service.bootstrap)
        except redis.RedisError as error:
            log.warning("Redis not reachable at start (%s); the admin token is set up once it is", error)
        await app.state.live.start()
        await app.state.notifier.start()
        try:
            yield
        finally:
            await app.state.notifier.stop()
            await app.state.live.stop()
            service.history.close()
            service.redis.close()

    app = FastAPI(title="Penumbra", version="0.1.0", description=DESCRIPTION, lifespan=lifespan,
                  dependencies=[Depends(reject_unknown_query)], default_response_class=Response)
    app.state.service = service
    app.state.operations = Operations(app)
    app.state.live = Hub(service)
    app.state.notifier = Notifier(service)
    install_error_handlers(app)
    for router in ROUTERS:
        app.include_router(router, prefix="/api")
    app.include_router(live.router)
    mount_frontend(app)

    if settings.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=settings.cors_origins, allow_credentials=False,
                           allow_methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
                           allow_headers=["Authorization", "Content-Type", "Idempotency-Key"],
                           expose_headers=["Idempotent-Replayed", "Retry-After"])
    app.add_middleware(WriteRateLimit)
    app.add_middleware(HtmlPolicy)
    app.add_middleware(Idempotency)     # a replayed answer counts against no limit
    app.add_middleware(BodySizeLimit, limit=settings.max_body_bytes)
    app.add_middleware(AccessLog)

    def openapi() -> dict:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, description=app.description,
                                 routes=app.routes)
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            components["EventIn"] = EventIn.model_json_schema(ref_template="#/components/schemas/{model}")
            body = schema["paths"]["/api/events"]["post"]["requestBody"]["content"]["application/json"]["schema"]
            body["oneOf"][1]["maxItems"] = settings.ingest_max_events
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi
    return app


def server_options(settings: Settings) -> dict:
    """uvicorn's options for this service: where it listens; per-message deflate on the
    websocket only when ``PENUMBRA_WS_COMPRESSION`` asks for it (uvicorn's default is on);
    the largest websocket message a client may send (a token, a subscription: uvicorn's
    default, 16 MiB, let 40 sockets take 1.5 GB before authenticating); at most
    ``max_connections`` at once (beyond, 503); a request's headers within
    ``header_timeout`` seconds (beyond, 408 and closed: :mod:`backend.protocol`); no access
    log of uvicorn's own (the app logs each request as JSON); ten seconds for requests
    under way at a stop."""
    return {"host": settings.host, "port": settings.port, "ws_per_message_deflate": settings.ws_compression,
            "ws_max_size": settings.ws_max_message_bytes, "limit_concurrency": settings.max_connections,
            "http": with_header_timeout(settings.header_timeout), "access_log": False,
            "timeout_graceful_shutdown": 10}
