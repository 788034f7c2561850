"""The ``unexplained`` check: every due time of the store's Schedules has a Run or a reason.

It is the account of due times (``core/dueaccount.py``, ``nats-scheduler explain``) taken
over every Schedule of the store at once: a due time of the calendar as it stood, past the
account's grace, whose Run is not stored and that no pause, hold, outage or change
explains is a broken promise. Unlike ``missed``, it needs nothing from the caller: the
outages are in the store (recorded by the replica whose start ended each, and the one
going on now when no replica's key is in the replicas bucket).

Judged only where the store can answer (:class:`AccountFacts`): from the first start of a
release that records outages (a store that records none is not judged), within the
history's retention (its age, and for a deployment whose history is full, from its oldest
retained Run), and from ``check --since``. Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from ..core.dueaccount import PENDING_GRACE, Change, Outcome, due_times_before, judge
from ..core.dueaccount import spans as calendar_spans
from .invariant_inputs import AccountFacts, ScheduleHistory
from .invariant_report import Violation
from .invariant_schedules import due_subject


@dataclass
class Histories:
    """Per deployment, what the Runs read say about how far its history reaches."""

    runs: dict[str, int]
    oldest: dict[str, datetime]
    """The ``created_at`` of the oldest Run read, per deployment."""

    def note(self, deployment_id: str, created_at: datetime) -> None:
        self.runs[deployment_id] = self.runs.get(deployment_id, 0) + 1
        known = self.oldest.get(deployment_id)
        if known is None or created_at < known:
            self.oldest[deployment_id] = created_at


def unexplained_of(schedules: Mapping[str, ScheduleHistory], facts: AccountFacts,
                   histories: Histories, has_run: Callable[[str, datetime], bool], *,
                   now: datetime, since: datetime | None = None) -> Iterator[Violation]:
    """One ``unexplained`` violation per due time the account cannot explain."""
    if facts.accounted_since is None:
        return
    until = now - timedelta(seconds=PENDING_GRACE)
    for deployment_id, events in schedules.items():
        lo = _floor(deployment_id, facts, histories, now, since)
        if lo >= until:
            continue
        changes = [Change(stored.stored_at, event.schedule) for stored, event in events]
        spans = calendar_spans(changes)
        for due, index in due_times_before(spans, since=lo, until=until):
            if has_run(deployment_id, due):
                continue
            line = judge(due, spans, index, None, facts.outages, now)
            if line.outcome == Outcome.UNEXPLAINED:
                yield Violation("unexplained", due_subject(deployment_id, due),
                                "no run, and no pause, hold or outage explains it")


def _floor(deployment_id: str, facts: AccountFacts, histories: Histories, now: datetime,
           since: datetime | None) -> datetime:
    assert facts.accounted_since is not None
    floors = [facts.accounted_since]
    if since is not None:
        floors.append(since)
    if facts.retention_days is not None:
        floors.append(now - timedelta(days=facts.retention_days))
    oldest = histories.oldest.get(deployment_id)
    if (facts.retention_runs is not None and oldest is not None
            and histories.runs.get(deployment_id, 0) >= facts.retention_runs):
        floors.append(oldest)
    return max(floors)
