"""The account of due times: for each due time of a Schedule, its Run or why there is none.

The rules make missing Runs expected (docs/contract.md, "The guarantees"): a due time that
passes while the Schedule is disabled or held, or while no provider process runs, is
skipped and never backfilled. This module tells such a skip from a broken promise, from
facts alone: the Schedule's stored changes (each with the server's time of storing it),
the outages the replicas recorded, the Runs found for the due times, and ``now``. No I/O,
no clock: the adapters read the facts (``admin/account_reads.py``) and pass ``now``.

The calendar is the one that stood at each instant: a change governs the due times after
the server stored it, up to the next change (``(start, end]``), so an edit or a disable
changes the account from its commit on, and a deleted Schedule has no due times at all.
Each due time gets one :class:`Outcome`:

- ``run``: its Run exists (whatever the Schedule did meanwhile: a Run stored is a Run);
- ``skipped`` with a :class:`Reason` (the rules' reasons, docs/contract.md "Due times
  without a Run"; ``refused`` when a standing refusal of a reconcile took it away, a fact
  the replicas keep in memory and the caller passes in: :func:`refused_change`);
- ``pending``: not yet due, or due within ``grace``: a live replica may still fire it (the
  owner's patience and a busy minute's creation both fit in it). A due time still to come
  is pending whatever the Schedule holds now: a hold or a disable may end before it;
- ``unexplained``: past the grace and none of the above: a broken promise.

Pages go newest first: :func:`due_times_before` finds the ``limit`` due times before a
cursor without computing the rest of the window, so an account over 30 days costs what one
page costs (the calendar is asked for windows that double until a page is full).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

import msgspec

from ..seam import RunPayload, RunState
from . import calendar
from .events import RunRecord, ScheduleRecord
from .refusals import Refusal

PENDING_GRACE = 60.0
"""Seconds after a due time in which a missing Run is ``pending``, not ``unexplained``: the
owner's patience (30 s, after which any replica fires it) and the creation of a busy
minute's Runs (docs/benchmarks.md) both fit in it."""

CHANGE_MARGIN = 2.0
"""Seconds after a change in which a due time of the calendar it started may pass unfired:
a replica plans a changed Schedule from the moment it learns of the change, milliseconds
after it is stored (the invariant checker allows the same margin)."""

_FIRST_WINDOW = timedelta(hours=1)
_TICK = timedelta(microseconds=1)


class Outcome(StrEnum):
    """What became of one due time."""

    RUN = "run"
    SKIPPED = "skipped"
    PENDING = "pending"
    UNEXPLAINED = "unexplained"


class Reason(StrEnum):
    """Why a due time was skipped (docs/contract.md, "Due times without a Run")."""

    DISABLED = "disabled"
    """AstraBox's definition was disabled (``enabled=False``)."""
    HELD = "held"
    """An operator held the Schedule."""
    NO_PROCESS = "no_process"
    """No provider process was running: an outage a replica recorded when it started, or the
    one going on now."""
    DELETED = "deleted"
    """The Schedule was deleted after the due time, before any replica fired it."""
    SCHEDULE_CHANGE = "schedule_change"
    """The Schedule changed within moments of the due time: a replica plans a changed
    calendar once it learns of the change (``CHANGE_MARGIN``), and fires a due time only if
    the calendar still has it when it fires."""
    REFUSED = "refused"
    """A reconcile refused AstraBox's definition (``core/refusals.py``): a deployment with no
    stored Schedule, or one whose stored Schedule is disabled where AstraBox's is enabled
    (and not held: such a one is ``held``, the hold would outlive the change).
    ``note`` says why, ``by`` which replica, ``since`` when."""


@dataclass(frozen=True)
class Change:
    """One stored change of the Schedule: the record it left, stored at ``at`` (server).

    Or a refusal (:func:`refused_change`): from ``at`` on, ``refused`` stands; ``record`` is
    the stored Schedule, still in force, or the refused definition when none is stored
    (``unstored``)."""

    at: datetime
    record: ScheduleRecord
    refused: Refusal | None = None
    unstored: bool = False


