"""``python -m backend``: the API alone, on PENUMBRA_HOST:PENUMBRA_PORT (websocket
per-message deflate off unless PENUMBRA_WS_COMPRESSION is set)."""

from __future__ import annotations

import uvicorn

from contract.logs import configure

from . import Settings, create_app
from .main import server_options


def main() -> None:
    configure("api")
    settings = Settings()
    # uvicorn's own loggers go to the same handler (log_config None: it configures none)
    uvicorn.run(create_app(settings), log_level="info", log_config=None, **server_options(settings))


if __name__ == "__main__":
    main()
