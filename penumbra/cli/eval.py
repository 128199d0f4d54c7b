"""``penumbra eval``: one query over a file of events, no services needed.

It prints one JSON match per line on stdout and nothing else there; ``--stats`` prints
one JSON object of counters instead. ``--engine spark`` runs the same query through the
pipeline (:mod:`penumbra.cli.pipeline`) and prints the same matches.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import sys
import time

from penumbra.engine import compile_query
from penumbra.errors import PenumbraError
from penumbra.events import Streams, event_to_json, load_events, loads, parse_streams

from .common import UsageError, read_text

__all__ = ["DEFAULT_BLOCK", "add_parser", "run"]

DEFAULT_BLOCK = 1000


def add_parser(commands) -> None:
    run = commands.add_parser("eval", help="run one query over a file of events")
    query = run.add_mutually_exclusive_group(required=True)
    query.add_argument("--query", help="the query text")
    query.add_argument("--query-file", help="a file holding the query text")
    run.add_argument("--streams", help="stream parameters (JSON object keyed by stream name)")
    run.add_argument("--events", required=True, help="events, one JSON object per line")
    run.add_argument("--engine", choices=("local", "spark"), default="local")
    run.add_argument("--block-size", type=int, default=None,
                     help=f"events per block (micro-batch, with --engine spark); default {DEFAULT_BLOCK}")
    run.add_argument("--stats", action="store_true", help="print counters instead of matches")


def run(args: argparse.Namespace) -> int:
    if args.block_size is not None and args.block_size < 1:
        raise UsageError(f"--block-size must be >= 1, got {args.block_size}")
    text = args.query if args.query is not None else read_text(args.query_file, "query file")
    try:
        streams = parse_streams(loads(read_text(args.streams, "streams file"))) if args.streams else Streams()
    except PenumbraError as error:
        raise UsageError(f"{args.streams}: {error}") from None
    try:
        operator = compile_query(text, streams)
    except PenumbraError as error:
        raise UsageError(f"query: {error}") from None
    # the events read live until the end: read with the garbage collector off, then frozen,
    # they are never scanned by it (else its first collection after reading would scan every
    # one of them, and so would each full collection while the operator runs)
    gc.disable()
    try:
        events, rejected = load_events(args.events, streams)
    except OSError as error:
        raise UsageError(f"cannot read events file {args.events!r}: {error.strerror}") from None
    finally:
        gc.freeze()
        gc.enable()
    if rejected:
        first = rejected[0]
        more = f" (and {len(rejected) - 1} more bad lines)" if len(rejected) > 1 else ""
        raise UsageError(f"{args.events}:{first.line}: {first.error}{more}")
    if args.engine == "spark":
        return _spark(args, text, streams, events)

    started = time.perf_counter()
    out = sys.stdout
    matches = late = 0
    block = args.block_size or DEFAULT_BLOCK
    for start in range(0, len(events), block):
        result = operator.feed(events[start:start + block])
        matches += len(result.matches)
        late += len(result.late)
        if not args.stats and len(result.matches):
            out.write("".join(json.dumps(m.to_json()) + "\n" for m in result.matches))
    result = operator.flush()
    matches += len(result.matches)
    late += len(result.late)
    if not args.stats and len(result.matches):
        out.write("".join(json.dumps(m.to_json()) + "\n" for m in result.matches))
    seconds = time.perf_counter() - started
    if args.stats:
        counters = {k: (v if math.isfinite(v) else None) for k, v in operator.counters.items()
                    if k not in ("events", "matches")}
        out.write(json.dumps({"events": len(events), "matches": matches, "seconds": seconds,
                              "not_processed": late, **counters}) + "\n")
    elif late:
        print(f"penumbra: {late} event(s) not processed (late or not joinable); --stats counts them",
              file=sys.stderr)
    return 0


def _spark(args: argparse.Namespace, text: str, streams: Streams, events: list) -> int:
    """The same query through the Spark pipeline: a private Redis and job, same output."""
    try:
        from .pipeline import PipelineError, evaluate
    except ImportError as error:
        raise UsageError(f"--engine spark needs the Spark extra (pip install 'penumbra[spark]'): {error}") from None
    # the events the local engine reads (a repeated identity once), so that both cut the
    # same blocks
    lines = [json.dumps(event_to_json(event)) for event in events]
    try:
        # the local engine's blocks: an event beyond its max delay is late alike in both
        matches, stats = evaluate(text, streams.to_json(), lines, batch_rows=args.block_size or DEFAULT_BLOCK)
    except (PipelineError, RuntimeError) as error:
        print(f"penumbra: error: {error}".replace("\n", " "), file=sys.stderr)
        return 1
    if args.stats:
        sys.stdout.write(json.dumps(stats) + "\n")
    else:
        sys.stdout.write("".join(json.dumps(m) + "\n" for m in matches))
        if stats["not_processed"]:
            print(f"penumbra: {stats['not_processed']} event(s) not processed (late or not joinable); "
                  f"--stats counts them", file=sys.stderr)
    return 0
