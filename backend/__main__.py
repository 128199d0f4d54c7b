"""``python -m backend``: the API alone, on PENUMBRA_HOST:PENUMBRA_PORT (websocket
per-message deflate off unless PENUMBRA_WS_COMPRESSION is set)."""

from __future__ import annotations

import logging

import uvicorn

from . import Settings, create_app
from .main import server_options


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    settings = Settings()
    uvicorn.run(create_app(settings), log_level="info", **server_options(settings))


if __name__ == "__main__":
    main()
