"""One format for every operator's saved state.

An operator's state is a dict of its declared fields (``Operator.STATE_FIELDS``), saved
with the operator's kind and the version of those fields (``Operator.STATE_VERSION``)::

    b"PNST" | format (1 byte) | zlib(pickle({"kind": ..., "version": ..., "fields": {...}}))

A state of an older version is brought up to date by the operator's migrations
(``Operator.STATE_MIGRATIONS``: version -> a function from that version's fields to the
next one's), each tested against a state the older code wrote (tests/unit/data/). A state
written before this format (no header) is version 0: its migration receives
``{"snapshot": <the old bytes>}`` and decodes them itself. A state of a newer version, of
another kind, or with fields other than the declared ones is refused with a
:class:`StateError` that says what it holds; nothing is guessed.

Adding, removing or changing a field is a new version with its migration
(tests/unit/test_state.py pins every operator's fields per version).

>>> data = dump("demo", 2, {"threshold": 0.5})
>>> load(data, "demo", 2, ("threshold",))
{'threshold': 0.5}
>>> load(data, "demo", 3, ("threshold", "floor"), {2: lambda f: {**f, "floor": 0.0}})
{'threshold': 0.5, 'floor': 0.0}
"""

from __future__ import annotations

import io
import pickle
import zlib
from types import MappingProxyType
from typing import Any, Callable, Mapping

__all__ = ["FORMAT", "MAGIC", "Migration", "RENAMED", "StateError", "dump", "load", "read_only", "unpickle"]

MAGIC = b"PNST"
#: the layout of the bytes around the fields (the header and its compression)
FORMAT = 1

#: a function from one version's fields to the next version's
Migration = Callable[[dict[str, Any]], dict[str, Any]]

#: classes saved under one name and now found under another: (module, name) -> (module, name)
RENAMED: dict[tuple[str, str], tuple[str, str]] = {
    ("penumbra.lossy.operator", "_read_only"): ("penumbra.state", "read_only"),
    ("penumbra.lossy.worlds", "Vague"): ("penumbra.lossy.queues", "Vague"),
}

#: what a state may name besides Penumbra's own classes (numpy arrays and plain containers)
_ALLOWED_MODULES = ("numpy", "collections", "copyreg", "datetime")
_ALLOWED_BUILTINS = frozenset({"bool", "bytearray", "bytes", "complex", "dict", "float", "frozenset", "int", "list",
                               "object", "range", "set", "slice", "str", "tuple"})


class StateError(ValueError):
    """A saved state this Penumbra cannot continue from; the message says why and what to do."""


def dump(kind: str, version: int, fields: Mapping[str, Any]) -> bytes:
    """The bytes of an operator's fields."""
    buffer = io.BytesIO()
    _Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump({"kind": kind, "version": version, "fields": dict(fields)})
    return MAGIC + bytes([FORMAT]) + zlib.compress(buffer.getvalue(), 1)


def load(data: bytes, kind: str, version: int, fields: tuple[str, ...],
         migrations: Mapping[int, Migration] | None = None) -> dict[str, Any]:
    """The fields of a state of ``kind`` as of ``version``, migrated from older versions;
    exactly the declared ``fields``, or a :class:`StateError`."""
    migrations = migrations or {}
    if not data.startswith(MAGIC):
        saved, found = {"snapshot": bytes(data)}, 0
    else:
        if len(data) <= len(MAGIC) or data[len(MAGIC)] != FORMAT:
            got = data[len(MAGIC)] if len(data) > len(MAGIC) else "none"
            raise StateError(f"{kind} operator state: unknown state format {got} (this Penumbra reads format {FORMAT})")
        try:
            body = unpickle(zlib.decompress(data[len(MAGIC) + 1:]))
        except zlib.error as error:
            raise StateError(f"{kind} operator state: unreadable ({error})") from None
        if body.get("kind") != kind:
            raise StateError(f"operator state of a {body.get('kind')!r} query, read as a {kind!r} one")
        saved, found = body["fields"], body["version"]
    if found > version:
        raise StateError(f"{kind} operator state version {found} is newer than this Penumbra's ({version}): "
                         f"run the Penumbra that wrote it, or start the query's state afresh")
    while found < version:
        if found not in migrations:
            written = "written before the versioned state format" if found == 0 else f"version {found}"
            raise StateError(f"{kind} operator state {written} cannot be migrated to version {version}: "
                             f"start the query's state afresh (a new checkpoint)")
        saved, found = migrations[found](saved), found + 1
    if set(saved) != set(fields):
        missing, extra = sorted(set(fields) - set(saved)), sorted(set(saved) - set(fields))
        raise StateError(f"{kind} operator state version {version} does not hold the declared fields "
                         f"(missing {missing}, unknown {extra})")
    return saved


def unpickle(data: bytes) -> Any:
    """What :func:`dump`'s pickler wrote (or an older operator's own pickle), naming only
    Penumbra's classes, numpy's and plain containers; classes that moved are found by
    :data:`RENAMED`; anything else is a :class:`StateError`."""
    try:
        return _Unpickler(io.BytesIO(data)).load()
    except (pickle.UnpicklingError, EOFError, AttributeError, ImportError, ValueError, TypeError) as error:
        raise StateError(f"operator state: unreadable ({error})") from None


def read_only(mapping: dict) -> MappingProxyType:
    """An event's attributes as saved (a read-only mapping is pickled as the dict it shows)."""
    return MappingProxyType(mapping)


class _Pickler(pickle.Pickler):
    def reducer_override(self, obj):
        if isinstance(obj, MappingProxyType):
            return read_only, (dict(obj),)
        return NotImplemented


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        module, name = RENAMED.get((module, name), (module, name))
        top = module.split(".")[0]
        if (top == "penumbra" or top in _ALLOWED_MODULES
                or (module == "builtins" and name in _ALLOWED_BUILTINS)):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"a state may not name {module}.{name}")
