"""``penumbra check TRUTH``: the alarms compared with a simulation's ground truth
(precision, recall, calibration)."""

from __future__ import annotations

import argparse
import json

from .common import UsageError, add_target, read_text
from .feed import ApiSink, FeedError
from .scenarios import check

__all__ = ["add_parser", "run"]


def add_parser(commands) -> None:
    chk = commands.add_parser("check", help="compare alarms with a simulation's ground truth")
    chk.add_argument("truth", help="the file simulate --truth wrote")
    where = chk.add_mutually_exclusive_group()
    where.add_argument("--matches", help="matches, one JSON object per line (eval's output); the truth "
                                         "must hold one query, or name it with --query")
    chk.add_argument("--query", help="the query id to check (default: every query of the truth)")
    chk.add_argument("--threshold", type=float, help="alarm threshold (default: the query's own)")
    add_target(chk, events=False)


def run(args: argparse.Namespace) -> int:
    try:
        truth = json.loads(read_text(args.truth, "truth file"))
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
    for number, line in enumerate(read_text(path, "matches file").splitlines(), 1):
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
