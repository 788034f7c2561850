"""The ticker on an injected clock: every due time lived through, no backfill, stalls."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nats_scheduler.clock import ManualClock
from nats_scheduler.core import calendar
from nats_scheduler.core.events import ScheduleRecord
from nats_scheduler.runtime.ticker import COMPACT_SLACK, Ticker
from nats_scheduler.seam import RunPayload

pytestmark = pytest.mark.anyio
T0 = datetime(2030, 3, 30, 22, 0, 30, tzinfo=UTC)


def record(dep: str, cron: str, tz: str = "UTC", *, enabled: bool = True) -> ScheduleRecord:
    return ScheduleRecord(deployment_id=dep, name=dep, cron=cron, timezone=tz, enabled=enabled,
                          payload=RunPayload("t", "p"), updated_at=T0)


class Harness:
    def __init__(self, **ticker: object) -> None:
        self.clock = ManualClock(T0)
        self.fired: list[tuple[str, datetime]] = []
        self.ticker = Ticker(self.clock, self.fire, **ticker)  # type: ignore[arg-type]
        self.task: asyncio.Task[None] | None = None

    async def fire(self, dep: str, due: datetime) -> None:
        self.fired.append((dep, due))

    async def __aenter__(self) -> Harness:
        self.task = asyncio.create_task(self.ticker.run())
        await self.settle()
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.task is not None
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)

    async def settle(self) -> None:
        """Let the ticker loop and its fire tasks run until it parks on the clock again."""
        for _ in range(50):
            await asyncio.sleep(0)
        await self.ticker.wait_fires(timeout=5)
        for _ in range(20):
            await asyncio.sleep(0)

    async def advance_by_minutes(self, minutes: int) -> None:
        for _ in range(minutes):
            self.clock.advance(60)
            await self.settle()


async def test_fires_every_due_time_it_lives_through() -> None:
    async with Harness() as h:
        h.ticker.update(record("d", "*/5 * * * *"))
        await h.advance_by_minutes(30)
        expected = calendar.due_times("*/5 * * * *", "UTC", T0, h.clock.now())
        assert [d for _, d in h.fired] == expected
        assert len(expected) == 6


async def test_a_stall_fires_every_due_time_passed_since_the_last_tick() -> None:
    async with Harness() as h:
        h.ticker.update(record("d", "* * * * *"))
        await h.settle()
        h.clock.advance(timedelta(minutes=10))  # one jump: the loop slept through 10 minutes
        await h.settle()
        assert [d for _, d in h.fired] == calendar.due_times("* * * * *", "UTC", T0,
                                                            h.clock.now() + timedelta(seconds=1))
        assert len(h.fired) == 10


async def test_no_backfill_for_times_before_start_or_while_disabled() -> None:
    async with Harness() as h:
        h.clock.advance(timedelta(minutes=5))  # nothing planned yet: these are not fired
        await h.settle()
        h.ticker.update(record("d", "* * * * *"))
        await h.advance_by_minutes(2)
        assert len(h.fired) == 2
        h.ticker.update(record("d", "* * * * *", enabled=False))
        await h.advance_by_minutes(5)
        assert len(h.fired) == 2
        h.ticker.update(record("d", "* * * * *"))
        await h.advance_by_minutes(1)
        fired = [d for _, d in h.fired]
        assert len(fired) == 3
        assert fired[2] - fired[1] == timedelta(minutes=6)  # the disabled minutes were skipped


async def test_many_schedules_each_fire_their_own_times() -> None:
    async with Harness() as h:
        for i in range(200):
            h.ticker.update(record(f"d{i}", f"{i % 60} * * * *"))
        assert h.ticker.planned == 200
        await h.advance_by_minutes(60)
        assert len(h.fired) == 200
        assert len(set(h.fired)) == 200


async def test_calendar_change_replans_from_now_and_dst_gap_is_honoured() -> None:
    async with Harness() as h:
        # Europe/Berlin springs forward at 01:00 UTC on 2030-03-31; 02:30 local does not
        # exist, so the wall-clock job fires once at 03:00 local (01:00 UTC).
        h.ticker.update(record("d", "30 2 * * *", "Europe/Berlin"))
        assert h.ticker.next_due("d") == datetime(2030, 3, 31, 1, 0, tzinfo=UTC)
        h.ticker.update(record("d", "0 4 * * *", "Europe/Berlin"))
        assert h.ticker.next_due("d") == datetime(2030, 3, 31, 2, 0, tzinfo=UTC)
        h.clock.set(datetime(2030, 3, 31, 2, 0, 1, tzinfo=UTC))
        await h.settle()
        assert h.fired == [("d", datetime(2030, 3, 31, 2, 0, tzinfo=UTC))]


# ------------------------------------------------------------------ owners


async def test_a_due_time_owned_elsewhere_is_left_to_its_owner_when_its_run_exists() -> None:
    exists: set[tuple[str, datetime]] = set()
    async with Harness(owns=lambda dep, _due: dep == "mine",
                       exists=lambda dep, due: (dep, due) in exists, grace=3.0) as h:
        h.ticker.update(record("mine", "* * * * *"))
        h.ticker.update(record("theirs", "* * * * *"))
        due = T0.replace(second=0) + timedelta(minutes=1)
        h.clock.advance(31)  # one second past the due time
        await h.settle()
        assert h.fired == [("mine", due)], "only the owned due time fires at once"
        exists.add(("theirs", due))  # the owner stored its Run
        h.clock.advance(2.5)
        await h.settle()
        assert h.fired == [("mine", due)]
        assert h.ticker.left_to_owner == 1


async def test_a_due_time_whose_owner_left_is_fired_at_the_next_look() -> None:
    """The owner died before firing: once it left the live replicas the due time is
    ours (``owns`` says so) and fires at the next look, every grace."""
    members = {"owner-alive": True}
    async with Harness(owns=lambda _dep, _due: not members["owner-alive"],
                       exists=lambda _dep, _due: False, grace=3.0, patience=30.0) as h:
        h.ticker.update(record("theirs", "* * * * *"))
        due = T0.replace(second=0) + timedelta(minutes=1)
        h.clock.advance(31)  # one second past the due time
        await h.settle()
        assert h.fired == []
        h.clock.advance(2.1)  # the first look: the owner is still live
        await h.settle()
        assert h.fired == [], "a live owner keeps its due time"
        assert h.ticker.left_waiting == 1
        members["owner-alive"] = False
        h.clock.advance(2.9)
        await h.settle()
        assert h.fired == [], "not before the next look"
        h.clock.advance(0.2)
        await h.settle()
        assert h.fired == [("theirs", due)]
        assert h.ticker.left_to_owner == 0 and h.ticker.left_waiting == 0


async def test_a_live_owner_that_fires_nothing_keeps_its_due_time_for_the_patience() -> None:
    """A busy owner is not doubled after a few seconds; one live but unable to write loses
    its due time to the others once the patience has passed since the due time."""
    async with Harness(owns=lambda _dep, _due: False, exists=lambda _dep, _due: False,
                       grace=3.0, patience=30.0) as h:
        h.ticker.update(record("theirs", "* * * * *"))
        due = T0.replace(second=0) + timedelta(minutes=1)
        h.clock.advance(31)  # one second past the due time
        for _ in range(9):  # looks at 3, 6, ... 27 s after the due time
            h.clock.advance(3)
            await h.settle()
        assert h.fired == [], "a live owner keeps its due time inside the patience"
        h.clock.advance(3)  # 31 s after the due time
        await h.settle()
        assert h.fired == [("theirs", due)]


async def test_a_due_time_left_to_an_owner_is_dropped_when_the_schedule_is_disabled() -> None:
    async with Harness(owns=lambda _dep, _due: False, exists=lambda _dep, _due: False,
                       grace=3.0) as h:
        h.ticker.update(record("theirs", "* * * * *"))
        h.clock.advance(31)  # one second past the due time
        await h.settle()
        h.ticker.update(record("theirs", "* * * * *", enabled=False))
        h.clock.advance(5)
        await h.settle()
        assert h.fired == []


async def test_changed_calendars_leave_nothing_behind() -> None:
    """A Schedule planned again leaves the bucket of its old due time: however often the
    calendars change, one filed entry per Schedule, and the plans fire as before."""
    async with Harness() as h:
        deps = [f"d{i}" for i in range(300)]
        for minute in range(20):  # every Schedule planned again twenty times
            for dep in deps:
                h.ticker.update(record(dep, f"{minute} 5 * * *"))
        assert h.ticker.planned == len(deps)
        assert h.ticker.filed == len(deps)
        assert {h.ticker.next_due(dep) for dep in deps} == {
            datetime(2030, 3, 31, 5, 19, tzinfo=UTC)}
        h.clock.set(datetime(2030, 3, 31, 5, 30, tzinfo=UTC))
        await h.settle()
        assert sorted(h.fired) == [(dep, datetime(2030, 3, 31, 5, 19, tzinfo=UTC))
                                   for dep in sorted(deps)]
        # One Schedule moved to 3,000 instants in turn (months of changes): the emptied
        # buckets go at once and the heap of instants is rebuilt before it holds more than
        # twice its buckets (plus a slack); the last plan is the one that fires.
        for change in range(3_000):
            h.ticker.update(record("moved", f"{change % 60} {change // 60 % 24} "
                                            f"{change // 1440 + 1} * *"))
            assert len(h.ticker._instants) <= 2 * len(h.ticker._buckets) + COMPACT_SLACK
        assert h.ticker.filed == len(deps) + 1
        assert len(h.ticker._buckets) == 2  # the 300 due tomorrow at 05:19, and "moved"
        assert h.ticker.next_due("moved") == datetime(2030, 4, 3, 1, 59, tzinfo=UTC)
        h.clock.set(datetime(2030, 4, 3, 2, 0, tzinfo=UTC))
        await h.settle()
        assert [f for f in h.fired if f[0] == "moved"] == [
            ("moved", datetime(2030, 4, 3, 1, 59, tzinfo=UTC))]


_CALENDARS = [("* * * * *", "UTC"), ("30 2 * * *", "Europe/Berlin"),
              ("0,30 1-3 * * *", "America/New_York"), ("15 0 29 2 *", "Australia/Lord_Howe"),
              ("0 0 31 2 *", "UTC")]  # the last: never due


@given(st.lists(st.tuples(st.sampled_from(_CALENDARS),
                          st.integers(0, 3 * 366 * 24 * 60)), max_size=60))
@settings(max_examples=120, deadline=None)
def test_the_remembered_first_due_time_is_the_calendars_own(
        queries: list[tuple[tuple[str, str], int]]) -> None:
    """The ticker remembers each calendar's last first due time (one computation for a
    million Schedules planned as they arrive): for any instants, in any order, across
    daylight-saving days and leap years, it answers what the calendar computes."""
    ticker = Ticker(ManualClock(datetime(2030, 1, 1, tzinfo=UTC)), _never)
    start = datetime(2030, 1, 1, tzinfo=UTC)
    for (cron, tz), minutes in queries:
        after = start + timedelta(minutes=minutes, seconds=minutes % 7 * 8.5)
        assert ticker._next_due(cron, tz, after) == calendar.next_due(cron, tz, after)
        nearby = after + timedelta(seconds=37)  # an instant just after, as arrivals are
        assert ticker._next_due(cron, tz, nearby) == calendar.next_due(cron, tz, nearby)


async def _never(deployment_id: str, due: datetime) -> None:
    raise AssertionError("nothing fires here")


_PLANS = [("* * * * *", "UTC"), ("*/7 * * * *", "UTC"), ("30 22 * * *", "UTC"),
          ("0 */2 * * *", "UTC"), ("30 2 * * *", "Europe/Paris"), ("15 3 * * *", "Europe/Paris")]
_Op = tuple[str, int, int, int]


@given(st.lists(st.tuples(st.sampled_from(["plan", "plan", "disable", "advance", "advance"]),
                          st.integers(0, 5), st.integers(0, len(_PLANS) - 1),
                          st.integers(0, 300)), max_size=30))
@settings(max_examples=150, deadline=None)
def test_it_fires_exactly_the_due_times_of_each_plan_it_lived_through(ops: list[_Op]) -> None:
    """Whatever the sequence of plans, calendar changes, disables and clock moves (stalls of
    hours included, across a daylight-saving change), the ticker fires each Schedule's due
    times after the instant it was planned and up to the instant it was planned again or
    stopped, each once: what each calendar computes, nothing else."""
    asyncio.run(_fires_as_planned(ops))


async def _fires_as_planned(ops: list[_Op]) -> None:
    expected: list[tuple[str, datetime]] = []
    plans: dict[str, tuple[str, str, datetime]] = {}  # dep -> calendar, planned after

    def lived_through(until: datetime) -> None:
        for dep, (cron, tz, after) in plans.items():
            due = calendar.next_due(cron, tz, after)
            while due is not None and due <= until:
                expected.append((dep, due))
                due = calendar.next_due(cron, tz, due)
            plans[dep] = (cron, tz, until)

    async with Harness() as h:
        for kind, index, plan, amount in ops:
            dep = f"d{index}"
            if kind == "advance":
                h.clock.advance(amount * 61.5)
                await h.settle()
                lived_through(h.clock.now())
            elif kind == "disable":
                h.ticker.update(record(dep, "* * * * *", enabled=False))
                plans.pop(dep, None)
            else:
                cron, tz = _PLANS[plan]
                h.ticker.update(record(dep, cron, tz))
                known = plans.get(dep)
                if known is None or known[:2] != (cron, tz):
                    plans[dep] = (cron, tz, h.clock.now())
            await h.settle()
        assert sorted(h.fired) == sorted(expected)
        assert h.ticker.filed == sum(
            calendar.next_due(cron, tz, after) is not None for cron, tz, after in plans.values())