def refused_change(changes: Sequence[Change], refusal: Refusal) -> Change | None:
    """The change a standing refusal makes to the account, or None when it has no calendar
    to show (refused with nothing stored, and a calendar the rules cannot read)."""
    if refusal.at is None:
        return None
    before = [c for c in changes if c.at <= refusal.at]
    current = max(before, key=lambda c: c.at).record if before else None
    if current is not None and not current.deleted:
        return Change(refusal.at, current, refused=refusal)
    if refusal.cron is None or refusal.timezone is None:
        return None
    try:
        calendar.validate(refusal.cron, refusal.timezone)
    except ValueError:
        return None
    record = ScheduleRecord(
        deployment_id=refusal.deployment_id, name=refusal.deployment_id, cron=refusal.cron,
        timezone=refusal.timezone, enabled=refusal.enabled, payload=RunPayload("", ""),
        version=0, updated_at=refusal.at)
    return Change(refusal.at, record, refused=refusal, unstored=True)


@dataclass(frozen=True)
class Outage:
    """An interval in which no provider process ran: ``end`` None while it goes on."""

    start: datetime
    end: datetime | None
    evidence: str = ""
    """What proves a process was alive at ``start`` (the newest write before the outage)."""


class DueTime(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=False):
    """One due time of the account, as ``nats-scheduler explain --json`` prints it."""

    due_at: datetime
    outcome: Outcome
    reason: Reason | None = None
    run_id: str | None = None
    state: RunState | None = None
    late_seconds: float | None = None
    """From the due time to the Run's first attempt (its ``start_session``), by the store's
    clock as the creating replica measures it; None until it starts."""
    error: str | None = None
    """The Run's error when it FAILED."""
    since: datetime | None = None
    """When the skip's cause began: disabled, held, the outage's last sign of life, the
    change."""
    until: datetime | None = None
    """When it ended (enabled again, released, the first replica's start); None: ongoing."""
    by: str | None = None
    """Who held it (``held``), which replica recorded the outage (``no_process``) or refused
    the definition (``refused``)."""
    note: str | None = None
    """The hold's reason (``held``), what proves the outage's start (``no_process``), or
    why the definition was refused (``refused``)."""
    version: int | None = None
    """The definition's version in force (``disabled``: the one that disabled it)."""
    cron: str
    timezone: str


@dataclass(frozen=True)
class Span:
    """The time ``(start, end]`` one change governed, with the change before it."""

    start: datetime
    end: datetime | None
    record: ScheduleRecord
    previous: ScheduleRecord | None
    refused: Refusal | None = None
    """A refusal standing over this span (from its change on: a later hold keeps it)."""
    unstored: bool = False


def spans(changes: Sequence[Change]) -> list[Span]:
    """The calendar as it stood over time, oldest first: one span per stored change."""
    ordered = sorted(changes, key=lambda c: c.at)
    found = []
    refused: Refusal | None = None
    for i, change in enumerate(ordered):
        end = ordered[i + 1].at if i + 1 < len(ordered) else None
        previous = ordered[i - 1].record if i else None
        refused = change.refused or refused
        found.append(Span(change.at, end, change.record, previous, refused, change.unstored))
    return found


def _dues(record: ScheduleRecord, lo: datetime, hi: datetime) -> list[datetime]:
    """Due times in ``(lo, hi]``, ascending; none for a calendar the rules cannot read."""
    if hi <= lo:
        return []
    try:
        return calendar.due_times(record.cron, record.timezone, lo, hi + _TICK)
    except ValueError:
        return []


def _descending(record: ScheduleRecord, lo: datetime, hi: datetime) -> Iterator[datetime]:
    """Due times in ``(lo, hi]``, newest first, in windows that double (lazy)."""
    window = _FIRST_WINDOW
    while hi > lo:
        start = max(lo, hi - window)
        yield from reversed(_dues(record, start, hi))
        hi, window = start, window * 2


