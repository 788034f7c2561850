"""One due time of the account in words, the same in the console and the command line.

"skipped: held by ana@ops, 'db migration', 02:10-04:30" says what the account's fields
say (:class:`~.dueaccount.DueTime`), for an operator who asked why the 03:00 report did not
run. Spans are in UTC, ``HH:MM``, with the month and day when not the due time's day, and
"since 02:10" while the cause goes on. Pure.
"""

from __future__ import annotations

from datetime import UTC, datetime

from .dueaccount import DueTime, Outcome, Reason


def _clock(instant: datetime, day: datetime) -> str:
    """``HH:MM`` in UTC, with the month and day in front when it is not ``day``'s."""
    utc = instant.astimezone(UTC)
    if utc.date() == day.astimezone(UTC).date():
        return utc.strftime("%H:%M")
    return utc.strftime("%m-%d %H:%M")


def span(line: DueTime) -> str:
    """From when to when the cause of a skip lasted: ``02:10-04:30`` or ``since 02:10``."""
    if line.since is None:
        return ""
    if line.until is None:
        return f"since {_clock(line.since, line.due_at)}"
    day = line.due_at.astimezone(UTC).date()
    within = line.since.astimezone(UTC).date() == line.until.astimezone(UTC).date() == day
    reference = line.due_at if within else datetime.min.replace(tzinfo=UTC)
    return f"{_clock(line.since, reference)}-{_clock(line.until, reference)}"


def _seconds(value: float) -> str:
    if abs(value) < 100:
        return f"{value:.1f} s"
    return f"{value / 60:.0f} min" if abs(value) < 7200 else f"{value / 3600:.1f} h"


def _after(line: DueTime) -> str:
    """How long after the due time the cause came (a change while the firing was under way)."""
    if line.since is None:
        return ""
    gap = (line.since - line.due_at).total_seconds()
    if gap >= 0:
        return f" {_seconds(gap)} after the due time, before it fired"
    return f" {_seconds(-gap)} before the due time"


def _skipped(line: DueTime) -> str:
    when = span(line)
    if line.reason == Reason.HELD:
        why = f", {line.note!r}" if line.note else ""
        return f"skipped: held by {line.by or 'an operator'}{why}, {when}".rstrip(", ")
    if line.reason == Reason.DISABLED:
        version = f" (version {line.version})" if line.version else ""
        if line.until is None and line.since is not None and line.since > line.due_at:
            return f"skipped: disabled{version}{_after(line)}"
        return f"skipped: disabled by AstraBox{version}, {when}"
    if line.reason == Reason.NO_PROCESS:
        return f"skipped: no scheduler process was running, {when}"
    if line.reason == Reason.DELETED:
        return f"skipped: the schedule was deleted{_after(line)}"
    if line.reason == Reason.SCHEDULE_CHANGE:
        return f"skipped: the schedule changed{_after(line)}"
    if line.reason == Reason.REFUSED:
        by = f" by {line.by}" if line.by else ""
        return f"skipped: refused{by}, {when}: {line.note or 'no reason given'}"
    return f"skipped: {line.reason}"


def describe(line: DueTime) -> str:
    """The outcome of one due time in a sentence."""
    if line.outcome == Outcome.RUN:
        state = line.state.value if line.state is not None else "stored"
        late = (f", started {_seconds(line.late_seconds)} after its due time"
                if line.late_seconds is not None else "")
        error = f": {line.error}" if line.error else ""
        return f"run {line.run_id}: {state}{late}{error}"
    if line.outcome == Outcome.SKIPPED:
        return _skipped(line)
    if line.outcome == Outcome.PENDING:
        return "pending: a running replica may still fire it"
    return "unexplained: no Run, and no pause, hold or outage to explain it"
