"""``schedules``, ``hold`` and ``release``: Schedules and operator holds.

A hold (docs/design.md, "Operator hold") stops a Schedule firing until released;
AstraBox's ``apply`` never clears it. Both need ``--reason``; who asked (``--by``, default
``user@host``) and when are recorded in the Schedule's events. ``--filter`` acts on every
Schedule whose ID or name contains the text (case-insensitive); an empty filter is refused.
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime

from ..admin.api import BulkResult, ErrorCode, ScheduleDetail, ScheduleView
from ..admin.callers import held_by, until_text
from ..admin.client import AdminClient, merge_bulk
from ..admin.load import MAX_HOURS
from ..clock import SystemClock
from ..core.validation import parse_hold_end
from . import common
from .load import load_text


def _state(view: ScheduleView) -> str:
    if view.hold is not None:
        return f"held by {held_by(view.hold)}{until_text(view.hold.until)}"
    return view.state


def schedule_rows(views: list[ScheduleView]) -> str:
    return common.table(
        ["DEPLOYMENT", "NAME", "STATE", "CRON", "TIMEZONE", "NEXT DUE", "LAST RUN", "FAILED 24H"],
        [[v.deployment_id, v.name, _state(v), v.cron, v.timezone,
          common.when(v.next_due[0]) if v.next_due else "-",
          f"{v.last_run_state.value} {common.when(v.last_run_at)}" if v.last_run_state else "-",
          v.failures_24h] for v in views],
    )


def detail_text(detail: ScheduleDetail) -> str:
    v = detail.schedule
    lines = [
        f"deployment  {v.deployment_id}",
        f"name        {v.name}",
        f"state       {v.state}",
        f"cron        {v.cron}  ({v.timezone})",
        f"version     {v.version}",
        f"target      {v.payload.target}",
        f"prompt      {v.payload.prompt}",
        f"updated     {common.when(v.updated_at)}",
    ]
    if v.hold is not None:
        lines.append(f"held        by {held_by(v.hold)} at {common.when(v.hold.at)}"
                     f"{until_text(v.hold.until)}: {v.hold.reason}")
    if v.last_run_state is not None:
        lines.append(f"last run    {v.last_run_state.value} (created {common.when(v.last_run_at)})")
    lines.append(f"failed 24h  {v.failures_24h}")
    lines.append("upcoming:" if detail.upcoming else "upcoming    none (not firing)")
    for due, note in zip(detail.upcoming, detail.dst_notes, strict=False):
        lines.append(f"  {common.when(due)}" + (f"  {note}" if note else ""))
    return "\n".join(lines)


async def _schedules(args: argparse.Namespace) -> int:
    if args.load and (args.deployment or args.filter or args.all):
        print("error: --load counts every Schedule: give no DEPLOYMENT, --filter or --all",
              file=sys.stderr, flush=True)
        return common.EXIT_INVALID
    async with common.admin_client(args) as client:
        if args.load:
            ahead = await client.load_ahead(args.hours)
            if args.json:
                common.print_json({"minutes": [{"minute": m.minute, "due": m.due}
                                               for m in ahead.minutes]})
            else:
                print(load_text(ahead), flush=True)
            return common.EXIT_OK
        if args.deployment:
            detail = await client.get_schedule(args.deployment)
            if args.json:
                common.print_json(detail)
            else:
                print(detail_text(detail), flush=True)
            return common.EXIT_OK
        views = await client.list_schedules(args.filter, include_deleted=args.all)
        if args.json:
            common.print_json(views)
            return common.EXIT_OK
        print(schedule_rows(views), flush=True)
        if client.last_source == "store":
            print("(read from the store: no scheduler process answered)", flush=True)
    return common.EXIT_OK


def _bulk_text(result: BulkResult, hold: bool) -> str:
    changed = ", ".join(result.changed) or "none"
    unchanged = ", ".join(result.unchanged) or "none"
    more = " (the lists are cut short: the answer could not name them all)" \
        if result.truncated else ""
    return (f"{'held' if hold else 'released'}: {changed}\n"
            f"unchanged ({'already held' if hold else 'not held'}): {unchanged}\n"
            f"{result.changed_total} {'held' if hold else 'released'}, "
            f"{result.unchanged_total} unchanged{more}")


async def _bulk(client: AdminClient, args: argparse.Namespace, hold: bool, by: str,
                until: datetime | None) -> BulkResult:
    """Follow the bulk action's pages; on a terminal, say how far it got after each page."""
    pages: list[BulkResult] = []
    done = 0
    async for page in client.bulk_pages(args.filter, hold=hold, by=by, reason=args.reason,
                                        on_behalf_of=args.by, until=until):
        pages.append(page)
        done += page.changed_total + page.unchanged_total
        if page.next_after is not None and sys.stderr.isatty():
            print(f"… {done} Schedules so far", file=sys.stderr, flush=True)
    return merge_bulk(pages)


