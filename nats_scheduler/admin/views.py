"""Turn stored records into the admin API's views (pure: no I/O, ``now`` passed in).

The admin service answers from the provider's live projections and the store reader answers
from records it loaded itself; both hand the same :class:`ScheduleTable`/:class:`Ledger`
shapes to these functions, so an answer looks the same whichever of the two produced it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta

from ..core import calendar
from ..core.events import RunRecord, ScheduleRecord
from ..projections.ledger import Ledger
from ..seam import RunState
from .api import (
    AdminError,
    ErrorCode,
    RunList,
    ScheduleDetail,
    ScheduleView,
)

NEXT_DUE_COUNT = 3
"""Due times shown in a Schedule's row."""
UPCOMING_COUNT = 10
"""Due times shown in a Schedule's detail."""
FAILURE_WINDOW = timedelta(hours=24)
MAX_PAGE = 1000


def schedule_state(record: ScheduleRecord) -> str:
    """``deleted``, ``held``, ``disabled`` or ``enabled`` (in that precedence)."""
    if record.deleted:
        return "deleted"
    if record.hold is not None:
        return "held"
    return "enabled" if record.enabled else "disabled"


def matches(record: ScheduleRecord, text: str | None) -> bool:
    """Whether ``text`` is a case-insensitive substring of the deployment ID or name."""
    if not text:
        return True
    needle = text.casefold()
    return needle in record.deployment_id.casefold() or needle in record.name.casefold()


def recent_runs(ledger: Ledger, deployment_id: str, since: datetime) -> Iterator[RunRecord]:
    """The deployment's Runs created at or after ``since``, newest first (pages the ledger)."""
    before: str | None = None
    while True:
        page = ledger.page(deployment_id, 200, before)
        for record in page:
            if record.created_at < since:
                return
            yield record
        if len(page) < 200:
            return
        before = page[-1].run_id


def _upcoming(record: ScheduleRecord, now: datetime, count: int) -> list[datetime]:
    if not record.active:
        return []
    try:
        return calendar.upcoming(record.cron, record.timezone, now, count)
    except ValueError:  # a record stored before a stricter parser: show no due times
        return []


def schedule_view(record: ScheduleRecord, ledger: Ledger, now: datetime) -> ScheduleView:
    """One Schedule row: definition, state, next due times, last Run, failures in 24 h."""
    last = ledger.page(record.deployment_id, 1)
    failures = sum(
        1 for r in recent_runs(ledger, record.deployment_id, now - FAILURE_WINDOW)
        if r.state == RunState.FAILED
    )
    derived = {name: getattr(record, name) for name in ScheduleRecord.__struct_fields__}
    return ScheduleView(
        **derived,
        state=schedule_state(record),
        next_due=_upcoming(record, now, NEXT_DUE_COUNT),
        last_run_state=last[0].state if last else None,
        last_run_at=last[0].created_at if last else None,
        failures_24h=failures,
    )


def schedule_views(
    records: Iterable[ScheduleRecord],
    ledger: Ledger,
    now: datetime,
    *,
    filter: str | None = None,
    include_deleted: bool = False,
) -> list[ScheduleView]:
    """Rows of every matching Schedule, ordered by deployment ID."""
    chosen = [
        r for r in records
        if (include_deleted or not r.deleted) and matches(r, filter)
    ]
    chosen.sort(key=lambda r: r.deployment_id)
    return [schedule_view(r, ledger, now) for r in chosen]


def schedule_detail(record: ScheduleRecord, ledger: Ledger, now: datetime) -> ScheduleDetail:
    """A Schedule with its next due times and a DST note for each (None when none)."""
    upcoming = _upcoming(record, now, UPCOMING_COUNT)
    notes: list[str | None] = []
    for due in upcoming:
        try:
            notes.append(calendar.dst_transition_near(record.timezone, due, record.cron))
        except ValueError:
            notes.append(None)
    return ScheduleDetail(
        schedule=schedule_view(record, ledger, now), upcoming=upcoming, dst_notes=notes
    )


def check_limit(limit: int) -> None:
    """The seam's paging bound (1..1000), as an admin error."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise AdminError(ErrorCode.INVALID_REQUEST, f"limit must be between 1 and {MAX_PAGE}")


def run_page(ledger: Ledger, deployment_id: str, limit: int, before: str | None) -> RunList:
    """A page of a deployment's Runs, newest first; ``next_before`` continues it."""
    check_limit(limit)
    try:
        page = ledger.page(deployment_id, limit, before)
    except KeyError:
        raise AdminError(
            ErrorCode.NOT_FOUND,
            f"run {before!r} is not a run of deployment {deployment_id!r}",
        ) from None
    next_before = page[-1].run_id if len(page) == limit else None
    if next_before is not None and not ledger.page(deployment_id, 1, next_before):
        next_before = None
    return RunList(runs=page, next_before=next_before)
