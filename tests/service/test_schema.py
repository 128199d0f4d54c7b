"""Schemathesis over the OpenAPI schema: generated requests (valid and invalid) to every
operation, with the admin token unless the case broke its headers on purpose; no server
error, every invalid request refused, every response as documented."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from backend import Settings, create_app

from .conftest import ADMIN_TOKEN, SETTINGS

# Schemathesis reads the schema when the module loads, before the session's Redis runs:
# the app is built with the session's settings, and its Redis connection is the
# session app's (set below).
app = create_app(Settings(redis_url="redis://127.0.0.1:1/0", **SETTINGS))
schema = schemathesis.openapi.from_asgi("/openapi.json", app)


@pytest.fixture(autouse=True, scope="module")
def _session_redis(client):
    app.state.service = client.app.state.service


def _headers_made_invalid(case) -> bool:
    """Whether the case's headers were generated to break the schema (its bearer token
    dropped or malformed): sent as they are, so the refusal is what gets checked."""
    components = case.meta.components if case.meta is not None else {}
    return any(location.value == "header" and info.mode.value == "negative" for location, info in components.items())


@schema.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
def test_api(case):
    # Not checked: that every schema-valid request is accepted. A query's text, a
    # threshold below a join's floor or an event's histogram are checked by the core,
    # beyond what JSON Schema says; they answer 422 naming the field (tested elsewhere).
    headers = None if _headers_made_invalid(case) else {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    case.call_and_validate(headers=headers, excluded_checks=[schemathesis.checks.positive_data_acceptance])
