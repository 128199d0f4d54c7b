"""Checks on decoded JSON that stream parameters and events share: an object, no unknown
fields, a name. Each tries the exact JSON type first (see :mod:`.model`)."""

from __future__ import annotations

import re
from collections.abc import Set
from typing import Any, Mapping

from ..errors import ValidationError

__all__: list[str] = []

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]{0,127}\Z")
#: Stream names and attribute keys already found valid, so the pattern runs once per
#: distinct name, not once per event; bounded, as names come from the input.
_VALID_NAMES: set[str] = set()
_MAX_VALID_NAMES = 4096


def _expect_object(value: Any, field_name: str) -> Mapping[str, Any]:
    if type(value) is not dict and not isinstance(value, Mapping):
        raise ValidationError(field_name, f"must be a JSON object, got {_json_type(value)}")
    return value


def _json_type(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean",
            int: "number", float: "number", type(None): "null"}.get(type(value), type(value).__name__)


def _reject_unknown(obj: Mapping[str, Any], allowed: Set[str], where: str) -> None:
    unknown = sorted(set(obj) - allowed, key=str)
    if unknown:
        prefix = f"{where}." if where else ""
        raise ValidationError(f"{prefix}{unknown[0]}",
                              f"unknown field (expected one of: {', '.join(sorted(allowed))})")


def _name(value: Any, field_name: str) -> str:
    if type(value) is str and value in _VALID_NAMES:
        return value
    if not isinstance(value, str):
        raise ValidationError(field_name, f"must be a string, got {_json_type(value)}")
    if not _NAME.match(value):
        raise ValidationError(field_name, f"must be a name of letters, digits, '_', '.', '-' "
                              f"starting with a letter or '_' (at most 128), got {value!r}")
    if len(_VALID_NAMES) < _MAX_VALID_NAMES:
        _VALID_NAMES.add(value)
    return value
