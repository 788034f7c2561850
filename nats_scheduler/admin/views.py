"""Turn stored records into the admin API's views (pure: no I/O, ``now`` passed in).

The admin service answers from the provider's live projections and the store reader answers
from records it loaded itself; both hand the same :class:`ScheduleTable`/:class:`Ledger`
shapes to these functions, so an answer looks the same whichever of the two produced it.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Protocol

import msgspec

from ..core import calendar
from ..core.events import RunRecord, ScheduleRecord
from ..projections.ledger import Ledger
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


def _upcoming(record: ScheduleRecord, now: datetime, count: int) -> list[datetime]:
    """The next due times; of a hold with an end, those from its end on (they will fire)."""
    resumes = record.resumes_at
    if not record.active and resumes is None:
        return []
    if resumes is not None:
        now = max(now, resumes - timedelta(microseconds=1))  # a due time at the end fires
    try:
        return calendar.upcoming(record.cron, record.timezone, now, count)
    except ValueError:  # a record stored before a stricter parser: show no due times
        return []


def schedule_view(record: ScheduleRecord, ledger: Ledger, now: datetime) -> ScheduleView:
    """One Schedule row: definition, state, next due times, last Run, failures in 24 h."""
    last = ledger.summary(record.deployment_id).last
    failures = len(ledger.failures(now - FAILURE_WINDOW, record.deployment_id))
    derived = {name: getattr(record, name) for name in ScheduleRecord.__struct_fields__}
    return ScheduleView(
        **derived,
        state=schedule_state(record),
        next_due=_upcoming(record, now, NEXT_DUE_COUNT),
        last_run_state=last.state if last else None,
        last_run_at=last.created_at if last else None,
        failures_24h=failures,
    )


_encode = msgspec.json.Encoder().encode


def schedule_views(
    records: Iterable[ScheduleRecord],
    ledger: Ledger,
    now: datetime,
    *,
    filter: str | None = None,
    include_deleted: bool = False,
) -> list[ScheduleView]:
    """Rows of every matching Schedule, ordered by deployment ID."""
    return [schedule_view(r, ledger, now)
            for r in _chosen(records, filter=filter, include_deleted=include_deleted)]


def _chosen(records: Iterable[ScheduleRecord], *, filter: str | None,
            include_deleted: bool) -> list[ScheduleRecord]:
    """The matching Schedules, ordered by deployment ID."""
    return sorted((r for r in records if (include_deleted or not r.deleted)
                   and matches(r, filter)), key=lambda r: r.deployment_id)


class OrderedSchedules(Protocol):
    """Schedules in deployment-ID order (the Schedule table)."""

    def in_order(self, after: str | None = None) -> Iterable[ScheduleRecord]:
        """Every Schedule whose deployment ID sorts after ``after``, in that order."""
        ...


def schedule_page(
    schedules: OrderedSchedules,
    ledger: Ledger,
    now: datetime,
    *,
    budget: int,
    filter: str | None = None,
    include_deleted: bool = False,
    after: str | None = None,
) -> tuple[list[ScheduleView], str | None]:
    """The rows after deployment ``after``, in order, up to about ``budget`` bytes of JSON.

    Returns the rows and the deployment ID to continue after (None: this was the last
    page). At least one row per page, so a page always moves on. Only the rows returned are
    built, from Schedules already in order: a page costs its own rows (and the Schedules a
    filter passes over), not a sort of every Schedule (a million Schedules listed page by
    page were a sort of a million per page).
    """
    page: list[ScheduleView] = []
    size = 0
    chosen = (r for r in schedules.in_order(after)
              if (include_deleted or not r.deleted) and matches(r, filter))
    for record in chosen:
        view = schedule_view(record, ledger, now)
        size += len(_encode(view))
        if page and size > budget:
            return page, page[-1].deployment_id
        page.append(view)
    return page, None


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


def run_list(probe: list[RunRecord], limit: int) -> RunList:
    """A page of Runs as the admin API answers it, from a read of up to ``limit + 1`` Runs
    (``probe``): ``next_before`` continues it when there is more."""
    page = probe[:limit]
    more = len(probe) > limit or len(probe) == limit == MAX_PAGE
    return RunList(runs=page, next_before=page[-1].run_id if more and page else None)


def probe_limit(limit: int) -> int:
    """How many Runs to read for a page of ``limit``: one more, to know if there is more."""
    check_limit(limit)
    return min(limit + 1, MAX_PAGE)
