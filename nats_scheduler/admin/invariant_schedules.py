"""The checks of Runs against their Schedule's history: ``invented``, ``missed`` and
``paused`` (the list and their meaning: ``admin/invariants.py``).

A Schedule's history is every event of it with the server's time of storing it; which
definition was in force, and whether it was firing, at any instant is read from that. Pure.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime, timedelta

from ..core import calendar
from ..core.dueaccount import is_due
from ..core.events import RunClaimed, RunCreated, RunFailed, RunRecord, ScheduleRecord
from ..core.pause_visibility import NOT_STARTED_AFTER_PAUSE
from ..names import due_token
from .invariant_inputs import Options, RunHistory, ScheduleHistory, StoredEvent, Window
from .invariant_report import Violation

# ----------------------------------------------------------------------------- due times


def _until(events: ScheduleHistory, instant: datetime) -> ScheduleHistory:
    """The Schedule's events stored at or before ``instant``, in order."""
    return list(itertools.takewhile(lambda pair: pair[0].stored_at <= instant, events))


def _schedule_at(events: ScheduleHistory, instant: datetime) -> ScheduleRecord | None:
    """The Schedule as its last event stored at or before ``instant`` left it."""
    before = _until(events, instant)
    return before[-1][1].schedule if before else None


def _inactive_since(events: ScheduleHistory, instant: datetime) -> datetime | None:
    """When the Schedule stopped firing, if it was not firing at ``instant``; else None.

    A state fired if it was active, or held by a hold whose end came before the next event
    (before ``instant`` for the last): the hold lifted itself then, release stored or not.
    """
    since = None
    before = _until(events, instant)
    for i, (stored, event) in enumerate(before):
        end = before[i + 1][0].stored_at if i + 1 < len(before) else instant
        if event.schedule.fires_at(end):
            since = None
        elif since is None:
            since = stored.stored_at
    return since


def due_subject(deployment_id: str, due: datetime) -> str:
    """A due time of a deployment as a violation names it: ``<deployment>@<due token>``."""
    return f"{deployment_id}@{due_token(due)}"


def why_invented(run: RunRecord, first: StoredEvent, events: ScheduleHistory,
              options: Options) -> str | None:
    """Why a scheduled Run's due time is not one replicas could have fired, or None."""
    assert run.due_at is not None
    lookback = first.stored_at - timedelta(seconds=options.pause_visibility)
    # The definition in force when the Run was stored, or shortly before (a replica may
    # decide on a read that a change overtook within the pause visibility).
    candidates = [s for s in (_schedule_at(events, first.stored_at),
                              _schedule_at(events, lookback)) if s is not None]
    if not candidates:
        return "stored before its schedule existed"
    if not any(is_due(s, run.due_at) for s in candidates):
        return "not a due time of its schedule"
    if (options.windows and options.ticker_only
            and not _near_window(run.due_at, options.windows, options.margin, options.skew)):
        return "due while no replica was alive"
    return None


def _near_window(instant: datetime, windows: Sequence[Window], margin: float,
                 skew: float) -> bool:
    pad, ahead = timedelta(seconds=margin), timedelta(seconds=margin + skew)
    return any(w.start - pad <= instant <= w.end + ahead for w in windows)


def expected_due_times(schedules: Mapping[str, ScheduleHistory], options: Options,
                       now: datetime) -> Iterator[tuple[str, datetime]]:
    """Given pairs, plus every due time inside a window while its Schedule was active.

    Generated, not collected: a 30-day window over 100 every-minute Schedules is 4.3
    million due times (about 600 MB as a set). A pair may come twice (given and derived);
    the report's violations are a set.
    """
    yield from options.expected or ()
    if not options.windows or not options.ticker_only:
        return
    pad = timedelta(seconds=options.margin)
    until = now - timedelta(seconds=options.grace)
    for deployment_id, events in schedules.items():
        for start, end, record in _active_spans(events, now):
            for window in _merged(options.windows):
                lo = max(start, window.start) + pad
                hi = min(end - pad, window.end - pad, until)
                if lo < hi:
                    yield from ((deployment_id, due) for due in _dues(record, lo, hi))


def _active_spans(events: ScheduleHistory, now: datetime
                  ) -> Iterator[tuple[datetime, datetime, ScheduleRecord]]:
    """(from, until, record) for each stretch in which one active definition was in force
    (a hold with an end: from that end, which comes before its release is stored)."""
    for i, (stored, event) in enumerate(events):
        record = event.schedule
        until = events[i + 1][0].stored_at if i + 1 < len(events) else now
        start = stored.stored_at if record.active else record.resumes_at
        if start is not None and max(start, stored.stored_at) < until:
            yield max(start, stored.stored_at), until, record


def _merged(windows: Sequence[Window]) -> list[Window]:
    """The union of windows, as disjoint intervals (any replica alive is enough)."""
    out: list[Window] = []
    for window in sorted(windows, key=lambda w: w.start):
        if out and window.start <= out[-1].end:
            last = out[-1]
            out[-1] = Window(last.start, max(last.end, window.end))
        else:
            out.append(Window(window.start, window.end))
    return out


def _dues(record: ScheduleRecord, lo: datetime, hi: datetime) -> list[datetime]:
    try:
        dues = calendar.due_times(record.cron, record.timezone, lo - timedelta(seconds=1), hi)
    except ValueError:
        return []
    return [d for d in dues if lo <= d <= hi]


# ----------------------------------------------------------------------------- pause


def _started(events: RunHistory) -> bool:
    """A claim, or a create that carries one (schema 2) unless the gate refused it next."""
    if any(isinstance(event, RunClaimed) for _, event in events):
        return True
    first = events[0][1] if events else None
    if not (isinstance(first, RunCreated) and first.holder is not None):
        return False
    after = events[1][1] if len(events) > 1 else None
    return not (isinstance(after, RunFailed) and after.error == NOT_STARTED_AFTER_PAUSE)


def paused_of(run: RunRecord, first: StoredEvent, events: RunHistory,
            schedule: ScheduleHistory, visibility: float) -> list[Violation]:
    """No scheduled Run stored later than ``visibility`` after its Schedule stopped, started.

    Judged on the server's timestamps: the Schedule event that stopped it was stored before
    ``apply`` (or the hold, or ``delete``) returned, so this is the stricter reading.
    """
    since = _inactive_since(schedule, first.stored_at)
    if since is None or first.stored_at - since <= timedelta(seconds=visibility):
        return []
    if not _started(events):
        return []
    late = (first.stored_at - since).total_seconds()
    return [Violation("paused", run.run_id,
                      f"stored {late:.3f} s after its schedule stopped, and started")]
