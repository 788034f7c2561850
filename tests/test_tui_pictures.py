"""The console's pictures and the hold with an end, against the real thing (nats-server, a
provider with its admin service, the console's own connection path), driven by Pilot:

- a hold confirmed with an end in the dialog is stored with that end, shown in the table
  (``held ◷``) and the panel, and a bad end keeps the dialog open saying why;
- a scheduled Run fired and dispatched appears in the Cluster view's lateness sparklines
  (the replica's latest firings) and in the Schedule detail's (its own Runs, both stages:
  the Run records when ``start_session`` was called).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from textual.widgets import Input

from admin_tui.dialogs.hold_confirm import HoldConfirmDialog
from admin_tui.screens.cluster import ClusterScreen
from admin_tui.screens.schedule_detail import ScheduleDetailScreen
from admin_tui.widgets.lateness_chart import LatenessChart
from admin_tui.widgets.schedule_lateness import ScheduleLateness
from admin_tui.widgets.schedule_table import ScheduleTable
from nats_scheduler.seam import RunState
from tests.console_helpers import cell, until
from tests.providers import eventually
from tests.test_tui_live import console, schedule, select

pytestmark = pytest.mark.anyio


def text_of(widget: object) -> str:
    return str(widget.render())  # type: ignore[attr-defined]


async def test_a_hold_with_an_end_from_the_dialog(nats_url: str) -> None:
    async with console(nats_url, schedule("etl")) as s:
        pilot, app = s.pilot, s.app
        select(pilot, "etl")
        await pilot.press("h")
        await until(pilot, lambda: isinstance(app.screen, HoldConfirmDialog))
        app.screen.query_one("#reason", Input).value = "schema migration"
        app.screen.query_one("#until", Input).value = "tomorrow-ish"
        await pilot.press("enter")
        await pilot.pause(0.1)
        assert isinstance(app.screen, HoldConfirmDialog)  # stays open: the end is unreadable
        app.screen.query_one("#until", Input).value = "+2h"
        asked = datetime.now(UTC)
        await pilot.press("enter")
        await until(pilot, lambda: not isinstance(app.screen, HoldConfirmDialog))

        record = await eventually(lambda: (r := s.provider.schedules.get("etl")) is not None
                                  and r.hold is not None and r)
        assert record.hold.reason == "schema migration" and record.hold.until is not None
        assert abs(record.hold.until - (asked + timedelta(hours=2))) < timedelta(seconds=30)
        table = app.screen.query_one(ScheduleTable)
        await until(pilot, lambda: cell(table, "etl", "state") == "held ◷")
        summary = text_of(app.screen.query_one("#summary"))
        assert f"until {record.hold.until:%Y-%m-%d %H:%M}Z" in summary
        assert "Next due after the hold" in summary


async def test_lateness_is_drawn_per_replica_and_per_schedule(nats_url: str) -> None:
    async with console(nats_url, schedule("drawn")) as s:
        pilot, app = s.pilot, s.app
        due = datetime(2031, 1, 1, 3, 0, tzinfo=UTC)
        run = await s.provider.fire_due("drawn", due)
        assert run is not None

        async def dispatched() -> bool:
            return (await s.provider.get_run(run.run_id)).state == RunState.DISPATCHED

        await eventually(dispatched)
        stored = await s.provider.runtime.reads.find(run.run_id)  # type: ignore[union-attr]
        assert stored is not None and stored.started_at is not None  # recorded on the Run

        await pilot.press("3")
        await until(pilot, lambda: isinstance(app.screen, ClusterScreen)
                    and "latest 1 firings" in text_of(app.screen.query_one(LatenessChart)))
        chart = text_of(app.screen.query_one(LatenessChart))
        assert "stored" in chart and "started" in chart and "to start_session" in chart

        await pilot.press("1")
        select(pilot, "drawn")
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, ScheduleDetailScreen)
                    and "latest 1 scheduled Runs" in text_of(
                        app.screen.query_one(ScheduleLateness)))
        mine = text_of(app.screen.query_one(ScheduleLateness))
        assert "not recorded" not in mine  # both stages drawn
