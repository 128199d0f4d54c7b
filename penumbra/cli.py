"""The ``penumbra`` command.

``penumbra eval`` runs one query over a file of events, no services needed::

    penumbra eval --query "SELECT * FROM SEISMIC A, ACOUSTIC B WHERE WINDOW(A, B) = 2000
                           WITH THRESHOLD 0.6" --streams streams.json --events events.jsonl

It prints one JSON match per line on stdout and nothing else there; ``--stats`` prints
one JSON object of counters instead. A bad query, events file or option exits with
status 2 and a one-line message on stderr.

``penumbra simulate SCENARIO`` sends a scenario's simulated sensors to a running Penumbra
(or writes them to a file) and can write the ground truth; ``penumbra check TRUTH``
compares alarms with it; ``penumbra replay FILE`` sends an events file at a chosen speed;
``penumbra up`` starts the whole system (docs/demo.md, docs/up.md).
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import signal
import sys
import time
from pathlib import Path
from typing import Iterator, Sequence

from .engine import compile_query
from .errors import PenumbraError
from .events import Streams, load_events, load_streams

__all__ = ["main"]

DEFAULT_BLOCK = 1000


class UsageError(Exception):
    """A bad option, query or input file: exit status 2 with a one-line message."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        raise UsageError(message)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="penumbra", description="Monitoring live events whose timestamps are uncertain.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    run = commands.add_parser("eval", help="run one query over a file of events")
    query = run.add_mutually_exclusive_group(required=True)
    query.add_argument("--query", help="the query text")
    query.add_argument("--query-file", help="a file holding the query text")
    run.add_argument("--streams", help="stream parameters (JSON object keyed by stream name)")
    run.add_argument("--events", required=True, help="events, one JSON object per line")
    run.add_argument("--engine", choices=("local", "spark"), default="local")
    run.add_argument("--block-size", type=int, default=None,
                     help=f"events per block (micro-batch); default {DEFAULT_BLOCK}, or the job's own with "
                          f"--engine spark")
    run.add_argument("--stats", action="store_true", help="print counters instead of matches")
    sim = commands.add_parser("simulate", help="send a scenario's simulated sensors to Penumbra (simulate --help)",
                              description="Simulated sensors that know the truth: " + ", ".join(
                                  f"{name} ({sc.title.lower()})" for name, sc in _scenarios().items())
                              + ". docs/demo.md tells each story.")
    sim.add_argument("scenario", choices=sorted(_scenarios()))
    sim.add_argument("--rate", type=float, default=50.0, help="events per second (default 50)")
    sim.add_argument("--duration", type=float, default=60.0,
                     help="seconds of simulated time (default 60); with --forever, the length of each round")
    sim.add_argument("--seed", type=int, default=0, help="random seed (default 0): the same seed, the same world")
    sim.add_argument("--speed", type=float, default=1.0,
                     help="1 sends in real time (default), 10 ten times faster, 0 as fast as Penumbra takes it")
    sim.add_argument("--forever", action="store_true", help="go on, round after round, until stopped (the demo)")
    sim.add_argument("--truth", help="write the ground truth (every query's true matches) to this JSON file")
    sim.add_argument("--out", help="write the events to this JSONL file instead of sending them "
                                   "(times from 0, ids without a run prefix)")
    sim.add_argument("--streams-out", metavar="FILE",
                     help="write the scenario's stream parameters to this JSON file (for eval --streams)")
    sim.add_argument("--setup", action="store_true",
                     help="first register the scenario's streams (needs an admin token) and queries")
    _add_target(sim)
    rep = commands.add_parser("replay", help="send a JSONL events file to Penumbra at a chosen speed")
    rep.add_argument("file", help="events, one JSON object per line")
    pace = rep.add_mutually_exclusive_group()
    pace.add_argument("--rate", type=float, help="events per second")
    pace.add_argument("--speed", type=float, help="X times the pace of the events' own times (0: as fast as "
                                                  "Penumbra takes them; the default)")
    rep.add_argument("--units-per-second", type=float, default=1000.0,
                     help="what one unit of the events' times is, with --speed (default 1000: milliseconds)")
    _add_target(rep)
    chk = commands.add_parser("check", help="compare alarms with a simulation's ground truth")
    chk.add_argument("truth", help="the file simulate --truth wrote")
    where = chk.add_mutually_exclusive_group()
    where.add_argument("--matches", help="matches, one JSON object per line (eval's output); the truth "
                                         "must hold one query, or name it with --query")
    chk.add_argument("--query", help="the query id to check (default: every query of the truth)")
    chk.add_argument("--threshold", type=float, help="alarm threshold (default: the query's own)")
    _add_target(chk, events=False)
    # `penumbra up` parses its own options (backend/up.py): everything after `up` goes there
    up = commands.add_parser("up", help="start Redis, the Spark job and the API on this machine (up --help)",
                             add_help=False, prefix_chars="\0")
    up.add_argument("options", nargs="*")
    return parser


