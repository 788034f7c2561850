"""Holds that end and the scheduler's own holds, in the functional core and the ticker (no
server): what a hold with ``until`` fires, what its release and an automatic hold decide on
the stored Schedule, how the ticker plans it, and what the invariant checker expects of it.
The same behaviours against a real server: tests/test_hold_until.py, tests/test_auto_hold.py.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import msgspec
import pytest

from nats_scheduler.admin.invariant_inputs import StoredEvent
from nats_scheduler.admin.invariant_schedules import _active_spans, _inactive_since
from nats_scheduler.clock import ManualClock
from nats_scheduler.core import schedulecore, validation
from nats_scheduler.core.events import (
    SYSTEM,
    Hold,
    RunRecord,
    ScheduleApplied,
    ScheduleHeld,
    ScheduleRecord,
    ScheduleReleased,
)
from nats_scheduler.runtime.ticker import Ticker
from nats_scheduler.seam import RunPayload, RunState, Trigger

T0 = datetime(2030, 3, 30, 10, 0, 30, tzinfo=UTC)
UNTIL = datetime(2030, 3, 30, 10, 5, tzinfo=UTC)


def record(*, until: datetime | None = None, held: bool = True, enabled: bool = True,
           cron: str = "* * * * *") -> ScheduleRecord:
    hold = Hold(by="op", reason="migration", at=T0, until=until) if held else None
    return ScheduleRecord(deployment_id="d", name="d", cron=cron, timezone="UTC",
                          enabled=enabled, payload=RunPayload("t", "p"), hold=hold,
                          updated_at=T0)


def failed_run(n: int, created: datetime = T0 + timedelta(minutes=1)) -> RunRecord:
    return RunRecord(run_id=f"run-{n}", deployment_id="d", trigger=Trigger.SCHEDULE,
                     due_at=created, created_at=created, updated_at=created,
                     state=RunState.FAILED, payload=RunPayload("t", "p"), error=f"boom {n}")


# ----------------------------------------------------------------------------- firing rule


def test_a_hold_with_an_end_fires_from_its_end_on_and_not_before() -> None:
    held = record(until=UNTIL)
    assert not held.active and held.resumes_at == UNTIL
    assert not held.fires_at(UNTIL - timedelta(minutes=1))
    assert held.fires_at(UNTIL) and held.fires_at(UNTIL + timedelta(minutes=1))
    assert not record().fires_at(UNTIL + timedelta(days=1))  # no end: until released
    assert not record(until=UNTIL, enabled=False).fires_at(UNTIL + timedelta(minutes=1))
    assert record(held=False).fires_at(T0)


# ----------------------------------------------------------------------------- decisions


def test_the_release_at_the_end_is_the_systems_with_the_holds_reason() -> None:
    held = record(until=UNTIL)
    assert schedulecore.decide_hold_end(held, now=UNTIL - timedelta(seconds=1),
                                        actor="r") is None
    event = schedulecore.decide_hold_end(held, now=UNTIL, actor="r")
    assert isinstance(event, ScheduleReleased)
    assert (event.by, event.reason, event.until, event.caller) == (SYSTEM, "migration",
                                                                   UNTIL, None)
    assert event.schedule.hold is None and event.schedule.active
    # decided on the stored state: released already, held without an end, deleted
    assert schedulecore.decide_hold_end(record(held=False), now=UNTIL, actor="r") is None
    assert schedulecore.decide_hold_end(record(), now=UNTIL, actor="r") is None
    gone = msgspec.structs.replace(held, deleted=True)
    assert schedulecore.decide_hold_end(gone, now=UNTIL, actor="r") is None


def test_a_hold_records_its_end_and_a_held_schedule_keeps_its_own() -> None:
    event = schedulecore.decide_hold(record(held=False), now=T0, actor="r", by="alice",
                                     reason="migration", until=UNTIL)
    assert isinstance(event, ScheduleHeld) and event.until == UNTIL
    assert event.schedule.hold is not None and event.schedule.hold.until == UNTIL
    assert schedulecore.decide_hold(event.schedule, now=T0, actor="r", by="bob", reason="x",
                                    until=UNTIL + timedelta(hours=1)) is None


def test_the_end_of_a_hold_is_checked_and_read_as_operators_type_it() -> None:
    with pytest.raises(ValueError, match="time zone"):
        validation.check_hold_end(datetime(2030, 3, 30, 11), T0)
    with pytest.raises(ValueError, match="has passed"):
        validation.check_hold_end(T0, T0)
    validation.check_hold_end(T0 + timedelta(seconds=1), T0)
    validation.check_hold_end(T0 + validation.HOLD_HORIZON, T0)
    with pytest.raises(ValueError, match=r"until\) must be at most 365 days ahead"):
        validation.check_hold_end(T0 + validation.HOLD_HORIZON + timedelta(seconds=1), T0)
    with pytest.raises(ValueError, match="at most 365 days ahead"):
        validation.check_hold_end(datetime(9999, 12, 31, tzinfo=UTC), T0)
    assert validation.parse_hold_end("+90m", T0) == T0 + timedelta(minutes=90)
    assert validation.parse_hold_end("90m", T0) == T0 + timedelta(minutes=90)
    assert validation.parse_hold_end("+1d2h", T0) == T0 + timedelta(days=1, hours=2)
    assert validation.parse_hold_end("2030-03-30T14:00:00+02:00", T0) == datetime(
        2030, 3, 30, 12, tzinfo=UTC)
    assert validation.parse_hold_end("2030-03-30T12:00Z", T0) == datetime(2030, 3, 30, 12,
                                                                          tzinfo=UTC)
    for bad, words in (("2030-03-30T12:00", "has no time zone"),
                       ("tomorrow", "'tomorrow' cannot be read"),
                       ("+", "cannot be read"), ("-", "cannot be read"),
                       ("-5m", "^-5m is in the past: give a time ahead"),
                       ("-1d2h", "^-1d2h is in the past"), ("+0m", "in the past"),
                       ("2030-03-30T10:00Z", "in the past"),
                       ("0001-01-01T00:00:00+01:00", "in the past"),
                       ("+366d", "more than 365 days ahead"),
                       ("+999999999d", "more than 365 days ahead"),
                       ("+999999999h999999999m", "more than 365 days ahead"),
                       ("9999-12-31T23:59:59-05:00", "more than 365 days ahead")):
        with pytest.raises(ValueError, match=words):
            validation.parse_hold_end(bad, T0)


def test_an_automatic_hold_names_the_last_error_and_the_runs() -> None:
    active = record(held=False)
    failed = [failed_run(n) for n in range(1, 4)]
    event = schedulecore.decide_auto_hold(active, failed, now=T0, actor="r")
    assert isinstance(event, ScheduleHeld) and event.by == SYSTEM and event.caller is None
    assert "3 scheduled Runs in a row ended failed" in event.reason
    assert "boom 3" in event.reason and "run-1, run-2, run-3" in event.reason
    many = [failed_run(n) for n in range(1, 31)]
    long = schedulecore.decide_auto_hold(active, many, now=T0, actor="r")
    assert long is not None and "and 20 earlier" in long.reason
    assert len(long.reason) <= validation.MAX_NOTE_CHARS


def test_an_automatic_hold_is_not_written_over_a_change_made_since_the_failures() -> None:
    failed = [failed_run(n) for n in range(3)]
    assert schedulecore.decide_auto_hold(record(), failed, now=T0, actor="r") is None  # held
    assert schedulecore.decide_auto_hold(record(held=False, enabled=False), failed, now=T0,
                                         actor="r") is None
    released_after = msgspec.structs.replace(record(held=False),
                                             updated_at=T0 + timedelta(minutes=2))
    assert schedulecore.decide_auto_hold(released_after, failed, now=T0, actor="r") is None


# ----------------------------------------------------------------------------- the ticker


class Ticking:
    def __init__(self) -> None:
        self.clock = ManualClock(T0)
        self.fired: list[datetime] = []
        self.ticker = Ticker(self.clock, self._fire)

    async def _fire(self, _dep: str, due: datetime) -> None:
        self.fired.append(due)

    async def minutes(self, count: int) -> None:
        for _ in range(count):
            self.clock.advance(60)
            for _ in range(50):
                await asyncio.sleep(0)
            await self.ticker.wait_fires(timeout=5)


@pytest.mark.anyio
async def test_the_ticker_fires_from_the_hold_end_and_keeps_its_plan_at_the_release() -> None:
    t = Ticking()
    task = asyncio.create_task(t.ticker.run())
    try:
        held = record(until=UNTIL)
        t.ticker.update(held)
        await t.minutes(6)  # 10:01 .. 10:06
        assert t.fired == [UNTIL, UNTIL + timedelta(minutes=1)]  # 10:05 itself fires
        released = schedulecore.decide_hold_end(held, now=t.clock.now(), actor="r")
        assert released is not None
        t.ticker.update(released.schedule)  # the release, stored after the end
        await t.minutes(1)
        assert t.fired == [UNTIL + timedelta(minutes=n) for n in range(3)]  # none twice
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


@pytest.mark.anyio
async def test_a_release_before_the_end_fires_at_once_and_a_new_hold_stops_it() -> None:
    t = Ticking()
    task = asyncio.create_task(t.ticker.run())
    try:
        t.ticker.update(record(until=UNTIL))
        await t.minutes(1)
        assert t.fired == []
        t.ticker.update(record(held=False))  # an operator released it early (10:01:30)
        await t.minutes(1)
        assert t.fired == [datetime(2030, 3, 30, 10, 2, tzinfo=UTC)]
        t.ticker.update(record())  # held again, no end
        await t.minutes(5)
        assert len(t.fired) == 1
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


# ----------------------------------------------------------------------------- invariants


def _stored(seq: int, at: datetime) -> StoredEvent:
    return StoredEvent(seq=seq, subject="s", stored_at=at, event=None)


def test_the_checker_expects_due_times_from_the_end_and_no_pause_after_it() -> None:
    applied = ScheduleApplied(at=T0, actor="r", schedule=record(held=False))
    held = ScheduleHeld(at=T0, actor="r", schedule=record(until=UNTIL), by="op", reason="m",
                        until=UNTIL)
    history = [(_stored(1, T0), applied), (_stored(2, T0 + timedelta(seconds=10)), held)]
    spans = list(_active_spans(history, UNTIL + timedelta(minutes=10)))
    assert [(start, end) for start, end, _ in spans] == [
        (T0, T0 + timedelta(seconds=10)), (UNTIL, UNTIL + timedelta(minutes=10))]
    assert _inactive_since(history, UNTIL - timedelta(seconds=1)) == T0 + timedelta(seconds=10)
    assert _inactive_since(history, UNTIL + timedelta(milliseconds=1)) is None
