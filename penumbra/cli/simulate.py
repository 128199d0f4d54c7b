"""``penumbra simulate SCENARIO``: a scenario's simulated sensors, sent to a running Penumbra
(or written to a file), with the ground truth of every query (docs/demo.md)."""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

from . import scenarios
from .common import Stop, UsageError, add_target, sink_of
from .feed import FeedError, Pace, Progress, api_call, send
from .scenarios import SCENARIOS

__all__ = ["add_parser", "run"]


def add_parser(commands) -> None:
    sim = commands.add_parser("simulate", help="send a scenario's simulated sensors to Penumbra (simulate --help)",
                              description="Simulated sensors that know the truth: " + ", ".join(
                                  f"{name} ({sc.title.lower()})" for name, sc in SCENARIOS.items())
                              + ". docs/demo.md tells each story.")
    sim.add_argument("scenario", choices=sorted(SCENARIOS))
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
    add_target(sim)


def _setup(args: argparse.Namespace, sc) -> None:
    """Register the scenario's streams, then its queries (a query keeps its streams' parameters)."""
    for name, params in sc.streams.items():
        status, answer = api_call(args.api, "PUT", f"/api/streams/{name}", args.token, params)
        if status != 200:
            raise UsageError(f"--setup: PUT /api/streams/{name} answered {status}: {answer}")
    for query in sc.queries:
        status, answer = api_call(args.api, "POST", "/api/queries", args.token,
                                  {"id": query.id, "name": query.name, "text": query.text,
                                   "threshold": query.threshold})
        if status == 409:
            print(f"penumbra simulate: query {query.id!r} is already registered; kept as it is", file=sys.stderr)
        elif status != 201:
            raise UsageError(f"--setup: POST /api/queries ({query.id}) answered {status}: {answer}")


def run(args: argparse.Namespace) -> int:
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
        with sink_of(args) as sink, Stop() as stop:
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