def _scenarios():
    from .scenarios import SCENARIOS

    return SCENARIOS


def _add_target(parser: argparse.ArgumentParser, events: bool = True) -> None:
    parser.add_argument("--api", default=os.environ.get("PENUMBRA_API", "http://127.0.0.1:8000"),
                        help="the API's URL (default $PENUMBRA_API or http://127.0.0.1:8000)")
    parser.add_argument("--token", default=os.environ.get("PENUMBRA_TOKEN"),
                        help="an API token (default $PENUMBRA_TOKEN); analyst or admin to send events")
    if events:
        parser.add_argument("--redis", metavar="URL", help="append straight to the ingest stream of the Redis at "
                                                           "URL instead of the API (the job validates the events)")
        parser.add_argument("--redis-prefix", default="pn", help="key prefix with --redis (default pn)")
        parser.add_argument("--batch", type=int, default=500, help="events per request (default 500)")


def _read_text(path: str, what: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError as error:
        raise UsageError(f"cannot read {what} {path!r}: {error.strerror}") from None


def _eval(args: argparse.Namespace) -> int:
    if args.block_size is not None and args.block_size < 1:
        raise UsageError(f"--block-size must be >= 1, got {args.block_size}")
    text = args.query if args.query is not None else _read_text(args.query_file, "query file")
    try:
        streams = load_streams(args.streams) if args.streams else Streams()
    except OSError as error:
        raise UsageError(f"cannot read streams file {args.streams!r}: {error.strerror}") from None
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
    except UnicodeDecodeError as error:
        raise UsageError(f"{args.events}: not UTF-8 text ({error.reason})") from None
    finally:
        gc.freeze()
        gc.enable()
    if rejected:
        first = rejected[0]
        more = f" (and {len(rejected) - 1} more bad lines)" if len(rejected) > 1 else ""
        raise UsageError(f"{args.events}:{first.line}: {first.error}{more}")
    if args.engine == "spark":
        return _eval_spark(args, text, streams)

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


def _eval_spark(args: argparse.Namespace, text: str, streams: Streams) -> int:
    """The same query through the Spark pipeline: a private Redis and job, same output."""
    try:
        from spark_jobs.oneshot import PipelineError, evaluate
    except ImportError as error:
        raise UsageError(f"--engine spark needs the Spark extra (pip install 'penumbra[spark]'): {error}") from None
    with open(args.events, encoding="utf-8") as handle:
        lines = [line.rstrip("\n") for line in handle if line.strip()]
    try:
        matches, stats = evaluate(text, streams.to_json(), lines, batch_rows=args.block_size)
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


def _up(options: list[str]) -> int:
    """``penumbra up``: imported only here, so that ``eval`` needs neither FastAPI nor pyspark."""
    try:
        from backend.up import main as up
    except ImportError as error:
        raise UsageError(f"up needs the service and Spark extras (pip install 'penumbra[spark,service]'): "
                         f"{error}") from None
    return up(options)


class _Stop:
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


def _sink(args: argparse.Namespace):
    from .feed import ApiSink, RedisSink

    if args.batch < 1:
        raise UsageError(f"--batch must be >= 1, got {args.batch}")
    if args.redis:
        return RedisSink(args.redis, args.redis_prefix)
    return ApiSink(args.api, args.token)


def _setup(args: argparse.Namespace, sc) -> None:
    """Register the scenario's streams, then its queries (a query keeps its streams' parameters)."""
    from .feed import api_call

    for name, params in sc.streams.items():
        status, answer = api_call(args.api, "PUT", f"/api/streams/{name}", args.token, params)
        if status != 200:
            raise UsageError(f"--setup: PUT /api/streams/{name} answered {status}: {answer}")
    for query in sc.queries:
        status, answer = api_call(args.api, "POST", "/api/queries", args.token,
                                  {"id": query.id, "name": query.name, "text": query.text, "threshold": query.threshold})
        if status == 409:
            print(f"penumbra simulate: query {query.id!r} is already registered; kept as it is", file=sys.stderr)
        elif status != 201:
            raise UsageError(f"--setup: POST /api/queries ({query.id}) answered {status}: {answer}")


def _simulate(args: argparse.Namespace) -> int:
    from . import scenarios
    from .feed import FeedError, Pace, Progress, send

    sc = scenarios.scenario(args.scenario)
    for option in ("rate", "duration"):
        value = getattr(args, option)
        if not (math.isfinite(value) and value > 0):
            raise UsageError(f"--{option} must be a positive number, got {value:g}")
    if not (math.isfinite(args.speed) and args.speed >= 0):
        raise UsageError(f"--speed must be >= 0, got {args.speed:g}")
    if args.forever and (args.truth or args.out):
        raise UsageError("--forever runs until stopped: it writes neither --truth nor --out")
    if args.streams_out:
        try:
            Path(args.streams_out).write_text(json.dumps(sc.streams, indent=1), encoding="utf-8")
        except OSError as error:
            raise UsageError(f"cannot write streams file {args.streams_out!r}: {error.strerror}") from None
    if args.out:
        sim = scenarios.generate(args.scenario, args.rate, args.duration, args.seed)
        with open(args.out, "w", encoding="utf-8") as handle:
            handle.write("".join(json.dumps(e) + "\n" for e in sim.events))
        if args.truth:
            _write_truth(args, sc, sim, 0.0)
        print(f"penumbra simulate: {len(sim.events):,} events of {args.scenario} in {args.out}", file=sys.stderr)
        return 0
    run = _base36(int(time.time() * 1000))
    try:
        with _sink(args) as sink, _Stop() as stop:
            if args.setup:
                _setup(args, sc)
            total, rounds, tally = 0, 0, None
            while not stop() and (args.forever or rounds == 0):
                sim = scenarios.generate(args.scenario, args.rate, args.duration, args.seed + rounds)
                origin = float(round(time.time() * sc.per_second))
                sim = sim.shifted(origin, f"{run}.{rounds}." if args.forever else f"{run}.")
                if args.truth:
                    _write_truth(args, sc, sim, origin)
                progress = Progress(f"{args.scenario} round {rounds + 1}" if args.forever else args.scenario,
                                    None if args.forever else len(sim.events))
                schedule = ((float(due), json.dumps(e).encode()) for due, e in zip(sim.arrivals, sim.events))
                tally = send(sink, schedule, Pace(args.speed), progress, args.batch, stop)
                total += tally.sent
                rounds += 1
                if tally.reasons:
                    print(f"penumbra simulate: rejected: {'; '.join(tally.reasons[:3])}", file=sys.stderr)
    except FeedError as error:
        print(f"penumbra simulate: error: {error}", file=sys.stderr)
        return 1
    print(json.dumps({"scenario": args.scenario, "rounds": rounds, "events": total,
                      **({"last_round": tally.to_json()} if tally else {})}))
    return 0


def _base36(number: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while number:
        number, rest = divmod(number, 36)
        out = digits[rest] + out
    return out or "0"


def _write_truth(args: argparse.Namespace, sc, sim, origin: float) -> None:
    truth = {"scenario": sc.name, "seed": args.seed, "rate": args.rate, "duration": args.duration,
             "origin": origin, "unit": sc.unit, "events": len(sim.events), "streams": sc.streams,
             "queries": {q.id: {"text": q.text, "threshold": q.threshold, "meaning": q.meaning,
                                "truth": sim.truth[q.id]} for q in sc.queries}}
    try:
        Path(args.truth).write_text(json.dumps(truth), encoding="utf-8")
    except OSError as error:
        raise UsageError(f"cannot write truth file {args.truth!r}: {error.strerror}") from None


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


def _replay(args: argparse.Namespace) -> int:
    from .feed import FeedError, Pace, Progress, send

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
        with _sink(args) as sink, _Stop() as stop:
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


def _check(args: argparse.Namespace) -> int:
    from .scenarios import check

    try:
        truth = json.loads(_read_text(args.truth, "truth file"))
        queries = truth["queries"]
    except (ValueError, KeyError, TypeError):
        raise UsageError(f"{args.truth}: not a truth file written by penumbra simulate --truth") from None
    ids = [args.query] if args.query else list(queries)
    for qid in ids:
        if qid not in queries:
            raise UsageError(f"--query: {qid!r} is not in {args.truth} (it has {', '.join(queries)})")
    if args.threshold is not None and not 0 <= args.threshold <= 1:
        raise UsageError(f"--threshold must be within [0, 1], got {args.threshold:g}")
    if args.matches and len(ids) > 1:
        raise UsageError(f"--matches holds one query's matches: name it with --query ({', '.join(ids)})")
    for qid in ids:
        if args.matches:
            matches = _read_matches(args.matches)
        else:
            matches = _fetch_matches(args, qid)
        threshold = args.threshold if args.threshold is not None else queries[qid]["threshold"]
        print(json.dumps(check(qid, queries[qid]["truth"], matches, threshold).to_json()))
    return 0


def _read_matches(path: str) -> list[dict]:
    out = []
    for number, line in enumerate(_read_text(path, "matches file").splitlines(), 1):
        if line.strip():
            try:
                match = json.loads(line)
                if not isinstance(match.get("events"), dict) or not isinstance(match.get("prob"), (int, float)):
                    raise ValueError
            except (ValueError, AttributeError):
                raise UsageError(f"{path}:{number}: not a match (an object with events and prob)") from None
            out.append(match)
    return out


def _fetch_matches(args: argparse.Namespace, qid: str) -> list[dict]:
    """Every match of ``qid`` the API keeps, paging back from the newest."""
    from .feed import ApiSink, FeedError

    out: list[dict] = []
    before = None
    try:
        with ApiSink(args.api, args.token) as api:
            while True:
                query = "?limit=1000" + (f"&before={before}" if before else "")
                status, page = api.request("GET", f"/api/queries/{qid}/matches{query}")
                if status != 200:
                    raise UsageError(f"GET /api/queries/{qid}/matches answered {status}: {page}")
                out += page["items"]
                before = page["next"]
                if not before:
                    return out
    except FeedError as error:
        raise UsageError(str(error)) from None


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
        if args.command == "up":
            return _up(args.options)
        if args.command == "simulate":
            return _simulate(args)
        if args.command == "replay":
            return _replay(args)
        if args.command == "check":
            return _check(args)
        return _eval(args)
    except UsageError as error:
        print(f"penumbra: error: {error}".replace("\n", " "), file=sys.stderr)
        return 2
    except PenumbraError as error:
        print(f"penumbra: error: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
