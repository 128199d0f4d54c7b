"""The browser dashboard: ``mount_frontend(app)`` serves ``frontend/`` from the app's own origin.

``GET /`` is the dashboard's page, ``/static/...`` its modules and styles, and
``/static/plotly.min.js`` the Plotly.js that ships inside the installed ``plotly`` Python
package, so the page loads nothing from any other origin (its Content-Security-Policy
says so to the browser too). There is no build step: the modules are plain JavaScript.

>>> from fastapi import FastAPI
>>> app = FastAPI()
>>> mount_frontend(app)
>>> sorted(r.path for r in app.routes if r.path in ("/", "/static/plotly.min.js", "/static"))
['/', '/static', '/static/plotly.min.js']
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import re
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from .errors import error_response

__all__ = ["CONTENT_SECURITY_POLICY", "FRONTEND", "HtmlPolicy", "mount_frontend", "plotly_js"]

#: The dashboard's static files (index.html, app.css, js/).
FRONTEND = Path(__file__).resolve().parents[1] / "frontend"

#: Only the app's own origin: scripts, styles, data and the websocket (``'self'`` covers
#: ws:// and wss:// to the same host). Plotly sets inline styles on its SVG, hence
#: ``'unsafe-inline'`` for styles only.
CONTENT_SECURITY_POLICY = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
                           "img-src 'self' data: blob:; font-src 'self' data:; connect-src 'self'; "
                           "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'")

_PAGE_HEADERS = {"Content-Security-Policy": CONTENT_SECURITY_POLICY, "Cache-Control": "no-cache",
                 "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"}


def plotly_js() -> Path | None:
    """plotly.min.js of the installed ``plotly`` package, or None when it is not installed."""
    spec = importlib.util.find_spec("plotly")
    if spec is None or spec.origin is None:
        return None
    found = Path(spec.origin).parent / "package_data" / "plotly.min.js"
    return found if found.is_file() else None


class _Static(StaticFiles):
    """StaticFiles that revalidates (the files change with the code, not per release), tells
    the browser not to guess content types, and gives every file the page's policy (so the
    page read as ``/static/index.html`` is framed and scripted no more than at ``/``)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_with_headers(message):
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], *_encoded(_PAGE_HEADERS)]
            await send(message)

        await super().__call__(scope, receive, send_with_headers)


def _encoded(headers: dict[str, str]) -> list[tuple[bytes, bytes]]:
    return [(name.lower().encode(), value.encode()) for name, value in headers.items()]


#: The OpenAPI pages (/docs) load Swagger UI from its CDN and start it with an inline script:
#: those, and nothing else, may run; no page of the service may be framed.
DOCS_SOURCES = "https://cdn.jsdelivr.net"
_INLINE_SCRIPT = re.compile(rb"<script>(.*?)</script>", re.S)


class HtmlPolicy:
    """Every HTML answer of the app carries a Content-Security-Policy, ``frame-ancestors
    'none'`` and ``nosniff``: the dashboard its own (set where it is served), any other page
    (the OpenAPI docs) one that allows its CDN and the hashes of its own inline scripts."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in ("GET", "HEAD") or scope["path"].startswith("/api/"):
            await self.app(scope, receive, send)  # pages are read; the API answers JSON
            return
        held: dict = {}

        async def send_with_policy(message):
            if message["type"] == "http.response.start":
                headers = dict(message.get("headers", []))
                html = headers.get(b"content-type", b"").startswith(b"text/html")
                if not html or b"content-security-policy" in headers:
                    await send(message)
                    return
                held["start"], held["body"] = message, b""
                return
            if "start" not in held:
                await send(message)
                return
            held["body"] += message.get("body", b"")
            if message.get("more_body"):
                return
            start = held.pop("start")
            start["headers"] = [*start.get("headers", []), *_encoded(_docs_headers(held["body"]))]
            await send(start)
            await send({"type": "http.response.body", "body": held["body"]})

        await self.app(scope, receive, send_with_policy)


def _docs_headers(body: bytes) -> dict[str, str]:
    hashes = " ".join(f"'sha256-{base64.b64encode(hashlib.sha256(script).digest()).decode()}'"
                      for script in _INLINE_SCRIPT.findall(body))
    policy = (f"default-src 'self'; script-src 'self' {DOCS_SOURCES} {hashes}; style-src 'self' {DOCS_SOURCES}; "
              "img-src 'self' data: https://fastapi.tiangolo.com; connect-src 'self'; object-src 'none'; "
              "base-uri 'none'; frame-ancestors 'none'; form-action 'self'")
    return {"Content-Security-Policy": policy, "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
            "X-Frame-Options": "DENY"}


def mount_frontend(app: FastAPI, folder: Path = FRONTEND) -> None:
    """Serve the dashboard at ``/`` and its files under ``/static`` (none in the OpenAPI
    schema). Routes are matched in order, so the API's own routes stay first."""
    index = folder / "index.html"
    plotly = plotly_js()

    def dashboard() -> FileResponse:
        return FileResponse(index, media_type="text/html", headers=_PAGE_HEADERS)

    def plotly_bundle():
        if plotly is None:
            return error_response(404, "Plotly.js is not installed: pip install plotly")
        return FileResponse(plotly, media_type="text/javascript",
                            headers={"Cache-Control": "public, max-age=86400", "X-Content-Type-Options": "nosniff"})

    app.add_api_route("/", dashboard, methods=["GET", "HEAD"], include_in_schema=False, name="dashboard")
    app.add_api_route("/static/plotly.min.js", plotly_bundle, methods=["GET"], include_in_schema=False,
                      name="plotly")
    app.mount("/static", _Static(directory=folder, check_dir=False), name="static")
