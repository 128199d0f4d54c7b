"""Stream parameters (templates, max_delay, pi, rho, miss_prob, gap): admins only.

Validated by the core (``parse_streams``), which names the offending field; stored
through the versioned registry and audited. A query keeps the parameters its streams
had when it was registered (re-register it to take new ones).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from contract.registry import RegistryFull
from penumbra.errors import ValidationError

from ..deps import AdminDep, ServiceDep
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
def list_streams(who: AdminDep, service: ServiceDep) -> dict:
    _, _, streams = service.snapshot()
    return {"items": [{"name": n, "params": p} for n, p in sorted(streams.items())]}


@router.get("/{name}", response_model=StreamOut, responses=errors(401, 403, 404),
            summary="Read a stream's parameters")
def get_stream(who: AdminDep, name: StreamName, service: ServiceDep) -> dict:
    params = service.snapshot()[2].get(name)
    if params is None:
        raise ApiError(404, f"no parameters registered for stream {name!r}", field="name")
    return {"name": name, "params": params}
