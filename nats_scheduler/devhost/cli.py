"""``python -m nats_scheduler.devhost`` / ``nats-scheduler devhost``: the dev host's commands.

``run`` starts one replica (run it twice for two). The other commands change Deployment
records the way AstraBox's API would; running replicas notice within ``--poll`` seconds.
The database is ``--db`` or ``ASTRABOX_DEVHOST_DB`` (default ``.devhost/astrabox.db``).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime

from ..command_line import (
    EXIT_INVALID,
    EXIT_NOT_FOUND,
    EXIT_OK,
    connection_flags,
    env_from_args,
    print_json,
    table,
)
from ..seam import InvalidSchedule
from .handler import read_sessions
from .records import Deployment, DeploymentExists, DeploymentNotFound, DeploymentStore

DB_ENV = "ASTRABOX_DEVHOST_DB"
DEFAULT_DB = os.path.join(".devhost", "astrabox.db")


def _db(args: argparse.Namespace) -> str:
    return str(args.db or os.environ.get(DB_ENV) or DEFAULT_DB)


def _rows(records: list[Deployment]) -> str:
    return table(
        ["DEPLOYMENT", "NAME", "CRON", "TIMEZONE", "ENABLED", "VERSION", "PROMPT"],
        [[d.deployment_id, d.name, d.cron, d.timezone, "yes" if d.enabled else "no",
          d.version, d.prompt[:40]] for d in records],
    )


def _show(args: argparse.Namespace, record: Deployment, verb: str) -> int:
    if args.json:
        print_json(record.__dict__)
    else:
        print(f"{verb} {record.deployment_id} (version {record.version})", flush=True)
    return EXIT_OK


# ----------------------------------------------------------------------------- commands


def cmd_run(args: argparse.Namespace) -> int:
    from .host import serve

    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    environ = dict(os.environ)
    environ.update(env_from_args(args))
    if args.identity:
        environ["ASTRABOX_NATS_IDENTITY"] = args.identity
    # The provider reads its settings from the environment at configure(), as in AstraBox.
    os.environ.update(environ)
    return asyncio.run(serve(_db(args), environ, poll_interval=args.poll,
                             parent_pid=args.exit_with_parent))


def cmd_create(args: argparse.Namespace) -> int:
    record = DeploymentStore(_db(args)).create(
        args.deployment, cron=args.cron, timezone=args.timezone, name=args.name,
        target=args.target, prompt=args.prompt, enabled=not args.disabled)
    return _show(args, record, "created")


def cmd_edit(args: argparse.Namespace) -> int:
    record = DeploymentStore(_db(args)).edit(
        args.deployment, name=args.name, cron=args.cron, timezone=args.timezone,
        target=args.target, prompt=args.prompt)
    return _show(args, record, "edited")


def cmd_enable(args: argparse.Namespace) -> int:
    return _show(args, DeploymentStore(_db(args)).set_enabled(args.deployment, True), "enabled")


def cmd_disable(args: argparse.Namespace) -> int:
    return _show(args, DeploymentStore(_db(args)).set_enabled(args.deployment, False),
                 "disabled")


def cmd_delete(args: argparse.Namespace) -> int:
    return _show(args, DeploymentStore(_db(args)).delete(args.deployment), "deleted")


def cmd_list(args: argparse.Namespace) -> int:
    records = DeploymentStore(_db(args)).all(include_deleted=args.all)
    if args.json:
        print_json([r.__dict__ for r in records])
    else:
        print(_rows(records), flush=True)
    return EXIT_OK


def cmd_sessions(args: argparse.Namespace) -> int:
    rows = read_sessions(_db(args), args.deployment)
    if args.json:
        print_json([r.__dict__ for r in rows])
        return EXIT_OK
    print(table(
        ["SESSION", "TURN", "DEPLOYMENT", "TRIGGER", "RUN", "BY", "CREATED"],
        [[r.session_id, r.turn_id, r.deployment_id, r.trigger, r.run_id, r.created_by,
          datetime.fromtimestamp(r.created_at, UTC).strftime("%Y-%m-%d %H:%M:%SZ")]
         for r in rows]), flush=True)
    return EXIT_OK


# ----------------------------------------------------------------------------- parser


def _common() -> argparse.ArgumentParser:
    """--db and --json on every subcommand (SUPPRESS: a --db given before the command
    is not overwritten by the subcommand's default)."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("--db", default=argparse.SUPPRESS,
                        help=f"the Deployment database ({DB_ENV}; default {DEFAULT_DB})")
    parent.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                        help="machine-readable JSON output")
    return parent


