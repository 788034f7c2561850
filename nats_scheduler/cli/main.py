"""``nats-scheduler``: operate the AstraBox ``nats`` scheduler from a terminal.

One module per command group registers its subcommands:

- :mod:`.schedules` - ``schedules``, ``hold``, ``release``
- :mod:`.runs` - ``runs``, ``run``, ``run-now``, ``replay``
- :mod:`.explain` - ``explain`` (the account of due times)
- :mod:`.events` - ``events`` (``--follow``)
- :mod:`.status` - ``status``, ``doctor``; :mod:`.check` - ``check`` (the invariants)
- :mod:`.demo` - ``demo``; :mod:`.server` - ``server``; :mod:`.devhost` - ``devhost ...``

Human-readable tables by default, ``--json`` for scripts; exit codes in :mod:`.common`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from . import check, demo, devhost, events, explain, runs, schedules, server, status
from .argv import Parser, join_dash_values


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="nats-scheduler",
        description="Operate the AstraBox 'nats' scheduler: Schedules, Runs, holds, events, "
                    "cluster health; plus a demo, a development server and a dev host.",
        epilog="exit codes: 0 ok, 1 internal error, 2 invalid request, 3 not found, "
               "4 unavailable (no server; an action while no scheduler process runs, or "
               "while the live ones serve no actions: the message says why), 5 forbidden, "
               "6 conflict, 7 unhealthy",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (schedules, runs, explain, events, status, check, demo, server, devhost):
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the process exit code."""
    parser = build_parser()
    words = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(join_dash_values(parser, words))
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
