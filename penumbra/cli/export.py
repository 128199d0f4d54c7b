"""``penumbra export QUERY``: a query's archived matches over a period, as CSV or Parquet.

Reads the archive's files where they are (``--archive``, default ``PENUMBRA_ARCHIVE`` or
``<home>/var/archive``), no service needed; ``--redis`` adds the live tail (matches the
archive may not hold yet). The rows stream in time order, a chunk at a time, to the
file or to stdout.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from .common import UsageError

__all__ = ["add_parser", "run"]


def add_parser(commands) -> None:
    exp = commands.add_parser("export", help="a query's archived matches over a period, as CSV or Parquet")
    exp.add_argument("query", help="the query's id")
    exp.add_argument("--since", help="from this time: ISO 8601 (UTC unless it names its zone) or epoch ms")
    exp.add_argument("--until", help="before this time (same forms; default: now)")
    exp.add_argument("--last", help="instead of --since: the last 90m, 24h, 7d ...")
    exp.add_argument("--key", help='only matches whose key has these attributes, a JSON object: {"region": 17}')
    exp.add_argument("--min-prob", type=float, help="only matches at least this probable")
    exp.add_argument("--format", choices=("csv", "parquet"), default="csv")
    exp.add_argument("--output", "-o", help="the file to write (default: stdout)")
    exp.add_argument("--archive", help="the archive's folder (default: the settings')")
    exp.add_argument("--redis", help="a Redis URL: also the live tail of the query's result stream")
    exp.add_argument("--redis-prefix", help="the key prefix there (default: the settings')")


def run(args) -> int:
    try:
        from contract.history import Filters, History, period_of
        from contract.settings import SharedSettings
    except ImportError as error:
        raise UsageError(f"export needs pyarrow and duckdb (pip install 'penumbra[service]'): {error}") from None
    settings = SharedSettings(**({"redis_prefix": args.redis_prefix} if args.redis_prefix else {}))
    try:
        period = period_of(args.since, args.until, args.last, int(time.time() * 1000))
    except ValueError as error:
        raise UsageError(str(error)) from None
    key = None
    if args.key is not None:
        try:
            key = json.loads(args.key)
        except ValueError:
            key = None
        if not isinstance(key, dict):
            raise UsageError('--key must be a JSON object of attributes, e.g. {"region": 17}')
    if args.min_prob is not None and not 0 <= args.min_prob <= 1:
        raise UsageError("--min-prob must be between 0 and 1")
    root = Path(args.archive) if args.archive else settings.archive_dir
    client = None
    if args.redis:
        import redis

        client = redis.Redis.from_url(args.redis, socket_timeout=30)
    history = History(root, client, settings.keys)
    if client is None and not history.knows(args.query):
        raise UsageError(f"the archive {root} holds nothing of query {args.query!r}")
    chunks = history.export(args.query, Filters(period, key, args.min_prob), args.format)
    out = open(args.output, "wb") if args.output else sys.stdout.buffer
    try:
        for chunk in chunks:
            out.write(chunk)
    finally:
        if args.output:
            out.close()
        else:
            out.flush()
    return 0