def add_commands(parser: argparse.ArgumentParser) -> None:
    """Add the dev host's subcommands to ``parser`` (also used by ``nats-scheduler``)."""
    parser.add_argument("--db", help=f"the Deployment database ({DB_ENV}; default {DEFAULT_DB})")
    parser.set_defaults(json=False)
    sub = parser.add_subparsers(dest="devhost_command", required=True, metavar="COMMAND")
    common = _common()

    run = sub.add_parser("run", parents=[connection_flags(), common],
                         help="run one dev-host replica (provider + admin service)")
    run.add_argument("--identity", help="this replica's name (ASTRABOX_NATS_IDENTITY)")
    run.add_argument("--poll", type=float, default=0.25,
                     help="seconds between looks at the Deployment records (default 0.25)")
    run.add_argument("--exit-with-parent", type=int, metavar="PID",
                     help="stop when process PID is no longer this process's parent")
    run.add_argument("-v", "--verbose", action="store_true")
    run.set_defaults(devhost_func=cmd_run)

    create = sub.add_parser("create", parents=[common], help="create a Deployment")
    create.add_argument("deployment")
    create.add_argument("--cron", required=True, help="five-field cron expression")
    create.add_argument("--timezone", default="UTC", help="IANA time zone (default UTC)")
    create.add_argument("--name")
    create.add_argument("--target", default="default")
    create.add_argument("--prompt", default="")
    create.add_argument("--disabled", action="store_true", help="create it disabled")
    create.set_defaults(devhost_func=cmd_create)

    edit = sub.add_parser("edit", parents=[common],
                          help="change a Deployment (its version goes up)")
    edit.add_argument("deployment")
    for flag in ("--cron", "--timezone", "--name", "--target", "--prompt"):
        edit.add_argument(flag)
    edit.set_defaults(devhost_func=cmd_edit)

    for name, func, text in (("enable", cmd_enable, "enable a Deployment's schedule"),
                             ("disable", cmd_disable, "disable a Deployment's schedule"),
                             ("delete", cmd_delete, "delete a Deployment")):
        command = sub.add_parser(name, parents=[common], help=text)
        command.add_argument("deployment")
        command.set_defaults(devhost_func=func)

    listing = sub.add_parser("list", parents=[common], help="list Deployments")
    listing.add_argument("--all", action="store_true", help="include deleted ones")
    listing.set_defaults(devhost_func=cmd_list)

    sessions = sub.add_parser("sessions", parents=[common],
                              help="the Sessions the handler started")
    sessions.add_argument("--deployment")
    sessions.set_defaults(devhost_func=cmd_sessions)


def build_parser(prog: str = "python -m nats_scheduler.devhost") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog, description="Development host standing in for AstraBox.")
    add_commands(parser)
    return parser


def dispatch(args: argparse.Namespace) -> int:
    """Run a parsed dev-host command; record errors become messages and exit codes."""
    try:
        return int(args.devhost_func(args))
    except (DeploymentNotFound, DeploymentExists, InvalidSchedule, ValueError) as exc:
        message = exc.args[0] if exc.args else str(exc)
        print(f"error: {message}", file=sys.stderr, flush=True)
        return EXIT_NOT_FOUND if isinstance(exc, DeploymentNotFound) else EXIT_INVALID


def main(argv: Sequence[str] | None = None) -> int:
    return dispatch(build_parser().parse_args(argv))
