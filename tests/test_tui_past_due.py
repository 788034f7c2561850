"""The console's past due times against the real thing: a provider with its admin service on
a real nats-server, the console connected the way the command line connects it.

The provider's clock (and the console's) is held a week ahead of the store's, so the week
of due times the pane shows has passed without anybody waiting for it: two are fired by
hand (``fire_due``), the rest have no Run. Every change is stored now, by the server's
clock, before all of them: so after a hold from the console every due time without a Run is
``held``, which the pane shows as soon as the hold's event arrives. The pages move with
``>`` and ``<`` like the Runs' with ``]`` and ``[``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from admin_tui.app import AstraboxConsole
from admin_tui.launch import ConnectionLink
from admin_tui.screens.schedule_detail import ScheduleDetailScreen
from admin_tui.screens.schedules import SchedulesScreen
from admin_tui.widgets.past_due import PastDueTable
from admin_tui.widgets.schedule_table import ScheduleTable
from nats_scheduler.admin.service import start_admin_service
from nats_scheduler.clock import ManualClock
from nats_scheduler.core import calendar
from nats_scheduler.seam import RunPayload, Schedule
from nats_scheduler.testing.handler import RecordingRunHandler
from tests.console_helpers import cell, confirm, until
from tests.harness.servers import unique_prefix
from tests.providers import running, settings

pytestmark = pytest.mark.anyio

NOW = datetime(2030, 1, 8, 12, 0, tzinfo=UTC)
CRON = "0 */6 * * *"
FIRED = (datetime(2030, 1, 8, 6, 0, tzinfo=UTC), datetime(2030, 1, 7, 18, 0, tzinfo=UTC))


def key(due: datetime) -> str:
    return due.isoformat()


async def test_past_due_times_pane_pages_and_follows_a_hold(nats_url: str) -> None:
    clock = ManualClock(NOW)
    prefix = unique_prefix()
    handler = RecordingRunHandler()
    async with running(nats_url, prefix, handler, clock=clock) as provider:
        service = await start_admin_service(provider, clock=clock)
        link = ConnectionLink(settings(nats_url, prefix))
        try:
            await provider.apply(Schedule("report", "report", CRON, "UTC", True,
                                          RunPayload("agent/test", "hello")))
            for due in FIRED:
                assert await provider.fire_due("report", due) is not None
            app = AstraboxConsole(connector=link.connect, user="alice", target=nats_url,
                                  clock=clock, debounce=0.05, health_debounce=0.1,
                                  retry_seconds=0.5)
            link.app = app
            async with app.run_test(size=(120, 40)) as pilot:
                await until(pilot, lambda: isinstance(app.screen, SchedulesScreen)
                            and len(app.screen.schedules) == 1)
                table = app.screen.query_one(ScheduleTable)
                table.focus()
                assert table.select_key("report")
                await pilot.press("enter")
                await until(pilot, lambda: isinstance(app.screen, ScheduleDetailScreen)
                            and app.screen.due_page is not None)
                detail = app.screen
                assert isinstance(detail, ScheduleDetailScreen)
                pane = detail.query_one(PastDueTable)
                week = calendar.due_times(CRON, "UTC", NOW - timedelta(days=7, seconds=1),
                                          NOW + timedelta(seconds=1))[::-1]
                assert len(week) == 29
                # page 1: the newest 12, newest first; the fired two are their Runs
                await until(pilot, lambda: pane.row_keys() == [key(d) for d in week[:12]])
                for due in week[:12]:
                    expected = ("pending" if due == NOW else "dispatched" if due in FIRED
                                else "unexplained")
                    await until(pilot, lambda d=due, e=expected: cell(pane, key(d), "outcome")
                                == e)
                assert cell(pane, key(week[2]), "why").startswith("unexplained: no Run")
                assert "page 1  > older" in str(pane.border_subtitle)

                await pilot.press("greater_than_sign")
                await until(pilot, lambda: pane.row_keys() == [key(d) for d in week[12:24]])
                await pilot.press("greater_than_sign")
                await until(pilot, lambda: pane.row_keys() == [key(d) for d in week[24:]])
                assert "older" not in str(pane.border_subtitle)
                await pilot.press("less_than_sign", "less_than_sign")
                await until(pilot, lambda: pane.row_keys() == [key(d) for d in week[:12]])

                # a hold from the console: stored now, before every one of these due times
                await pilot.press("h")
                await confirm(pilot, "db migration")
                unfired = [d for d in week[1:12] if d not in FIRED]
                await until(pilot, lambda: all(cell(pane, key(d), "outcome") == "skipped"
                                               for d in unfired))
                assert cell(pane, key(unfired[0]), "why").startswith(
                    "skipped: held by alice, 'db migration', since ")
                assert all(cell(pane, key(d), "outcome") == "dispatched" for d in FIRED)
        finally:
            handler.close()
            await link.close()
            await service.stop()
