"""``penumbra replay FILE``: an events file sent to a running Penumbra at a chosen speed."""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Iterator

from .common import Stop, UsageError, add_target, sink_of
from .feed import FeedError, Pace, Progress, send

__all__ = ["add_parser", "run"]


def add_parser(commands) -> None:
    rep = commands.add_parser("replay", help="send a JSONL events file to Penumbra at a chosen speed")
    rep.add_argument("file", help="events, one JSON object per line")
    pace = rep.add_mutually_exclusive_group()
    pace.add_argument("--rate", type=float, help="events per second")
    pace.add_argument("--speed", type=float, help="X times the pace of the events' own times (0: as fast as "
                                                  "Penumbra takes them; the default)")
    rep.add_argument("--units-per-second", type=float, default=1000.0,
                     help="what one unit of the events' times is, with --speed (default 1000: milliseconds)")
    add_target(rep)


def _as_item(line: bytes) -> bytes:
    """A line as one item of the request's JSON list: itself when it is JSON, else the line
    as a JSON string, so that Penumbra rejects it alone (with its reason, in the dead-letter
    stream) and the valid events around it are kept."""
    try:
        json.loads(line)
        return line
    except ValueError:  # not JSON, or not UTF-8
        return json.dumps(line.decode("utf-8", errors="replace")).encode()


def _replay_schedule(path: str, args: argparse.Namespace) -> Iterator[tuple[float, bytes]]:
    """``(due, line)`` per non-blank line: due from the rate, or from the events' own times."""
    first = None
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle):
            line = raw.strip()
            if not line:
                continue
            line = _as_item(line)
            if args.rate:
                yield number / args.rate, line
                continue
            if not args.speed:
                yield 0.0, line
                continue
            t = _event_time(line)
            if t is not None:
                first = t if first is None else first
                due = max(0.0, (t - first) / args.units_per_second)
            else:
                due = 0.0  # no readable time: with the events before it (Penumbra will say what is wrong)
            yield due, line


def _event_time(line: bytes) -> float | None:
    try:
        ts = json.loads(line)["ts"]
        value = ts["detected"] if "detected" in ts else ts["lo"]
        return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None
    except (ValueError, KeyError, TypeError):
        return None


def run(args: argparse.Namespace) -> int:
    if args.rate is not None and not (math.isfinite(args.rate) and args.rate > 0):
        raise UsageError(f"--rate must be a positive number of events per second, got {args.rate:g}")
    if args.speed is not None and not (math.isfinite(args.speed) and args.speed >= 0):
        raise UsageError(f"--speed must be >= 0, got {args.speed:g}")
    if not (math.isfinite(args.units_per_second) and args.units_per_second > 0):
        raise UsageError(f"--units-per-second must be positive, got {args.units_per_second:g}")
    try:
        with open(args.file, "rb") as handle:
            total = sum(1 for line in handle if line.strip())
    except OSError as error:
        raise UsageError(f"cannot read events file {args.file!r}: {error.strerror}") from None
    started = time.monotonic()
    try:
        with sink_of(args) as sink, Stop() as stop:
            paced = args.rate is not None or bool(args.speed)
            tally = send(sink, _replay_schedule(args.file, args), Pace(1.0 if paced else 0.0),
                         Progress(Path(args.file).name, total), args.batch, stop)
    except FeedError as error:
        print(f"penumbra replay: error: {error}", file=sys.stderr)
        return 1
    seconds = time.monotonic() - started
    summary = {"file": args.file, **tally.to_json(), "seconds": round(seconds, 3),
               "events_per_second": round(tally.sent / seconds, 1) if seconds else None}
    print(json.dumps(summary))
    return 0 if tally.sent == total else 1
