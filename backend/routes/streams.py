"""Stream parameters (templates, max_delay, pi, rho, miss_prob, gap): set by admins, read
by analysts (who write queries over them) with the attributes the streams' events carried
and when each was last heard from.

Validated by the core (``parse_streams``), which names the offending field; stored
through the versioned registry and audited. A stream's ``max_delay`` may not outlast the
identity horizon (event time read as milliseconds, the convention of the simulators and
the dashboard): a copy sent within the delay must still be known. A query keeps the parameters its streams
had when it was registered (re-register it to take new ones).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from contract.ingest import seen_sources
from contract.registry import RegistryFull
from penumbra.errors import ValidationError

from ..deps import AdminDep, AnalystDep, ServiceDep
from ..errors import ApiError
from ..models import StreamIn, StreamList, StreamOut
from . import errors

router = APIRouter(prefix="/streams", tags=["streams"])

StreamName = Annotated[str, Path(min_length=1, max_length=128, pattern=r"^[A-Za-z_][A-Za-z0-9_.\-]*$",
                                 description="the stream's name", examples=["seismic"])]


@router.put("/{name}", response_model=StreamOut, responses=errors(401, 403, 409),
            summary="Set a stream's parameters")
def put_stream(who: AdminDep, name: StreamName, body: StreamIn, service: ServiceDep) -> dict:
    params = body.model_dump(exclude_none=True)
    horizon_ms = service.settings.identity_horizon * 1000.0
    if params.get("max_delay", 0) > horizon_ms:
        raise ApiError(422, f"max_delay: {params['max_delay']:g} is longer than the identity horizon "
                            f"({horizon_ms:g} ms of event time, PENUMBRA_IDENTITY_HORIZON_HOURS = "
                            f"{service.settings.identity_horizon_hours:g}): a copy of an event sent again that late "
                            f"would be taken twice; lower max_delay or raise the horizon", field="max_delay")
    try:
        service.registry.put_streams({name: params}, who=who.label)
    except RegistryFull as error:
        raise ApiError(409, str(error), limit=service.settings.max_streams) from None
    except ValidationError as error:
        # the core names fields under the stream's name; the client sent them as the body
        field = error.field[len(name) + 1:] if error.field.startswith(name + ".") else error.field
        raise ApiError(422, f"{field}: {error.message}" if field else error.message, field=field or "body") from None
    return {"name": name, "params": params}


@router.get("", response_model=StreamList, responses=errors(401, 403), summary="List stream parameters")
def list_streams(who: AnalystDep, service: ServiceDep) -> dict:
    _, _, streams = service.snapshot()
    seen = seen_sources(service.redis, service.keys, streams)
    return {"items": [{"name": n, "params": p, **seen.get(n.casefold(), {})} for n, p in sorted(streams.items())]}


@router.get("/{name}", response_model=StreamOut, responses=errors(401, 403, 404),
            summary="Read a stream's parameters")
def get_stream(who: AnalystDep, name: StreamName, service: ServiceDep) -> dict:
    """Stream names compare case-insensitively (as in events and queries): the stream is
    answered under the name it was registered with."""
    streams = service.snapshot()[2]
    found = name if name in streams else next((n for n in streams if n.casefold() == name.casefold()), None)
    if found is None:
        raise ApiError(404, f"no parameters registered for stream {name!r}", field="name")
    return {"name": found, "params": streams[found],
            **seen_sources(service.redis, service.keys, [found]).get(found.casefold(), {})}
