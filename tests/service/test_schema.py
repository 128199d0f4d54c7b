"""Schemathesis over the OpenAPI schema: generated requests (valid and invalid) to every
operation, with the admin token unless the case broke its headers on purpose; no server
error, every invalid request refused, every response as documented."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from backend import Settings, create_app

from .conftest import ADMIN_TOKEN, SETTINGS, own_app_settings

# Schemathesis reads the schema when the module loads, before the session's Redis runs:
# the OpenAPI document of an app that is never started (``from_asgi`` would fetch it
# through the app's lifespan and leave that running for the whole session: a live feed and
# a notifier retrying a Redis that is not there, every second). The calls go to an app of
# the module's own over the session's Redis, whose lifespan (live feed, notifier)
# schemathesis runs around each operation's test.
_never_started = create_app(Settings(redis_url="redis://127.0.0.1:1/0", **SETTINGS))
schema = schemathesis.openapi.from_dict(_never_started.openapi())
schema.app, schema.location = _never_started, "/openapi.json"   # as from_asgi sets them: the calls are in-process


@pytest.fixture(scope="module")
def app(redis_server):
    return create_app(own_app_settings(redis_server, "schema")[1])


def _headers_made_invalid(case) -> bool:
    """Whether the case's headers were generated to break the schema (its bearer token
    dropped or malformed): sent as they are, so the refusal is what gets checked."""
    components = case.meta.components if case.meta is not None else {}
    return any(location.value == "header" and info.mode.value == "negative" for location, info in components.items())


@schema.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
def test_api(case, app):
    # Not checked: that every schema-valid request is accepted. A query's text, a
    # threshold below a join's floor or an event's histogram are checked by the core,
    # beyond what JSON Schema says; they answer 422 naming the field (tested elsewhere).
    headers = None if _headers_made_invalid(case) else {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    response = case.call_and_validate(app=app, headers=headers,
                                      excluded_checks=[schemathesis.checks.positive_data_acceptance])
    assert headers is None or response.status_code != 401, "the admin token was refused: the call reached the wrong app"
