"""``check``: prove the scheduler's promises against a store, after the fact.

Reads every stored Schedule and Run event of the prefix (with the server's timestamps) and
the leases, and runs the invariant checker (:mod:`nats_scheduler.admin.invariants`): one
Run per due time, no Run started after a pause, one Session per Run, every Run finished or
legitimately in flight, projections equal to a replay. ``--alive`` tells it when replicas
were running (so it can expect due times and bound takeovers); ``--calls`` gives it
AstraBox's record of handler calls, one JSON object per line::

    {"at": "2026-05-01T12:00:00.120Z", "method": "start_session", "run_id": "s...",
     "session_id": null, "returned": "sess-1", "process": "host-a", "outcome": "ok"}

The Run events are streamed through the checker a batch at a time, so memory stays bounded
by the Runs still open, not by the store (a million stored Runs in under 300 MB: see
bench/check_scale.py); ``--since`` judges only the Runs created from an instant on. The
rate (events per second) is printed to stderr as it goes and in the summary.

Exit code 0 when nothing is violated, 7 (unhealthy) with the report otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import socket
import sys
from datetime import UTC, datetime
from pathlib import Path

from ..admin.api import AdminError, ErrorCode
from ..admin.invariants import EARLY_TOLERANCE, HandlerCall, Options, Window
from ..admin.paging_check import PAGING_SAMPLE
from ..admin.stored_events import CheckRun, check_stored
from ..jetstream.connection import connect
from .common import (
    EXIT_OK,
    EXIT_UNHEALTHY,
    connection_flags,
    output_flags,
    print_json,
    run_command,
    settings_from_args,
)


def instant(text: str) -> datetime:
    """An ISO 8601 instant (``Z`` or an offset; naive means UTC), or ``now``."""
    if text.strip().lower() == "now":
        return datetime.now(UTC)
    value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def tolerance(text: str) -> float | None:
    """Seconds (not negative), or ``off``."""
    if text.strip().lower() == "off":
        return None
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("expected seconds or 'off'") from None
    if value < 0:
        raise argparse.ArgumentTypeError("expected seconds >= 0 or 'off'")
    return value


def window(text: str) -> Window:
    """``START/END[/IDENTITY]``: when a replica (optionally named) was alive."""
    parts = text.split("/")
    if len(parts) not in (2, 3):
        raise argparse.ArgumentTypeError("expected START/END or START/END/IDENTITY")
    try:
        start, end = instant(parts[0]), instant(parts[1])
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 instant: {exc}") from None
    return Window(start, end, parts[2] if len(parts) == 3 else None)


def read_calls(path: Path) -> list[HandlerCall]:
    """The handler's record of calls from a JSON Lines file (see the module docstring)."""
    calls = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
            at = data["at"]
            calls.append(HandlerCall(
                at=(datetime.fromtimestamp(at, UTC) if isinstance(at, (int, float))
                    else instant(at)),
                method=data["method"], run_id=data["run_id"],
                session_id=data.get("session_id"), process=data.get("process", ""),
                outcome=data.get("outcome", "ok"), returned=data.get("returned")))
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}:{number}: not a handler call record ({exc})") from None
    return calls


def _calls(args: argparse.Namespace) -> list[HandlerCall] | None:
    """The ``--calls`` file; an unreadable one is an invalid request (exit 2)."""
    if not args.calls:
        return None
    try:
        return read_calls(Path(args.calls))
    except (OSError, ValueError) as exc:
        raise AdminError(ErrorCode.INVALID_REQUEST, str(exc)) from None


PROGRESS_EVERY = 5.0
"""Seconds between the progress lines on stderr."""


def _clipped(windows: list[Window], since: datetime | None) -> list[Window]:
    """The ``--alive`` windows from ``--since`` on: nothing before it is read or expected."""
    if since is None:
        return windows
    return [Window(max(w.start, since), w.end, w.identity) for w in windows if w.end > since]


