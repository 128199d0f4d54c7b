"""``penumbra check TRUTH``: the alarms compared with a simulation's ground truth
(precision, recall, calibration); ``penumbra check --verdicts --query ID``: the same from
the verdicts people (or ``simulate --verdicts``) gave in the running system."""

from __future__ import annotations

import argparse
import json

from .common import UsageError, add_target, read_text
from .feed import ApiSink, FeedError
from .scenarios import check

__all__ = ["add_parser", "run"]


def add_parser(commands) -> None:
    chk = commands.add_parser("check", help="compare alarms with a simulation's ground truth, or with verdicts")
    chk.add_argument("truth", nargs="?", help="the file simulate --truth wrote")
    chk.add_argument("--verdicts", action="store_true",
                     help="read the query's verdicts from the API (--api, --query) instead of a truth file")
    where = chk.add_mutually_exclusive_group()
    where.add_argument("--matches", help="matches, one JSON object per line (eval's output); the truth "
                                         "must hold one query, or name it with --query")
    chk.add_argument("--query", help="the query id to check (default: every query of the truth)")
    chk.add_argument("--threshold", type=float, help="alarm threshold (default: the query's own)")
    add_target(chk, events=False)


def run(args: argparse.Namespace) -> int:
    if args.verdicts:
        return _from_verdicts(args)
    if not args.truth:
        raise UsageError("give a truth file (simulate --truth), or --verdicts with --query")
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


def _from_verdicts(args: argparse.Namespace) -> int:
    """Precision, calibration and the reliability bins of a query's verdicts (real, false;
    unknown ones counted apart), at or above ``--threshold`` when given."""
    if args.truth or args.matches:
        raise UsageError("--verdicts reads the verdicts from the API: give neither a truth file nor --matches")
    if not args.query:
        raise UsageError("--verdicts: name the query with --query")
    if args.threshold is not None and not 0 <= args.threshold <= 1:
        raise UsageError(f"--threshold must be within [0, 1], got {args.threshold:g}")
    from ..calibration import reliability

    try:
        with ApiSink(args.api, args.token) as api:
            status, page = api.request("GET", f"/api/queries/{args.query}/verdicts?limit=10000")
    except FeedError as error:
        raise UsageError(str(error)) from None
    if status != 200:
        raise UsageError(f"GET /api/queries/{args.query}/verdicts answered {status}: {page}")
    floor = args.threshold or 0.0
    kept = [v for v in page["items"] if float(v["prob"]) >= floor]
    judged = [v for v in kept if v["verdict"] in ("real", "false")]
    found = reliability([float(v["prob"]) for v in judged], [v["verdict"] == "real" for v in judged])
    real = found["real"]
    print(json.dumps({"query": args.query, "source": "verdicts", "threshold": floor, "judged": len(judged),
                      "real": real, "false": len(judged) - real,
                      "unknown": sum(1 for v in kept if v["verdict"] == "unknown"),
                      "precision": round(real / len(judged), 6) if judged else None,
                      "ece": round(found["ece"], 6) if found["ece"] is not None else None,
                      "bins": [{"from": b["lo"], "judged": b["count"], "mean_prob": round(b["mean_prob"], 6),
                                "real_share": round(b["real_share"], 6)} for b in found["bins"] if b["count"]]}))
    return 0
