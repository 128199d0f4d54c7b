"""``penumbra up``: the whole of Penumbra on this machine, from one command.

It reads its settings (:class:`~penumbra.cli.supervisor.UpSettings`, environment
variables), checks what it needs, and hands over to the
:class:`~penumbra.cli.supervisor.Supervisor` (redis-server, the Spark job and the API,
restarted when they die, stopped in order); ``--demo`` adds the demo
(:class:`~penumbra.cli.demo.Demo`). docs/up.md and docs/demo.md have the whole story.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from typing import Sequence

from pydantic import ValidationError

from .demo import Demo
from .supervisor import Supervisor, UpSettings

__all__ = ["main", "settings_help"]


def settings_help() -> str:
    """The settings, as ``penumbra up --help`` lists them."""
    rows = []
    for name, info in UpSettings.model_fields.items():
        default = info.get_default(call_default_factory=False)
        if default is None or info.default_factory is not None or name == "redis_url":
            shown = ""  # none, or made at the start (the home, the URL of up's own Redis)
        else:
            shown = f" (default {default:g})" if isinstance(default, (int, float)) else f" (default {default})"
        rows.append(f"  PENUMBRA_{name.upper():<20} {info.description}{shown}")
    return "\n".join([
        "settings (environment variables):", *rows,
        f"  {'PENUMBRA_ADMIN_TOKEN':<29} the first admin token (unset: one is generated at the first start",
        f"  {'':<29} and printed once; Redis keeps only its hash)",
        "",
        "Every other PENUMBRA_ setting reaches the API (docs/service.md) and the job (docs/pipeline.md).",
        "Files (the owner's alone): var/redis (Redis data, AOF, its password), var/checkpoint (the job's),",
        "var/log/{redis,job,api}.log.",
        "Ctrl-C or SIGTERM stops everything; the next `penumbra up` on the same home resumes.",
    ])


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="penumbra up", formatter_class=argparse.RawDescriptionHelpFormatter, epilog=settings_help(),
        description="Start Penumbra on this machine: redis-server (unless PENUMBRA_REDIS_URL names one), "
                    "the Spark job and the API, all on 127.0.0.1; print the URL and the admin token; "
                    "restart what dies; stop everything on Ctrl-C or SIGTERM, keeping the data.")
    parser.add_argument("--demo", action="store_true",
                        help="also register the demo scenarios (intrusion, cluster, shoplifting) and run their "
                             "simulated sensors (docs/demo.md); make run uses it")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        settings = UpSettings()
        supervisor = Supervisor(settings)
    except ValidationError as error:
        problems = "; ".join(f"PENUMBRA_{'_'.join(map(str, e['loc'])).upper()}: {e['msg']}" for e in error.errors())
        print(f"penumbra up: error: {problems}", file=sys.stderr)
        return 2
    if settings.starts_redis and shutil.which("redis-server") is None:
        print("penumbra up: error: redis-server is not installed (make setup installs it), "
              "or set PENUMBRA_REDIS_URL", file=sys.stderr)
        return 2
    if args.demo:
        Demo(supervisor)
    return supervisor.run()


if __name__ == "__main__":
    sys.exit(main())