async def _check(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    calls = _calls(args)
    options = Options(calls=calls, windows=_clipped(list(args.alive or ()), args.since),
                      grace=args.grace, margin=args.margin,
                      lease_seconds=args.lease_seconds or settings.lease_seconds,
                      early_tolerance=args.early_tolerance)
    shown = [0.0]

    def progress(events: int, seconds: float) -> None:
        if seconds - shown[0] >= PROGRESS_EVERY and not args.json:
            shown[0] = seconds
            print(f"  ... {events} events read, {events / seconds:,.0f} events/s",
                  file=sys.stderr, flush=True)

    nc = await connect(settings, f"nats-scheduler-check-{socket.gethostname()}")
    try:
        result = await check_stored(nc, settings.prefix, options, since=args.since,
                                    timeout=args.timeout, progress=progress,
                                    paging_sample=args.paging_sample)
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(nc.close(), 2.0)
    known = set(args.known_foreign or ())
    if known:
        result = dataclasses.replace(result, report=result.report.without(
            lambda v: v.check == "foreign" and v.subject in known))
    _print(result, args.json)
    return EXIT_OK if result.report.ok else EXIT_UNHEALTHY


def _print(result: CheckRun, as_json: bool) -> None:
    report = result.report
    if as_json:
        print_json({"ok": report.ok, **report.to_builtins(),
                    "seconds": round(result.seconds, 3), "events_per_second": round(result.rate),
                    "skipped_before_since": result.skipped,
                    "paged_deployments": list(result.paged),
                    "paging_seconds": round(result.paging_seconds, 3)})
        return
    print(report.text(), flush=True)
    skipped = (f"; {result.skipped} events of runs created before --since skipped"
               if result.skipped else "")
    print(f"read and judged in {result.seconds:.1f} s: {result.rate:,.0f} events/s{skipped}",
          flush=True)
    if result.paged:
        print(f"paged the whole history of {len(result.paged)} deployments in "
              f"{result.paging_seconds:.1f} s", flush=True)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser(
        "check", parents=[connection_flags(), output_flags()],
        help="check the stored history against the scheduler's promises (exit 7: violated)")
    parser.add_argument("--alive", action="append", type=window, metavar="START/END[/ID]",
                        help="when a replica was running (ISO 8601, or 'now'); repeatable. "
                             "Due times inside are expected to have exactly one Run")
    parser.add_argument("--calls", metavar="FILE",
                        help="AstraBox's record of handler calls, JSON Lines")
    parser.add_argument("--grace", type=float, default=30.0,
                        help="seconds a Run may be unfinished without a live lease "
                             "(default 30)")
    parser.add_argument("--margin", type=float, default=2.0,
                        help="seconds around --alive edges and Schedule changes in which a "
                             "due time is not expected (default 2)")
    parser.add_argument("--lease-seconds", type=float, default=None,
                        help="the replicas' lease length (ASTRABOX_NATS_LEASE_SECONDS)")
    parser.add_argument("--since", type=instant, default=None, metavar="INSTANT",
                        help="judge only the runs created from this ISO 8601 instant on "
                             "(default: the whole history)")
    parser.add_argument("--early-tolerance", type=tolerance, default=EARLY_TOLERANCE,
                        metavar="SECONDS",
                        help="seconds a scheduled run may be stored before its due time by "
                             f"the server's clock (default {EARLY_TOLERANCE}); 'off' when "
                             "due times were fired by hand (AstraBox's conformance tests)")
    parser.add_argument("--paging-sample", type=int, default=PAGING_SAMPLE, metavar="N",
                        help="walk the Run history of N deployments (sampled from the Runs "
                             f"read) page by page and check it lists every retained Run once "
                             f"(default {PAGING_SAMPLE}; 0: skip)")
    parser.add_argument("--known-foreign", action="append", metavar="SUBJECT#SEQ",
                        help="a foreign message already looked at, as `check` names it: "
                             "not counted as a violation (repeatable; the event streams keep "
                             "every message, so one there cannot be removed: "
                             "docs/failure-modes.md, \"Foreign messages\")")
    parser.set_defaults(func=lambda a: run_command(a, _check))
