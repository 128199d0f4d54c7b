"""What the OpenAPI schema says of each path: its methods (the ``Allow`` header of a
405) and the query parameters of each operation (anything else is refused, so a typo
such as ``?befor=`` is an error rather than silently ignored)."""

from __future__ import annotations

import re
from functools import cached_property

from fastapi import FastAPI
from starlette.requests import HTTPConnection

from .errors import ApiError

__all__ = ["Operations", "reject_unknown_query"]


class Operations:
    def __init__(self, app: FastAPI):
        self.app = app

    @cached_property
    def paths(self) -> list[tuple[str, re.Pattern, dict[str, frozenset[str]]]]:
        out = []
        for path, item in self.app.openapi()["paths"].items():
            pattern = re.compile("^" + re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(path)) + "$")
            methods = {method.upper(): frozenset(p["name"] for p in operation.get("parameters", ())
                                                 if p.get("in") == "query")
                       for method, operation in item.items()}
            out.append((path, pattern, methods))
        return out

    def allowed_methods(self, path: str) -> list[str]:
        return sorted({m for _, pattern, methods in self.paths if pattern.match(path) for m in methods})

    def query_names(self, path: str, method: str) -> frozenset[str] | None:
        """The query parameters of the operations that ``method`` on ``path`` may be
        (None: no documented operation, such as the schema pages)."""
        found = [methods[method] for _, pattern, methods in self.paths if method in methods and pattern.match(path)]
        return frozenset().union(*found) if found else None


def reject_unknown_query(request: HTTPConnection) -> None:
    """A global dependency: 422 for a query parameter the operation does not declare
    (REST only: the websocket takes none)."""
    if request.scope["type"] != "http" or not request.query_params:
        return
    names = request.app.state.operations.query_names(request.url.path, request.method)
    if names is None:
        return
    unknown = sorted(set(request.query_params) - names)
    if unknown:
        raise ApiError(422, f"unknown query parameter {unknown[0]!r}"
                       + (f" (expected one of: {', '.join(sorted(names))})" if names else ""), field=unknown[0])
