"""``explain``: every due time of a deployment in a window, with its Run or why there is none.

    nats-scheduler explain DEPLOYMENT [--since ISO] [--until ISO] [--json]

The window defaults to the last 24 hours. Each due time of the Schedule's calendar as it
stood at that time gets one outcome: ``run`` (its Run, state, lateness), ``skipped`` with a
reason (``disabled``, ``held``, ``no_process``, ``deleted``, ``schedule_change``, and
``refused`` when a replica's reconcile refused AstraBox's definition: a note says why),
``pending`` (a running replica may still fire it) or ``unexplained`` (a broken promise).
Runs of other triggers (Run now, Replay) are listed beside, not counted.

The account is read page by page (the admin service answers, or the store when no
scheduler process runs): a table prints each page as it comes; ``--json`` prints one
object ``{"deployment_id", "since", "until", "due_times": [...], "other_runs": [...],
"notes": [...]}`` once every page is read. Exit 0, or 7 (unhealthy) when any due time is
unexplained.
"""

from __future__ import annotations

import argparse

from ..admin.api import DueAccount
from ..core.due_words import describe
from ..core.dueaccount import DueTime, Outcome
from .check import instant
from .common import (
    EXIT_OK,
    EXIT_UNHEALTHY,
    admin_client,
    connection_flags,
    output_flags,
    print_json,
    run_command,
    table,
    when,
)


def due_rows(lines: list[DueTime]) -> str:
    return table(["DUE (UTC)", "OUTCOME", "REASON", "RUN", "STATE", "LATE", "WHY"],
                 [[when(line.due_at), line.outcome.value,
                   line.reason.value if line.reason else "-", line.run_id or "-",
                   line.state.value if line.state else "-",
                   "-" if line.late_seconds is None else f"{line.late_seconds:.3f}",
                   describe(line)] for line in lines])


def _summary(lines: list[DueTime], others: int) -> str:
    counts: dict[str, int] = {}
    for line in lines:
        key = line.outcome.value + (f" ({line.reason})" if line.reason else "")
        counts[key] = counts.get(key, 0) + 1
    parts = ", ".join(f"{n} {key}" for key, n in sorted(counts.items()))
    return f"{len(lines)} due times: {parts or 'none'}; {others} runs of other triggers"


async def _explain(args: argparse.Namespace) -> int:
    lines: list[DueTime] = []
    first: DueAccount | None = None
    others = []
    async with admin_client(args) as client:
        async for page in client.explain_pages(args.deployment, since=args.since,
                                               until=args.until, limit=args.page):
            first = first or page
            lines += page.due_times
            others += page.other_runs
            if not args.json and page.due_times:
                print(due_rows(page.due_times), flush=True)
    assert first is not None
    if args.json:
        print_json({"deployment_id": first.deployment_id, "since": first.since,
                    "until": first.until, "due_times": lines, "other_runs": others,
                    "notes": first.notes})
    else:
        for run in others:
            print(f"other run {run.run_id}: {run.trigger.value} {run.state.value} created "
                  f"{when(run.created_at)} by {run.requested_by or '-'}", flush=True)
        for note in first.notes:
            print(f"note: {note}", flush=True)
        print(f"{args.deployment} {when(first.since)} .. {when(first.until)}: "
              f"{_summary(lines, len(others))}", flush=True)
    unexplained = any(line.outcome == Outcome.UNEXPLAINED for line in lines)
    return EXIT_UNHEALTHY if unexplained else EXIT_OK


def _page(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 1000:
        raise argparse.ArgumentTypeError("a page holds 1 to 1000 due times")
    return value


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser(
        "explain", parents=[connection_flags(), output_flags()],
        help="every due time of a deployment with its Run or why there is none "
             "(exit 7: one is unexplained)")
    parser.add_argument("deployment")
    parser.add_argument("--since", type=instant, default=None, metavar="ISO",
                        help="from this instant (ISO 8601; default: 24 hours before --until)")
    parser.add_argument("--until", type=instant, default=None, metavar="ISO",
                        help="up to this instant (ISO 8601 or 'now'; default now)")
    parser.add_argument("--page", type=_page, default=1000, metavar="N",
                        help="due times read per request (1-1000, default 1000)")
    parser.set_defaults(func=lambda a: run_command(a, _explain))

