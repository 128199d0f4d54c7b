"""How every process of Penumbra logs: one JSON object per line when its output is a file
(what ``penumbra up`` gives each child: ``var/log/<child>.log``), readable text on a
terminal (``PENUMBRA_LOG_FORMAT`` = ``json`` or ``text`` decides otherwise).

A JSON line holds ``time`` (UTC, ISO 8601 with milliseconds), ``level``, ``process``,
``logger``, ``message`` and whatever the call passed in ``extra`` (``query``, ``batch``,
``request``, ``first_id``, ...), so a log tool filters by any of them; ``error`` holds a
traceback.

>>> import io
>>> out = io.StringIO()
>>> configure("api", stream=out, form="json")
>>> logging.getLogger("penumbra.test").info("appended %d", 3, extra={"request": "r-1"})
>>> record = json.loads(out.getvalue())
>>> record["message"], record["request"], record["process"], record["level"]
('appended 3', 'r-1', 'api', 'info')
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import sys
from typing import IO

__all__ = ["JsonLines", "configure"]

#: The attributes every LogRecord has: what is not among them came in ``extra``.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "taskName"}


class JsonLines(logging.Formatter):
    """One JSON object per record."""

    def __init__(self, process: str):
        super().__init__()
        self.process = process

    def format(self, record: logging.LogRecord) -> str:
        out = {"time": datetime.datetime.fromtimestamp(record.created, datetime.timezone.utc)
               .isoformat(timespec="milliseconds").replace("+00:00", "Z"),
               "level": record.levelname.lower(), "process": self.process, "logger": record.name,
               "message": record.getMessage()}
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in out:
                out[key] = value
        if record.exc_info:
            out["error"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False, default=str)


def configure(process: str, level: int = logging.INFO, stream: IO[str] | None = None,
              form: str | None = None) -> None:
    """Send every log record of this process to ``stream`` (stderr), as JSON lines or text
    (``form``: ``json``, ``text``, or by default ``PENUMBRA_LOG_FORMAT``, else text on a
    terminal and JSON otherwise)."""
    stream = stream or sys.stderr
    form = form or os.environ.get("PENUMBRA_LOG_FORMAT", "auto")
    if form not in ("json", "text"):
        form = "text" if getattr(stream, "isatty", lambda: False)() else "json"
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonLines(process) if form == "json"
                         else logging.Formatter(f"%(asctime)s {process} %(name)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
