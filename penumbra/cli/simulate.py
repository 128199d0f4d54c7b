"""``penumbra simulate SCENARIO``: a scenario's simulated sensors, sent to a running Penumbra
(or written to a file), with the ground truth of every query (docs/demo.md)."""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

from .common import Stop, UsageError, add_target, sink_of
from .feed import FeedError, Pace, Progress, api_call, send
from .scenarios import SCENARIOS, generate, scenario as scenario_named

__all__ = ["add_parser", "run"]


def add_parser(commands) -> None:
    sim = commands.add_parser("simulate", help="send a scenario's simulated sensors to Penumbra (simulate --help)",
                              description="Simulated sensors that know the truth: " + ", ".join(
                                  f"{name} ({scenario.title.lower()})" for name, scenario in SCENARIOS.items())
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
    sim.add_argument("--verdicts", action="store_true",
                     help="after each round, judge the matches of the events sent by the truth (real or false) "
                          "and post the verdicts (needs --api and an analyst token): the calibration fills in")
    add_target(sim)


def _setup(args: argparse.Namespace, scenario) -> None:
    """Register the scenario's streams, then its queries (a query keeps its streams' parameters)."""
    for name, params in scenario.streams.items():
        status, answer = api_call(args.api, "PUT", f"/api/streams/{name}", args.token, params)
        if status != 200:
            raise UsageError(f"--setup: PUT /api/streams/{name} answered {status}: {answer}")
    for query in scenario.queries:
        status, answer = api_call(args.api, "POST", "/api/queries", args.token,
                                  {"id": query.id, "name": query.name, "text": query.text,
                                   "threshold": query.threshold})
        if status == 409:
            print(f"penumbra simulate: query {query.id!r} is already registered; kept as it is", file=sys.stderr)
        elif status != 201:
            raise UsageError(f"--setup: POST /api/queries ({query.id}) answered {status}: {answer}")


def run(args: argparse.Namespace) -> int:
    scenario = scenario_named(args.scenario)
    for option in ("rate", "duration"):
        value = getattr(args, option)
        if not (math.isfinite(value) and value > 0):
            raise UsageError(f"--{option} must be a positive number, got {value:g}")
    if not (math.isfinite(args.speed) and args.speed >= 0):
        raise UsageError(f"--speed must be >= 0, got {args.speed:g}")
    if args.forever and (args.truth or args.out):
        raise UsageError("--forever runs until stopped: it writes neither --truth nor --out")
    if args.verdicts and (args.out or not args.api):
        raise UsageError("--verdicts posts verdicts to the API: give --api (and not --out)")
    if args.streams_out:
        try:
            Path(args.streams_out).write_text(json.dumps(scenario.streams, indent=1), encoding="utf-8")
        except OSError as error:
            raise UsageError(f"cannot write streams file {args.streams_out!r}: {error.strerror}") from None
    if args.out:
        sim = generate(args.scenario, args.rate, args.duration, args.seed)
        with open(args.out, "w", encoding="utf-8") as handle:
            handle.write("".join(json.dumps(e) + "\n" for e in sim.events))
        if args.truth:
            _write_truth(args, scenario, sim, 0.0)
        print(f"penumbra simulate: {len(sim.events):,} events of {args.scenario} in {args.out}", file=sys.stderr)
        return 0
    run = _base36(int(time.time() * 1000))
    try:
        with sink_of(args) as sink, Stop() as stop:
            if args.setup:
                _setup(args, scenario)
            total, rounds, tally = 0, 0, None
            judge = Judge(args.api, args.token, scenario) if args.verdicts else None
            while not stop() and (args.forever or rounds == 0):
                sim = generate(args.scenario, args.rate, args.duration, args.seed + rounds)
                origin = float(round(time.time() * scenario.per_second))
                sim = sim.shifted(origin, f"{run}.{rounds}." if args.forever else f"{run}.")
                if judge is not None:
                    judge.learn(sim, f"{run}.{rounds}." if args.forever else f"{run}.")
                if args.truth:
                    _write_truth(args, scenario, sim, origin)
                progress = Progress(f"{args.scenario} round {rounds + 1}" if args.forever else args.scenario,
                                    None if args.forever else len(sim.events))
                schedule = ((float(due), json.dumps(e).encode()) for due, e in zip(sim.arrivals, sim.events))
                tally = send(sink, schedule, Pace(args.speed), progress, args.batch, stop)
                total += tally.sent
                rounds += 1
                if tally.reasons:
                    print(f"penumbra simulate: rejected: {'; '.join(tally.reasons[:3])}", file=sys.stderr)
                if judge is not None:
                    waited = time.monotonic() + (0 if args.forever else JUDGE_WAIT)
                    while not stop() and time.monotonic() < waited:
                        time.sleep(0.2)         # the job's last matches of the events sent
                    judge.judge()
    except FeedError as error:
        print(f"penumbra simulate: error: {error}", file=sys.stderr)
        return 1
    print(json.dumps({"scenario": args.scenario, "rounds": rounds, "events": total,
                      **({"last_round": tally.to_json()} if tally else {}),
                      **({"verdicts": judge.posted} if judge is not None else {})}))
    return 0


#: seconds a single round waits for the job's last matches before judging them
JUDGE_WAIT = 10.0


class Judge:
    """The truth the simulator knows, posted as verdicts: each new match of the scenario's
    queries whose events this run sent is judged real when its events are those of a true
    match, false otherwise (``POST /api/queries/{id}/verdicts``). Matches of other runs,
    and those written before it started, are left alone."""

    def __init__(self, api: str, token: str | None, scenario):
        self.api, self.token = api, token
        self.queries = [q.id for q in scenario.queries]
        self.truth: dict[str, set[tuple]] = {q: set() for q in self.queries}
        self.variables: dict[str, set[str]] = {q: set() for q in self.queries}
        self.prefixes: list[str] = []
        self.cursors = {q: self._newest(q) for q in self.queries}
        self.posted = 0

    def _newest(self, query: str) -> str | None:
        status, page = api_call(self.api, "GET", f"/api/queries/{query}/matches?limit=1", self.token)
        return page["items"][0]["id"] if status == 200 and page.get("items") else None

    def learn(self, sim, prefix: str) -> None:
        self.prefixes = (self.prefixes + [prefix])[-4:]     # the last rounds' matches may still come
        for query in self.queries:
            for true in sim.truth[query]:
                self.truth[query].add(tuple(sorted(true.items())))
                self.variables[query].update(true)

    def judge(self) -> None:
        for query in self.queries:
            since = f"&since={self.cursors[query]}" if self.cursors[query] else ""
            status, page = api_call(self.api, "GET", f"/api/queries/{query}/matches?limit=1000{since}", self.token)
            if status != 200:
                print(f"penumbra simulate: --verdicts: GET matches of {query} answered {status}", file=sys.stderr)
                continue
            judged = []
            for match in reversed(page["items"]):          # oldest first
                self.cursors[query] = match["id"]
                ids = list(match["events"].values())
                if not any(i.startswith(p) for i in ids for p in self.prefixes):
                    continue
                wanted = self.variables[query]
                key = tuple(sorted((v, i) for v, i in match["events"].items() if not wanted or v in wanted))
                judged.append({"match": match["id"], "verdict": "real" if key in self.truth[query] else "false",
                               "comment": "simulator's truth"})
            if judged:                                      # one request per query and round
                status, answer = api_call(self.api, "POST", f"/api/queries/{query}/verdicts/batch", self.token,
                                          judged)
                if status == 201:
                    self.posted += len(judged)
                else:
                    print(f"penumbra simulate: --verdicts: POST verdicts answered {status}: {answer}", file=sys.stderr)


def _base36(number: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while number:
        number, rest = divmod(number, 36)
        out = digits[rest] + out
    return out or "0"


def _write_truth(args: argparse.Namespace, scenario, sim, origin: float) -> None:
    truth = {"scenario": scenario.name, "seed": args.seed, "rate": args.rate, "duration": args.duration,
             "origin": origin, "unit": scenario.unit, "events": len(sim.events), "streams": scenario.streams,
             "queries": {q.id: {"text": q.text, "threshold": q.threshold, "meaning": q.meaning,
                                "truth": sim.truth[q.id]} for q in scenario.queries}}
    try:
        Path(args.truth).write_text(json.dumps(truth), encoding="utf-8")
    except OSError as error:
        raise UsageError(f"cannot write truth file {args.truth!r}: {error.strerror}") from None
