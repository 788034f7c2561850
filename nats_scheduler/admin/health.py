"""Health signals an operator acts on, computed from records (pure: no I/O, ``now`` given).

* **Silent stop**: an active Schedule whose latest expected due time passed (by more than a
  grace period) without a Run. Every due time has a deterministic Run ID
  (:func:`~nats_scheduler.names.scheduled_run_id`), so "was there a Run" is one lookup. Only
  the latest due time counts: the scheduler never backfills, so older gaps (a restart, an
  outage) stop mattering as soon as the next due time fires again.
* **Stuck Run**: PENDING or DISPATCHING, nobody holds a live lease on it, and it has not
  moved for longer than the lease allows (a replica would have resumed it by then).
* **Failed Run**: FAILED within the last 24 hours.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from ..core import calendar
from ..core.events import RunRecord, ScheduleRecord
from ..core.herd import FIRE_RATE_PER_REPLICA
from ..names import scheduled_run_id
from ..projections.ledger import Ledger
from ..seam import RunState
from .api import Health

_LOOKBACKS = (
    timedelta(hours=1),
    timedelta(days=1),
    timedelta(days=8),
    timedelta(days=32),
    timedelta(days=367),
    timedelta(days=2922),
)
"""Windows searched, smallest first, for a Schedule's latest past due time: a frequent
Schedule is answered from the first (few due times), a yearly one from a later window."""


@dataclass(frozen=True)
class HealthPolicy:
    """Thresholds of the health signals."""

    silent_grace: timedelta = timedelta(seconds=60)
    """How long after a due time its Run may still be missing before it is a silent stop."""
    lease_seconds: float = 5.0
    """The providers' lease length (ASTRABOX_NATS_LEASE_SECONDS)."""
    failed_window: timedelta = timedelta(hours=24)
    fire_rate: float = FIRE_RATE_PER_REPLICA
    """Runs one replica starts a second in a busy minute: the load view's herd threshold
    (``core/herd.py``; tests lower it to mark a herd of a few Schedules)."""

    @property
    def stuck_after(self) -> timedelta:
        """Unmoved this long with no live lease: a replica should have resumed it."""
        return timedelta(seconds=2 * self.lease_seconds)


def latest_expected_due(
    record: ScheduleRecord, now: datetime, grace: timedelta, alive_since: datetime | None = None
) -> datetime | None:
    """The latest due time in ``(record.updated_at, now - grace]``, or None.

    ``updated_at`` is when the Schedule last changed (applied, released): due times before
    it were not expected of this definition. ``alive_since`` is when the asking replica
    started: a due time that passed while no process ran is skipped by design (no backfill),
    so it is not a silent stop.
    """
    if not record.active:
        return None
    end = now - grace
    start = record.updated_at if alive_since is None else max(record.updated_at, alive_since)
    if end <= start:
        return None
    for lookback in _LOOKBACKS:
        lo = max(start, end - lookback)
        try:
            # due_times is exclusive of ``end``: extend by a second to include a due time at it.
            dues = calendar.due_times(record.cron, record.timezone, lo,
                                      end + timedelta(seconds=1))
        except ValueError:
            return None
        dues = [d for d in dues if d <= end]
        if dues:
            return dues[-1]
        if lo == start:
            return None
    return None


def silent_stops(
    records: Iterable[ScheduleRecord],
    has_run: Callable[[str, datetime], bool],
    now: datetime,
    grace: timedelta,
    alive_since: datetime | None = None,
) -> list[str]:
    """Deployment IDs whose latest expected due time has no Run, sorted.

    Schedules that share a calendar and were last changed before ``alive_since`` (at a
    restart: every one) share their latest expected due time, computed once per calendar:
    a million Schedules are a few thousand calendar walks, not a million.
    """
    found = []
    known: dict[tuple[str, str, datetime], datetime | None] = {}
    for record in records:
        if not record.active:
            continue
        since = record.updated_at if alive_since is None else max(record.updated_at,
                                                                  alive_since)
        key = (record.cron, record.timezone, since)
        if key in known:
            due = known[key]
        else:
            due = known[key] = latest_expected_due(record, now, grace, alive_since)
        if due is not None and not has_run(record.deployment_id, due):
            found.append(record.deployment_id)
    return sorted(found)


def is_stuck(
    record: RunRecord, lease_expires_at: datetime | None, now: datetime, stuck_after: timedelta
) -> bool:
    """PENDING/DISPATCHING, no live lease, and unmoved for longer than ``stuck_after``.

    A Run waiting for its retry time is not stuck until ``stuck_after`` past that time.
    """
    if record.state not in (RunState.PENDING, RunState.DISPATCHING):
        return False
    if lease_expires_at is not None and lease_expires_at > now:
        return False
    since = record.updated_at
    if record.retry_at is not None and record.retry_at > since:
        since = record.retry_at
    if lease_expires_at is not None and lease_expires_at > since:
        since = lease_expires_at
    return now - since > stuck_after


def stuck_runs(
    unfinished: Iterable[RunRecord],
    leases: Mapping[str, datetime],
    now: datetime,
    stuck_after: timedelta,
) -> list[RunRecord]:
    """The stuck ones among ``unfinished``, oldest first. ``leases``: run_id -> expiry."""
    stuck = [r for r in unfinished if is_stuck(r, leases.get(r.run_id), now, stuck_after)]
    return sorted(stuck, key=lambda r: (r.updated_at, r.run_id))


def failed_runs(records: Iterable[RunRecord], now: datetime, window: timedelta) -> list[RunRecord]:
    """FAILED Runs whose last change is within ``window``, newest first."""
    cutoff = now - window
    failed = [r for r in records if r.state == RunState.FAILED and r.updated_at >= cutoff]
    return sorted(failed, key=lambda r: (r.updated_at, r.run_id), reverse=True)


def build_health(
    schedules: Iterable[ScheduleRecord],
    ledger: Ledger,
    leases: Mapping[str, datetime],
    now: datetime,
    policy: HealthPolicy = HealthPolicy(),
    alive_since: datetime | None = None,
) -> Health:
    """All three signals from a Schedule table, a Run ledger and the live leases.

    ``alive_since``: when the replica answering started (None when read from the store with
    no replica up: then every missed due time since the last change is reported).
    """

    def has_run(deployment_id: str, due: datetime) -> bool:
        if ledger.get(scheduled_run_id(deployment_id, due)) is not None:
            return True
        last = ledger.summary(deployment_id).last_scheduled
        return last is not None and last.due_at is not None and last.due_at >= due

    candidates = ledger.failures(now - policy.failed_window)
    return Health(
        silent_stops=silent_stops(schedules, has_run, now, policy.silent_grace, alive_since),
        stuck_runs=stuck_runs(ledger.unfinished(), leases, now, policy.stuck_after),
        failed_runs=failed_runs(candidates, now, policy.failed_window),
    )
