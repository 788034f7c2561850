"""The busiest minute of the next day against what the live replicas start (core/herd.py),
and ``nats-scheduler doctor``'s warning about it."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

import msgspec
import pytest

from nats_scheduler.admin.doctor import Status, herd_check
from nats_scheduler.core import calendar
from nats_scheduler.core.events import Hold, ScheduleRecord
from nats_scheduler.core.herd import (
    MinuteLoad,
    busiest_minute,
    calendars,
    herd_capacity,
    replicas_needed,
)
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


# ----------------------------------------------------------------------------- the load ahead


FALL_BACK = datetime(2026, 10, 31, 12, 0, 30, tzinfo=UTC)
"""Saturday before New York's fall-back (2026-11-01 02:00 EDT -> 01:00 EST)."""


def _brute_force(records: list[ScheduleRecord], now: datetime, hours: int) -> dict[datetime, int]:
    """Each Schedule's own due times in the window, added up (no per-calendar grouping)."""
    counts: Counter[datetime] = Counter()
    end = now + timedelta(hours=hours)
    for r in records:
        if not r.active and r.resumes_at is None:
            continue
        dues = calendar.due_times(r.cron, r.timezone, now, end + timedelta(seconds=1))
        counts.update(d for d in dues if d <= end and (r.resumes_at is None
                                                       or d >= r.resumes_at))
    return dict(counts)


def test_the_load_per_minute_is_the_calendars_across_a_fold_and_a_hold_with_an_end() -> None:
    held_until = datetime(2026, 10, 31, 15, 0, tzinfo=UTC)
    records = ([record(f"i{i}", "*/30 * * * *", timezone="America/New_York") for i in range(3)]
               + [record("w", "30 1 * * *", timezone="America/New_York"),
                  record("off", "* * * * *", enabled=False), record("held", "0 * * * *", held=True),
                  msgspec.structs.replace(record("until", "0 * * * *"), hold=Hold(
                      by="op", reason="r", at=NOW, until=held_until))])
    counts = MinuteLoad().count(calendars(records), FALL_BACK, 24)
    assert dict(counts) == _brute_force(records, FALL_BACK, 24)
    # the interval-like job fires both passes of the repeated hour, the wall-clock one once
    first, second = (datetime(2026, 11, 1, 5, 30, tzinfo=UTC),
                     datetime(2026, 11, 1, 6, 30, tzinfo=UTC))
    assert counts[first] == 4 and counts[second] == 3
    assert counts[held_until] == 1 + 3 and counts[held_until - timedelta(hours=1)] == 3


def test_due_times_are_expanded_once_an_hour_per_calendar(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    expanded: list[str] = []
    real = calendar.due_times

    def counting(cron: str, *args: object) -> list[datetime]:
        expanded.append(cron)
        return real(cron, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(calendar, "due_times", counting)
    load = MinuteLoad()
    many = calendars([record(f"h{i}", "0 * * * *") for i in range(1000)]
                     + [record(f"m{i}", "*/5 * * * *") for i in range(1000)])
    assert len(many) == 2  # 2,000 Schedules, two calendars
    load.count(many, NOW, 24)
    load.count(many, NOW + timedelta(minutes=30), 1)
    assert sorted(expanded) == ["*/5 * * * *", "0 * * * *"]
    load.count(many, NOW + timedelta(hours=1), 24)  # the hour turned: expanded afresh
    assert len(expanded) == 4
    with pytest.raises(ValueError, match="1 to 48 hours"):
        load.count(many, NOW, 49)
