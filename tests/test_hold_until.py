"""Holds that end by themselves, against a real server, on the real clock (runtime/hold_ends.py).

``nats-scheduler hold DEP --reason R --until WHEN``: the hold lifts itself at that instant by
the store's clock, recorded as a release by ``system`` with the hold's reason, within a
second of the instant, once however many replicas run; the due time at the instant fires.
The end must be a minute boundary for a due time to fall on it, so the test waits for the
next one (3 to 63 s). Refusals (no time zone, the past) write nothing.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import anyio
import pytest

from nats_scheduler.admin.service import start_admin_service
from nats_scheduler.cli.main import main
from nats_scheduler.clock import ManualClock
from nats_scheduler.core import events as ev
from nats_scheduler.core.events import decode_schedule_event
from nats_scheduler.names import scheduled_run_id
from nats_scheduler.provider import NatsSchedulerProvider
from nats_scheduler.seam import RunPayload, RunState, Schedule
from nats_scheduler.testing.handler import RecordingRunHandler
from tests.harness.servers import unique_prefix
from tests.providers import assert_clean, eventually, running

pytestmark = pytest.mark.anyio

DEP = "window"


async def cli(url: str, prefix: str, capsys: pytest.CaptureFixture[str], *argv: str
              ) -> tuple[int, str, str]:
    """``nats-scheduler ARGV`` in a worker thread, as from a terminal."""
    capsys.readouterr()
    try:
        code = await anyio.to_thread.run_sync(
            main, [*argv, "--url", url, "--prefix", prefix, "--timeout", "3"])
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


async def changes(provider: NatsSchedulerProvider) -> list[tuple[datetime, ev.ScheduleEventType]]:
    """The Schedule's stored events with the server's time of storing each, oldest first."""
    store = provider.store
    subject = store.names.schedule_subject(DEP)
    found, seq = [], 1
    while (msg := await store.next(subject, seq)) is not None:
        assert msg.stored_at is not None
        found.append((msg.stored_at, decode_schedule_event(msg.data)))
        seq = msg.seq + 1
    return found


def next_boundary(now: datetime) -> datetime:
    """The first whole minute at least 3 s after ``now``."""
    return (now + timedelta(seconds=63)).replace(second=0, microsecond=0)


@pytest.mark.wall_clock(boundary=True)
async def test_the_hold_lifts_itself_at_its_end_and_the_due_time_there_fires(
        nats_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    prefix = unique_prefix()
    handler = RecordingRunHandler()
    async with running(nats_url, prefix, handler) as first, \
            running(nats_url, prefix, handler) as second:
        service = await start_admin_service(first)
        try:
            assert first.runtime is not None
            until = next_boundary(first.runtime.clock.now())
            # due once a day, at the hold's end: the first due time after the hold is that one
            daily = f"{until.minute} {until.hour} * * *"
            await first.apply(Schedule(DEP, "Migration window", daily, "UTC", True,
                                       RunPayload("agent/etl", "load"), 1))
            await eventually(lambda: second.schedules.get(DEP) is not None)
            code, out, err = await cli(nats_url, prefix, capsys, "hold", DEP, "--reason",
                                       "schema migration", "--until",
                                       until.strftime("%Y-%m-%dT%H:%M:%SZ"))
            assert code == 0, err
            assert f"until {until:%Y-%m-%d %H:%M:%S}Z" in out
            await eventually(lambda: (r := second.schedules.get(DEP)) is not None
                             and r.hold is not None)
            record = second.schedules.get(DEP)
            assert record is not None and record.hold is not None
            assert record.hold.until == until and not record.active

            async def released() -> datetime | None:
                found = [(at, e) for at, e in await changes(first)
                         if isinstance(e, ev.ScheduleReleased)]
                return found[0][0] if found else None

            stored_at = await eventually(released, timeout=80)
            assert timedelta(0) <= stored_at - until <= timedelta(seconds=1)
            run_id = scheduled_run_id(DEP, until)

            async def dispatched() -> bool:
                try:
                    return (await first.get_run(run_id)).state == RunState.DISPATCHED
                except LookupError:
                    return False

            await eventually(dispatched, timeout=20)
            stored = [e for _, e in await changes(first)]
            assert [type(e) for e in stored] == [ev.ScheduleApplied, ev.ScheduleHeld,
                                                 ev.ScheduleReleased]  # one release
            release = stored[-1]
            assert isinstance(release, ev.ScheduleReleased)
            assert (release.by, release.reason, release.until, release.caller) == (
                ev.SYSTEM, "schema migration", until, None)
            code, out, _ = await cli(nats_url, prefix, capsys, "events", "--deployment", DEP,
                                     "--type", "schedule")
            assert "schedule.released" in out and "by system until" in out
            ended = [p.runtime.metrics.snapshot().holds_ended  # type: ignore[union-attr]
                     for p in (first, second)]
            assert sum(ended) == 1
        finally:
            await service.stop()


async def test_an_end_without_a_time_zone_or_in_the_past_is_refused(
        nats_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    prefix = unique_prefix()
    async with running(nats_url, prefix, RecordingRunHandler()) as provider:
        service = await start_admin_service(provider)
        try:
            await provider.apply(Schedule(DEP, "Window", "0 3 * * *", "UTC", True,
                                          RunPayload("agent/etl", "load"), 1))
            for when, words in (("2031-01-01T03:00:00", "--until 2031-01-01T03:00:00 has no "
                                                        "time zone"),
                                ("2020-01-01T03:00:00Z", "--until 2020-01-01T03:00:00Z is in "
                                                         "the past"),
                                ("next tuesday", "--until 'next tuesday' cannot be read"),
                                ("-5m", "--until -5m is in the past: give a time ahead"),
                                ("+400d", "--until +400d is more than 365 days ahead")):
                code, _, err = await cli(nats_url, prefix, capsys, "hold", DEP, "--reason", "x",
                                         "--until", when)
                assert code == 2 and words in err, err
                assert_clean(err)
            assert [type(e) for _, e in await changes(provider)] == [ev.ScheduleApplied]
            code, out, err = await cli(nats_url, prefix, capsys, "hold", DEP, "--reason",
                                       "freeze", "--until", "+2h")
            assert code == 0, err
            hold = provider.schedules.get(DEP).hold  # type: ignore[union-attr]
            assert hold is not None and hold.until is not None
            assert "until " in out
        finally:
            await service.stop()


async def test_the_firing_path_treats_the_hold_as_lifted_from_its_end_before_any_release(
        nats_url: str) -> None:
    """On a frozen clock no release is ever written (its end never comes), yet the due time
    at the end fires, and the one before it does not: the firing path judges the hold by its
    end, on the stored Schedule (``fire_due`` is the ticker's path)."""
    start = datetime(2031, 1, 1, 2, 0, tzinfo=UTC)
    end = start + timedelta(minutes=5)
    async with running(nats_url, unique_prefix(), clock=ManualClock(start)) as provider:
        await provider.apply(Schedule(DEP, "Window", "* * * * *", "UTC", True,
                                      RunPayload("agent/etl", "load"), 1))
        await provider.hold(DEP, by="ops", reason="migration", until=end)
        assert await provider.fire_due(DEP, end - timedelta(minutes=1)) is None
        run = await provider.fire_due(DEP, end)
        assert run is not None and run.due_at == end
        stored = await provider.runtime.schedules.read(DEP)  # type: ignore[union-attr]
        assert stored is not None and stored.hold is not None  # still held, as stored
        assert [type(e) for _, e in await changes(provider)] == [ev.ScheduleApplied,
                                                                ev.ScheduleHeld]
