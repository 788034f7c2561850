"""A pass of the due-time account judges each Schedule from its change's margin or the
window's start, whichever is later (``runtime/due_watch.py``): against a plain reading of
that rule, Schedule by Schedule, on many calendars, zones and change times (no server)."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from nats_scheduler.core import calendar
from nats_scheduler.core.dueaccount import CHANGE_MARGIN, PENDING_GRACE
from nats_scheduler.core.events import Hold, ScheduleRecord
from nats_scheduler.projections.ledger import Ledger
from nats_scheduler.runtime.due_watch import DueWatch
from nats_scheduler.runtime.metrics import Metrics
from nats_scheduler.seam import RunPayload

pytestmark = pytest.mark.anyio

CRONS = ["* * * * *", "*/5 * * * *", "*/2 * * * *", "7 * * * *", "30 */6 * * *", "0 3 * * *"]
ZONES = ["UTC", "Europe/Berlin", "Asia/Kolkata", "Australia/Lord_Howe"]
LO = datetime(2030, 3, 31, 0, 58, 40, tzinfo=UTC)  # Berlin's clocks go forward at 01:00 UTC


class _Table:
    def __init__(self, records: list[ScheduleRecord]) -> None:
        self.records = records

    def live(self) -> list[ScheduleRecord]:
        return self.records


class _History:
    async def states(self, pairs: object) -> dict[str, object]:
        list(pairs)  # type: ignore[call-overload]
        return {}  # nothing stored: every due time of an active Schedule is unexplained


def _owns(dep: str, due: datetime) -> bool:
    return (int(due.timestamp()) // 60 + len(dep)) % 3 != 0


def _records(rng: random.Random, hi: datetime) -> list[ScheduleRecord]:
    span = (hi - LO).total_seconds() + 400.0
    hold = Hold(by="ops", reason="test", at=LO)
    return [ScheduleRecord(
        deployment_id=f"dep-{i}", name=f"dep-{i}", cron=rng.choice(CRONS),
        timezone=rng.choice(ZONES), enabled=rng.random() < 0.9,
        payload=RunPayload("t", "p"), version=1,
        hold=hold if rng.random() < 0.1 else None,
        updated_at=LO + timedelta(seconds=rng.choice(
            [-CHANGE_MARGIN, -CHANGE_MARGIN - 1e-6, -CHANGE_MARGIN + 1e-6,
             rng.uniform(-300.0, span)])))
        for i in range(400)]


def _expected(records: list[ScheduleRecord], hi: datetime) -> tuple[dict[str, int], int]:
    skipped: dict[str, int] = {}
    unexplained = 0
    for record in records:
        start = max(LO, record.updated_at + timedelta(seconds=CHANGE_MARGIN))
        if start >= hi:
            continue
        dues = [d for d in calendar.due_times(record.cron, record.timezone, start,
                                              hi + timedelta(microseconds=1))
                if _owns(record.deployment_id, d)]
        if not dues:
            continue
        if record.active:
            unexplained += len(dues)
        else:
            reason = "disabled" if not record.enabled else "held"
            skipped[reason] = skipped.get(reason, 0) + len(dues)
    return skipped, unexplained


@pytest.mark.parametrize("seed", range(4))
async def test_each_schedule_is_judged_from_its_change_or_the_window_start(seed: int) -> None:
    rng = random.Random(seed)
    now = LO + timedelta(seconds=PENDING_GRACE + rng.choice([30.0, 600.0, 7200.0]))
    hi = now - timedelta(seconds=PENDING_GRACE)
    records = _records(rng, hi)
    metrics = Metrics.disabled()
    watch = DueWatch(_Table(records), Ledger(), _History(), None,  # type: ignore[arg-type]
                     metrics, owns=_owns)
    watch.start_at(LO)
    await watch.run_pass(now)
    skipped, unexplained = _expected(records, hi)
    figures = metrics.snapshot()
    assert unexplained > 0 and skipped
    assert figures.due_times_skipped == skipped
    assert figures.due_times_unexplained == unexplained
