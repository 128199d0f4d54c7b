"""``python -m backend``: the API alone, on PENUMBRA_HOST:PENUMBRA_PORT."""

from __future__ import annotations

import logging

import uvicorn

from . import Settings, create_app


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    settings = Settings()
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level="info")


if __name__ == "__main__":
    main()
