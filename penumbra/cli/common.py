"""What the commands share: their usage errors, reading a named file, stopping on a signal,
and where they send events."""

from __future__ import annotations

import argparse
import os
import signal

__all__ = ["Stop", "UsageError", "add_target", "read_text", "sink_of"]


class UsageError(Exception):
    """A bad option, query or input file: exit status 2 with a one-line message."""


class Parser(argparse.ArgumentParser):
    def error(self, message: str):
        raise UsageError(message)


class Stop:
    """SIGTERM or SIGINT: finish the batch in hand, then stop (a second one stops at once)."""

    def __init__(self):
        self.asked = False

    def __enter__(self):
        self.previous = {s: signal.signal(s, self._handle) for s in (signal.SIGINT, signal.SIGTERM)}
        return self

    def __exit__(self, *exc):
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)

    def _handle(self, signum, frame):
        if self.asked:
            raise KeyboardInterrupt
        self.asked = True

    def __call__(self) -> bool:
        return self.asked



def add_target(parser: argparse.ArgumentParser, events: bool = True) -> None:
    """The options that say where a command sends events or reads matches."""
    parser.add_argument("--api", default=os.environ.get("PENUMBRA_API", "http://127.0.0.1:8000"),
                        help="the API's URL (default $PENUMBRA_API or http://127.0.0.1:8000)")
    parser.add_argument("--token", default=os.environ.get("PENUMBRA_TOKEN"),
                        help="an API token (default $PENUMBRA_TOKEN); analyst or admin to send events")
    if events:
        parser.add_argument("--redis", metavar="URL", help="append straight to the ingest stream of the Redis at "
                                                           "URL instead of the API (the job validates the events)")
        parser.add_argument("--redis-prefix", default=os.environ.get("PENUMBRA_REDIS_PREFIX", "pn"),
                            help="key prefix with --redis (default $PENUMBRA_REDIS_PREFIX or pn)")
        parser.add_argument("--batch", type=int, default=500, help="events per request (default 500)")


def read_text(path: str, what: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError as error:
        raise UsageError(f"cannot read {what} {path!r}: {error.strerror}") from None
    except UnicodeDecodeError as error:
        raise UsageError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start})") from None


def sink_of(args: argparse.Namespace):
    from .feed import ApiSink, RedisSink

    if args.batch < 1:
        raise UsageError(f"--batch must be >= 1, got {args.batch}")
    if args.redis:
        return RedisSink(args.redis, args.redis_prefix)
    return ApiSink(args.api, args.token)