def due_times_before(all_spans: Sequence[Span], *, since: datetime, until: datetime,
                     before: datetime | None = None, limit: int | None = None
                     ) -> list[tuple[datetime, int]]:
    """Up to ``limit`` due times in ``[since, until]`` and before ``before``, newest first,
    each with the index of the span that governs it (deleted Schedules have none)."""
    top = until if before is None else min(until, before - _TICK)
    found: list[tuple[datetime, int]] = []
    for index in range(len(all_spans) - 1, -1, -1):
        span = all_spans[index]
        if span.record.deleted:
            continue
        hi = top if span.end is None else min(top, span.end)
        lo = max(span.start, since - _TICK)
        for due in _descending(span.record, lo, hi):
            found.append((due, index))
            if limit is not None and len(found) >= limit:
                return found
    return found


def _stretch(all_spans: Sequence[Span], index: int, same: Callable[[ScheduleRecord], bool]
             ) -> tuple[datetime, datetime | None]:
    """Start and end of the run of spans around ``index`` for which ``same(record)`` holds."""
    lo = index
    while lo > 0 and same(all_spans[lo - 1].record):
        lo -= 1
    hi = index
    while hi + 1 < len(all_spans) and same(all_spans[hi + 1].record):
        hi += 1
    return all_spans[lo].start, all_spans[hi].end


def _line(due: datetime, record: ScheduleRecord, outcome: Outcome, **fields: object) -> DueTime:
    """One line of the account, with the calendar that governed its due time."""
    return DueTime(due_at=due, cron=record.cron, timezone=record.timezone, outcome=outcome,
                   **fields)  # type: ignore[arg-type]


def _run(due: datetime, record: ScheduleRecord, run: RunRecord) -> DueTime:
    late = (None if run.first_attempt_at is None
            else round((run.first_attempt_at - due).total_seconds(), 3))
    return _line(due, record, Outcome.RUN, run_id=run.run_id, state=run.state,
                 late_seconds=late, error=run.error if run.state == RunState.FAILED else None)


def _inactive(due: datetime, all_spans: Sequence[Span], index: int) -> DueTime | None:
    """The skip of a due time whose governing definition did not fire: disabled or held."""
    record = all_spans[index].record
    if not record.enabled:
        since, until = _stretch(all_spans, index, lambda r: not r.enabled and not r.deleted)
        return _line(due, record, Outcome.SKIPPED, reason=Reason.DISABLED, since=since,
                     until=until, version=record.version)
    if record.hold is not None:
        hold = record.hold
        since, until = _stretch(all_spans, index,
                                lambda r: r.hold == hold and r.enabled and not r.deleted)
        return _line(due, record, Outcome.SKIPPED, reason=Reason.HELD, since=since,
                     until=until, by=hold.by, note=hold.reason)
    return None


def _refused(due: datetime, all_spans: Sequence[Span], index: int) -> DueTime | None:
    """The skip of a due time a standing refusal took away: nothing stored, or stored
    disabled where AstraBox's definition is enabled. A held one stays held: the hold would
    outlive the change the refusal kept out."""
    span = all_spans[index]
    refusal, record = span.refused, span.record
    if refusal is None or not (span.unstored or (refusal.enabled and not record.enabled)):
        return None
    if record.hold is not None and not span.unstored:
        hold = record.hold
        since, until = _stretch(all_spans, index, lambda r: r.hold == hold and not r.deleted)
        return _line(due, record, Outcome.SKIPPED, reason=Reason.HELD, since=since,
                     until=until, by=hold.by, note=hold.reason)
    return _line(due, record, Outcome.SKIPPED, reason=Reason.REFUSED, since=refusal.at,
                 by=refusal.by, note=refusal.reason)


def _outage(due: datetime, record: ScheduleRecord, outages: Sequence[Outage]) -> DueTime | None:
    for outage in outages:
        if outage.start < due and (outage.end is None or due <= outage.end):
            return _line(due, record, Outcome.SKIPPED, reason=Reason.NO_PROCESS,
                         since=outage.start, until=outage.end, note=outage.evidence or None)
    return None


