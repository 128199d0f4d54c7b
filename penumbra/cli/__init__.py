"""The ``penumbra`` command: the command layer, on top of the core, the Redis contract and the shells.

``penumbra eval`` runs one query over a file of events, no services needed::

    penumbra eval --query "SELECT * FROM SEISMIC A, ACOUSTIC B WHERE WINDOW(A, B) = 2000
                           WITH THRESHOLD 0.6" --streams streams.json --events events.jsonl

It prints one JSON match per line on stdout and nothing else there; ``--stats`` prints
one JSON object of counters instead. A bad query, events file or option exits with
status 2 and a one-line message on stderr.

``penumbra simulate SCENARIO`` sends a scenario's simulated sensors to a running Penumbra
(or writes them to a file) and can write the ground truth; ``penumbra check TRUTH``
compares alarms with it; ``penumbra replay FILE`` sends an events file at a chosen speed;
``penumbra export QUERY`` writes a query's archived matches over a period as CSV or Parquet;
``penumbra up`` starts the whole system (docs/demo.md, docs/up.md). Each command is a
module of this package; a command's module is imported when it runs, so that ``eval``
needs neither Redis, FastAPI nor pyspark.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from penumbra.errors import PenumbraError

from . import check, eval, export, replay, simulate
from .common import Parser, UsageError

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = Parser(prog="penumbra", description="Monitoring live events whose timestamps are uncertain.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for command in (eval, simulate, replay, check, export):
        command.add_parser(commands)
    # `penumbra up` parses its own options (penumbra/cli/up.py): everything after `up` goes there
    up = commands.add_parser("up", help="start Redis, the Spark job and the API on this machine (up --help)",
                             add_help=False, prefix_chars="\0")
    up.add_argument("options", nargs="*")
    return parser


def _up(options: list[str]) -> int:
    """``penumbra up``: imported only here, so that the other commands need neither FastAPI nor pyspark."""
    try:
        from .up import main as up
    except ImportError as error:
        raise UsageError(f"up needs the service and Spark extras (pip install 'penumbra[spark,service]'): "
                         f"{error}") from None
    return up(options)


def main(argv: Sequence[str] | None = None) -> int:
    commands = {"simulate": simulate.run, "replay": replay.run, "check": check.run, "eval": eval.run,
                "export": export.run}
    try:
        args = _parser().parse_args(argv)
        if args.command == "up":
            return _up(args.options)
        return commands[args.command](args)
    except UsageError as error:
        print(f"penumbra: error: {error}".replace("\n", " "), file=sys.stderr)
        return 2
    except PenumbraError as error:
        print(f"penumbra: error: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
