"""``runs``, ``run``, ``run-now`` and ``replay``: the Run ledger and operator Runs.

``runs DEPLOYMENT`` pages newest first (``--limit``, ``--before RUN_ID``; the last line
says how to get the next page). ``run-now`` and ``replay`` go through the same path as
AstraBox's ``enqueue``, with who (``--by``) and why (``--reason``) recorded on the Run;
``--wait`` waits until the Run is dispatched or failed.
"""

from __future__ import annotations

import argparse
import asyncio

from ..admin.api import AdminError, ErrorCode, RunView
from ..admin.client import AdminClient
from ..seam import RunState
from .common import (
    BY_HELP,
    EXIT_INTERNAL,
    EXIT_OK,
    admin_client,
    connection_flags,
    default_actor,
    output_flags,
    print_json,
    run_command,
    table,
    when,
)


def run_rows(runs: list[RunView]) -> str:
    return table(
        ["RUN", "TRIGGER", "STATE", "CREATED", "DUE", "TRIES", "SESSION", "TURN", "BY"],
        [[r.run_id, r.trigger.value, r.state.value, when(r.created_at),
          when(r.due_at) if r.due_at else "-", r.attempts, r.session_id, r.turn_id,
          r.requested_by] for r in runs],
    )


def run_text(run: RunView) -> str:
    fields = [
        ("run", run.run_id), ("deployment", run.deployment_id), ("trigger", run.trigger.value),
        ("state", run.state.value), ("created", when(run.created_at)),
        ("updated", when(run.updated_at)), ("due", when(run.due_at) if run.due_at else "-"),
        ("attempts", run.attempts), ("session", run.session_id), ("turn", run.turn_id),
        ("replay of", run.replay_of), ("requested by", run.requested_by),
        ("on behalf of", run.on_behalf_of),
        ("reason", run.reason), ("held by", run.holder), ("error", run.error),
        ("target", run.payload.target), ("prompt", run.payload.prompt),
    ]
    return "\n".join(f"{name:<13}{'-' if value is None else value}" for name, value in fields)


async def _runs(args: argparse.Namespace) -> int:
    async with admin_client(args) as client:
        page = await client.list_runs(args.deployment, limit=args.limit, before=args.before)
        if args.json:
            print_json(page)
            return EXIT_OK
        print(run_rows(page.runs), flush=True)
        if page.next_before:
            print(f"more: nats-scheduler runs {args.deployment} --before {page.next_before}",
                  flush=True)
    return EXIT_OK


async def _run(args: argparse.Namespace) -> int:
    async with admin_client(args) as client:
        run = await client.get_run(args.run_id)
        print_json(run) if args.json else print(run_text(run), flush=True)
    return EXIT_OK


async def wait_finished(client: AdminClient, run: RunView, timeout: float) -> RunView:
    """Poll the Run until DISPATCHED or FAILED (AdminError UNAVAILABLE at the deadline)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while run.state not in (RunState.DISPATCHED, RunState.FAILED):
        if loop.time() > deadline:
            raise AdminError(ErrorCode.UNAVAILABLE,
                             f"run {run.run_id} is still {run.state.value} after {timeout:g} s")
        await asyncio.sleep(0.1)  # poll interval
        run = await client.get_run(run.run_id)
    return run


async def _enqueue(args: argparse.Namespace, replay: bool) -> int:
    by = default_actor()
    async with admin_client(args) as client:
        if replay:
            run = await client.replay(args.run_id, by=by, reason=args.reason,
                                      request_id=args.request_id, on_behalf_of=args.by)
        else:
            run = await client.run_now(args.deployment, by=by, reason=args.reason,
                                       request_id=args.request_id, on_behalf_of=args.by)
        if args.wait:
            run = await wait_finished(client, run, args.wait)
        if args.json:
            print_json(run)
        else:
            print(run_text(run), flush=True)
    return EXIT_INTERNAL if args.wait and run.state == RunState.FAILED else EXIT_OK


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parents = [connection_flags(), output_flags()]
    runs = sub.add_parser("runs", parents=parents, help="a deployment's Runs, newest first")
    runs.add_argument("deployment")
    runs.add_argument("--limit", type=int, default=20, help="Runs per page (1-1000, default 20)")
    runs.add_argument("--before", metavar="RUN_ID", help="only Runs older than this one")
    runs.set_defaults(func=lambda a: run_command(a, _runs))

    run = sub.add_parser("run", parents=parents, help="one Run in detail")
    run.add_argument("run_id")
    run.set_defaults(func=lambda a: run_command(a, _run))

    for name, replay in (("run-now", False), ("replay", True)):
        command = sub.add_parser(
            name, parents=parents,
            help=("a new Run of a deployment now (the calendar does not move)" if not replay
                  else "a new Run with an earlier Run's captured payload"))
        command.add_argument("run_id" if replay else "deployment")
        command.add_argument("--reason", help="why (recorded on the Run)")
        command.add_argument("--by", help=BY_HELP)
        command.add_argument("--request-id", help="idempotency key: repeating it returns "
                                                  "the same Run")
        command.add_argument("--wait", type=float, nargs="?", const=30.0, metavar="SECONDS",
                             help="wait until dispatched or failed (default 30 s); "
                                  "exit 1 if it failed")
        command.set_defaults(func=lambda a, r=replay: run_command(
            a, lambda args: _enqueue(args, r)))
