"""``events``: the audit trail (Schedule and Run events), optionally followed live.

``--deployment`` narrows to one deployment, ``--type`` (repeatable) to event types
(``run.dispatched``) or families (``run``, ``schedule``). ``--json`` prints one JSON object
per line, the stored event as it is.
"""

from __future__ import annotations

import argparse

import msgspec

from ..admin.callers import until_text, who_text
from ..admin.client import event_type
from ..core.events import AnyEvent, OperatorChange, RunEvent, ScheduleEvent, to_builtins
from .common import (
    EXIT_OK,
    admin_client,
    connection_flags,
    output_flags,
    run_command,
    when,
)


def describe(event: AnyEvent) -> str:
    """One line: time, type, deployment, what changed and who."""
    kind = event_type(event)
    if isinstance(event, RunEvent):
        run = event.run
        detail = f"run {run.run_id} {run.trigger.value} {run.state.value}"
        extra = [f"{k} {v}" for k, v in (("session", run.session_id), ("turn", run.turn_id),
                                          ("by", run.requested_by), ("error", run.error)) if v]
        subject = run.deployment_id
    else:
        assert isinstance(event, ScheduleEvent)
        schedule = event.schedule
        state = "deleted" if schedule.deleted else ("held" if schedule.hold else
                                                     "enabled" if schedule.enabled else "disabled")
        detail = f"v{schedule.version} {schedule.cron} {schedule.timezone} {state}"
        extra = []
        if isinstance(event, OperatorChange):
            extra.append(f"by {who_text(event.by, event.caller, event.on_behalf_of)}"
                         f"{until_text(event.until)}")
        if getattr(event, "reason", None):
            extra.append(f"reason {event.reason!r}")  # type: ignore[union-attr]
        subject = schedule.deployment_id
    tail = ("  " + ", ".join(extra)) if extra else ""
    return f"{when(event.at)}  {kind:<20} {subject:<20} {detail}{tail}  [{event.actor}]"


def _emit(event: AnyEvent, as_json: bool) -> None:
    if as_json:
        print(msgspec.json.encode(to_builtins(event)).decode(), flush=True)
    else:
        print(describe(event), flush=True)


async def _events(args: argparse.Namespace) -> int:
    types = set(args.type) if args.type else None
    async with admin_client(args) as client:
        if not args.follow:
            for event in await client.recent_events(deployment_id=args.deployment, types=types,
                                                    history=args.history):
                _emit(event, args.json)
            return EXIT_OK
        async for event in client.events(deployment_id=args.deployment, types=types,
                                         history=args.history):
            _emit(event, args.json)
    return EXIT_OK


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    events = sub.add_parser("events", parents=[connection_flags(), output_flags()],
                            help="recent Schedule and Run events; --follow for new ones")
    events.add_argument("--deployment", help="only this deployment's events")
    events.add_argument("--type", action="append", metavar="TYPE",
                        help="only this event type or family (run.dispatched, schedule, ...); "
                             "repeatable")
    events.add_argument("--history", type=int, default=20,
                        help="how many past events to show first (default 20)")
    events.add_argument("-f", "--follow", action="store_true",
                        help="keep printing new events until Ctrl+C")
    events.set_defaults(func=lambda a: run_command(a, _events))