async def _hold_or_release(args: argparse.Namespace, hold: bool) -> int:
    if bool(args.deployment) == bool(args.filter):
        print("error: give either a DEPLOYMENT or --filter TEXT", file=sys.stderr, flush=True)
        return common.EXIT_INVALID
    by = common.default_actor()
    until = None
    if hold and args.until is not None:
        try:  # read and checked on this host's clock; the scheduler checks on the store's
            until = parse_hold_end(args.until, SystemClock().now())
        except ValueError as exc:
            return common.report_error(args, ErrorCode.INVALID_REQUEST, f"--until {exc}")
    async with common.admin_client(args) as client:
        if args.filter:
            result = await _bulk(client, args, hold, by, until)
            if args.json:
                common.print_json(result)
            else:
                print(_bulk_text(result, hold), flush=True)
            return common.EXIT_OK
        if hold:
            view = await client.hold(args.deployment, by=by, reason=args.reason,
                                     on_behalf_of=args.by, until=until)
        else:
            view = await client.release(args.deployment, by=by, reason=args.reason,
                                        on_behalf_of=args.by)
        if args.json:
            common.print_json(view)
        else:
            print(schedule_rows([view]), flush=True)
    return common.EXIT_OK


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parents = [common.connection_flags(), common.output_flags()]
    schedules = sub.add_parser("schedules", parents=parents,
                               help="list Schedules, or show one with its next due times")
    schedules.add_argument("deployment", nargs="?", help="show this Schedule in detail")
    schedules.add_argument("--filter", help="only IDs or names containing this text")
    schedules.add_argument("--all", action="store_true", help="include deleted Schedules")
    schedules.add_argument("--load", action="store_true",
                           help="scheduled Runs due per minute ahead, herd minutes named")
    schedules.add_argument("--hours", type=int, default=24,
                           help=f"with --load: how far ahead (1-{MAX_HOURS}, default 24)")
    schedules.set_defaults(func=lambda a: common.run_command(a, _schedules))

    for name, hold in (("hold", True), ("release", False)):
        command = sub.add_parser(
            name, parents=parents,
            help=("pause a Schedule (operator hold)" if hold else "lift an operator hold"))
        command.add_argument("deployment", nargs="?")
        command.add_argument("--filter", help="act on every Schedule whose ID or name "
                                              "contains this text")
        command.add_argument("--reason", required=True, help="why (recorded)")
        command.add_argument("--by", help=common.BY_HELP)
        if hold:
            command.add_argument(
                "--until", metavar="WHEN",
                help="the hold lifts itself then (by the store's clock): an instant with its "
                     "time zone (2026-12-05T14:00:00Z) or a time from now (+90m, +2h, +1d), "
                     "at most 365 days ahead")
        command.set_defaults(func=lambda a, h=hold: common.run_command(
            a, lambda args: _hold_or_release(args, h)))
