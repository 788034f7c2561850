"""The busiest minute of the next day against what the live replicas start (core/herd.py),
and ``nats-scheduler doctor``'s warning about it."""

from __future__ import annotations

from datetime import UTC, datetime

from nats_scheduler.admin.doctor import Status, herd_check
from nats_scheduler.core.events import Hold, ScheduleRecord
from nats_scheduler.core.herd import busiest_minute, herd_capacity, replicas_needed
from nats_scheduler.seam import RunPayload, Schedule

NOW = datetime(2030, 1, 1, 10, 20, 30, tzinfo=UTC)


def record(deployment: str, cron: str, *, enabled: bool = True, held: bool = False,
           timezone: str = "UTC") -> ScheduleRecord:
    hold = Hold(by="op", reason="r", at=NOW) if held else None
    return ScheduleRecord.of(Schedule(deployment, deployment, cron, timezone, enabled,
                                      RunPayload("t", "p"), 1), updated_at=NOW, hold=hold)


def test_the_top_of_the_hour_is_the_busiest_minute_of_hourly_and_minutely_schedules() -> None:
    schedules = ([record(f"h{i}", "0 * * * *") for i in range(30)]
                 + [record(f"m{i}", "* * * * *") for i in range(20)]
                 + [record("off", "0 * * * *", enabled=False), record("held", "0 * * * *",
                                                                      held=True)])
    minute, due = busiest_minute(schedules, NOW)
    assert (minute, due) == (datetime(2030, 1, 1, 11, 0, tzinfo=UTC), 50)


def test_a_daily_herd_is_found_hours_ahead_and_nothing_due_is_none() -> None:
    schedules = [record(f"d{i}", "30 2 * * *", timezone="Europe/Paris") for i in range(7)]
    assert busiest_minute(schedules, NOW) == (datetime(2030, 1, 2, 1, 30, tzinfo=UTC), 7)
    assert busiest_minute([], NOW) == (None, 0)


def test_doctor_warns_when_the_herd_outgrows_the_live_replicas() -> None:
    capacity = herd_capacity(1)
    top = datetime(2030, 1, 1, 11, 0, tzinfo=UTC)
    assert herd_check((top, capacity), 1).status == Status.OK
    over = herd_check((top, capacity + 1), 1)
    assert over.status == Status.WARN and f"run {replicas_needed(capacity + 1)} replicas" in (
        over.detail)
    assert replicas_needed(capacity + 1) == 2
    assert herd_check((top, capacity + 1), 2).status == Status.OK
    assert "assumed" in herd_check((top, 10), None).detail
    assert herd_check((None, 0), 3).status == Status.OK