def _calendar_changed(before: ScheduleRecord | None, after: ScheduleRecord) -> bool:
    """Whether a change started a calendar replicas had not planned (new, resumed, edited)."""
    return (before is None or not before.active
            or (before.cron, before.timezone) != (after.cron, after.timezone))


def is_due(record: ScheduleRecord, due: datetime) -> bool:
    """Whether ``due`` is a due time of the record's calendar (False for one the rules
    cannot read)."""
    try:
        return calendar.is_due_time(record.cron, record.timezone, due)
    except ValueError:
        return False


def _changed_around(due: datetime, all_spans: Sequence[Span], index: int,
                    grace: timedelta) -> DueTime | None:
    """A due time a change around it took away: just after a new calendar began, or just
    before the Schedule stopped (or stopped having it) while the firing was under way."""
    span = all_spans[index]
    record = span.record
    if (due - span.start <= timedelta(seconds=CHANGE_MARGIN)
            and _calendar_changed(span.previous, record)):
        return _line(due, record, Outcome.SKIPPED, reason=Reason.SCHEDULE_CHANGE,
                     since=span.start)
    following = all_spans[index + 1] if index + 1 < len(all_spans) else None
    if following is None or following.start - due > grace:
        return None
    after = following.record
    reason = (Reason.DELETED if after.deleted else Reason.DISABLED if not after.enabled
              else Reason.HELD if after.hold is not None
              else None if is_due(after, due) else Reason.SCHEDULE_CHANGE)
    if reason is None:
        return None
    extra: dict[str, object] = {}
    if reason == Reason.HELD and after.hold is not None:
        extra = {"by": after.hold.by, "note": after.hold.reason}
    if reason == Reason.DISABLED:
        extra = {"version": after.version}
    return _line(due, record, Outcome.SKIPPED, reason=reason, since=following.start, **extra)


def judge(due: datetime, all_spans: Sequence[Span], index: int, run: RunRecord | None,
          outages: Sequence[Outage], now: datetime, grace: float = PENDING_GRACE) -> DueTime:
    """The outcome of one due time, governed by ``all_spans[index]`` (see the module doc)."""
    record = all_spans[index].record
    if run is not None:
        return _run(due, record, run)
    if due > now:
        return _line(due, record, Outcome.PENDING)  # not due yet: nothing is decided
    found = (_refused(due, all_spans, index) or _inactive(due, all_spans, index)
             or _outage(due, record, outages)
             or _changed_around(due, all_spans, index, timedelta(seconds=grace)))
    if found is not None:
        return found
    if due > now - timedelta(seconds=grace):
        return _line(due, record, Outcome.PENDING)
    return _line(due, record, Outcome.UNEXPLAINED)


@dataclass(frozen=True)
class Page:
    """One page of an account: due times newest first, and where the next page starts."""

    due_times: list[DueTime]
    next_before: datetime | None
    """The ``before`` of the next (older) page; None: this page reaches ``since``."""
    lowest: datetime
    """The oldest instant this page covers: its last due time, or ``since`` on the last page
    (the Runs of other triggers created in ``[lowest, top]`` belong to it)."""


def account(all_spans: Sequence[Span], runs: Mapping[datetime, RunRecord],
            outages: Sequence[Outage], *, since: datetime, until: datetime, now: datetime,
            dues: Sequence[tuple[datetime, int]], limit: int | None,
            grace: float = PENDING_GRACE) -> Page:
    """Judge ``dues`` (from :func:`due_times_before` with ``limit + 1``: one more than a page,
    to tell whether another follows); ``runs`` are the scheduled Runs found, by due time."""
    more = limit is not None and len(dues) > limit
    shown = dues[:limit] if limit is not None else dues
    judged = [judge(due, all_spans, index, runs.get(due), outages, now, grace)
              for due, index in shown]
    if more:
        last = shown[-1][0]
        return Page(judged, next_before=last, lowest=last)
    return Page(judged, next_before=None, lowest=since)
