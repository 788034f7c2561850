"""The load ahead against a real server: the console's Load view (``4``, driven by Pilot) and
``nats-scheduler schedules --load --json`` count, minute by minute, what the calendar says
for a known set of Schedules, and the herd minute is marked and named.

The admin service answers at a frozen instant, Saturday 2026-03-28 12:00:30 UTC, the eve of
Europe's spring-forward, so the next 24 hours hold Berlin's gap: the 02:30 job fires at
03:00 CEST (01:00 UTC), once, and the hourly ``:15`` job has no due time in the gap. The
expected counts are the calendar's due times of each Schedule alone, added up: nothing of
the per-calendar counting under test is reused. A low fire rate (0.2 Runs a second: 3 within
15 s) makes the 13:00 UTC minute, with 7 due, a herd.
"""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import anyio
import pytest

from admin_tui.app import AstraboxConsole
from admin_tui.launch import ConnectionLink
from admin_tui.screens.load import LoadScreen
from admin_tui.screens.schedules import SchedulesScreen
from admin_tui.widgets.minute_bars import MinuteBars
from nats_scheduler.admin.health import HealthPolicy
from nats_scheduler.admin.service import start_admin_service
from nats_scheduler.cli.main import main
from nats_scheduler.clock import ManualClock
from nats_scheduler.core import calendar
from nats_scheduler.provider import NatsSchedulerProvider
from nats_scheduler.seam import RunPayload, Schedule
from tests.console_helpers import until
from tests.harness.servers import unique_prefix
from tests.providers import running, settings

pytestmark = pytest.mark.anyio

NOW = datetime(2026, 3, 28, 12, 0, 30, tzinfo=UTC)
HELD_UNTIL = datetime(2026, 3, 28, 18, 0, tzinfo=UTC)
HERD = datetime(2026, 3, 28, 13, 0, tzinfo=UTC)


def schedule(dep: str, cron: str, tz: str = "UTC", enabled: bool = True) -> Schedule:
    return Schedule(dep, dep, cron, tz, enabled, RunPayload("agent/report", "go"), 1)


FIRING = [
    schedule("berlin-night", "30 2 * * *", "Europe/Berlin"),     # in the gap: 01:00 UTC
    schedule("berlin-hourly", "15 * * * *", "Europe/Berlin"),    # none in the gap
    schedule("ny-morning", "0 9 * * *", "America/New_York"),     # 13:00 UTC (EDT)
    schedule("kolkata-quarter", "*/15 * * * *", "Asia/Kolkata"),
    *[schedule(f"tenant-{i}", "0 13 * * *") for i in range(5)],  # the herd
]
QUIET = [schedule("held-forever", "0 14 * * *"), schedule("switched-off", "* * * * *",
                                                               enabled=False)]
HELD_UNTIL_DEP = schedule("held-until-six", "0 * * * *")


def expected_minutes() -> dict[datetime, int]:
    """Each firing Schedule's own due times in the 24 h after NOW, added up; the one held
    until 18:00 from then on."""
    counts: Counter[datetime] = Counter()
    end = NOW + timedelta(hours=24)
    for s in FIRING:
        counts.update(calendar.due_times(s.cron, s.timezone, NOW, end + timedelta(seconds=1)))
    counts.update(d for d in calendar.due_times(HELD_UNTIL_DEP.cron, "UTC", NOW,
                                                end + timedelta(seconds=1)) if d >= HELD_UNTIL)
    return {minute: n for minute, n in counts.items() if minute <= end}


@contextlib.asynccontextmanager
async def load_stack(url: str) -> AsyncIterator[tuple[NatsSchedulerProvider, str]]:
    """A provider at NOW (a frozen clock: nothing fires, the hold's end never comes) with
    the Schedules, its admin service answering at NOW with a slow rate."""
    prefix = unique_prefix()
    clock = ManualClock(NOW)
    async with running(url, prefix, clock=clock) as provider:
        service = await start_admin_service(
            provider, clock=clock, policy=HealthPolicy(lease_seconds=2.0, fire_rate=0.2))
        try:
            for s in [*FIRING, *QUIET, HELD_UNTIL_DEP]:
                await provider.apply(s)
            await provider.hold("held-forever", by="ops", reason="paused for good")
            await provider.hold(HELD_UNTIL_DEP.deployment_id, by="ops", reason="until six",
                                until=HELD_UNTIL)
            yield provider, prefix
        finally:
            await service.stop()


async def test_the_load_view_counts_what_the_calendar_says_and_marks_the_herd(
        nats_url: str) -> None:
    expected = expected_minutes()
    assert expected[datetime(2026, 3, 29, 1, 0, tzinfo=UTC)] >= 1  # the gap's 02:30 job
    assert expected[HERD] == 7
    async with load_stack(nats_url) as (_provider, prefix):
        link = ConnectionLink(settings(nats_url, prefix))
        app = AstraboxConsole(connector=link.connect, user="alice", target=nats_url,
                              debounce=0.05, health_debounce=0.1, retry_seconds=0.5)
        link.app = app
        try:
            async with app.run_test(size=(120, 36)) as pilot:
                await until(pilot, lambda: isinstance(app.screen, SchedulesScreen))
                await pilot.press("4")
                await until(pilot, lambda: isinstance(app.screen, LoadScreen)
                            and app.screen.load is not None)
                screen = app.screen
                assert isinstance(screen, LoadScreen) and screen.load is not None
                shown = {m.minute: m.due for m in screen.load.minutes}
                assert shown == expected
                assert [m.minute for m in screen.load.herds()] == [HERD]
                herds = str(screen.query_one("#load-herds").render())
                assert "13:00 UTC: 7 due: 2.3x what 1 live replica starts within 15 s" in herds
                bars = str(screen.query_one(MinuteBars).render())
                assert "▲" in bars.splitlines()[-1]  # 13:00 is the hour's last minute
                assert "Next hour" in str(screen.query_one("#load-summary").render())
        finally:
            await link.close()


async def test_schedules_load_json_prints_the_same_minutes(
        nats_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    async with load_stack(nats_url) as (_provider, prefix):
        capsys.readouterr()
        args = ["schedules", "--load", "--json", "--url", nats_url, "--prefix", prefix]
        code = await anyio.to_thread.run_sync(main, args)
        out, err = capsys.readouterr()
        assert code == 0, err
        printed = json.loads(out)
        assert list(printed) == ["minutes"]
        got = {datetime.fromisoformat(m["minute"]): m["due"] for m in printed["minutes"]}
        assert got == expected_minutes()
        code = await anyio.to_thread.run_sync(main, [*args[:2], "--hours", "2", *args[3:]])
        out, err = capsys.readouterr()
        assert code == 0, err
        assert "herd minutes: 1" in out and "13:00 UTC: 7 due" in out
        assert "2026-03-28 13:00  7" in out
        code = await anyio.to_thread.run_sync(main, [*args, "--hours", "49"])
        _, err = capsys.readouterr()
        assert code == 2 and "1 to 48 hours" in err
