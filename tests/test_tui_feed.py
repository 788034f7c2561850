"""The console under a herd of events (Pilot over tests/tui_fakes.FakeBackend).

A herd reaches the console as thousands of events in a moment. What must hold:

- the Events tail keeps exactly ``TAIL_LIMIT`` rows, the newest last, the cursor on it while
  following, and on the row the operator chose while not following (the oldest rows go);
- a view the operator does not see does no widget work (its rows, its reloads) while the
  events arrive, keeps its data current, and catches up once when shown again.

Speed is bench/tui_scale.py's job: nothing here is timed.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from textual.pilot import Pilot
from textual.screen import Screen
from textual.widget import Widget

from admin_tui.app import AstraboxConsole
from admin_tui.dialogs.event_json import EventJsonDialog
from admin_tui.screens.cluster import ClusterScreen
from admin_tui.screens.events import TAIL_LIMIT, EventsScreen
from admin_tui.screens.schedules import SchedulesScreen
from admin_tui.widgets.event_table import EventTable
from admin_tui.widgets.schedule_table import ScheduleTable
from nats_scheduler.seam import RunState
from tests.console_helpers import cell, until
from tests.tui_fakes import FakeBackend, frozen_clock

pytestmark = pytest.mark.anyio

SIZE = (120, 36)
HERD = "dep-hourly-sync"


def console(backend: FakeBackend) -> AstraboxConsole:
    return AstraboxConsole(backend=backend, user="alice", clock=backend.clock,
                           debounce=0.01, health_debounce=0.01)


def newest_seq(app: AstraboxConsole) -> int:
    """The running number of the newest event the console received."""
    events = app.recent_events()
    return events[-1][0] if events else 0


def short(run_id: str) -> str:
    """A Run ID as the tail's Run column shows it."""
    return run_id[:11] + "…"


async def open_events(pilot: Pilot[None], app: AstraboxConsole) -> EventTable:
    """The Events view, showing the feed's history (the fake's whole log)."""
    history = len(app.backend.log)  # type: ignore[attr-defined]
    await until(pilot, lambda: newest_seq(app) == history)
    await pilot.press("2")
    await until(pilot, lambda: isinstance(app.screen, EventsScreen)
                and app.screen.query_one(EventTable).row_count == history)
    return app.screen.query_one(EventTable)


async def burst(pilot: Pilot[None], app: AstraboxConsole, table: EventTable | None,
                count: int, deployment_id: str = HERD) -> list[str]:
    """Push ``count`` Run events at once; wait until the console numbered them all (and, given
    a table, until its last row is the newest). Returns the Runs' IDs, oldest first."""
    last = newest_seq(app) + count
    ids = app.backend.publish_burst(count, deployment_id)  # type: ignore[attr-defined]
    await until(pilot, lambda: newest_seq(app) == last)
    if table is not None:
        await until(pilot, lambda: table.row_keys()[-1:] == [str(last)])
    return ids  # type: ignore[no-any-return]


async def test_a_burst_leaves_the_tail_at_its_limit_newest_last_and_followed() -> None:
    backend = FakeBackend(frozen_clock())
    app = console(backend)
    async with app.run_test(size=SIZE) as pilot:
        table = await open_events(pilot, app)
        ids = await burst(pilot, app, table, 3 * TAIL_LIMIT)

        last = newest_seq(app)
        assert table.row_keys() == [str(seq) for seq in range(last - TAIL_LIMIT + 1, last + 1)]
        assert cell(table, str(last), "run") == short(ids[-1])
        assert table.selected_key == str(last)  # following: the cursor is on the newest
        label = app.screen.query_one("#follow-label")
        assert str(label.render()) == f"{TAIL_LIMIT} events · following"

        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, EventJsonDialog))
        dialog = app.screen
        assert isinstance(dialog, EventJsonDialog)
        assert dialog.event.run.run_id == ids[-1]  # type: ignore[attr-defined]


async def test_not_following_the_cursor_stays_on_its_event_as_the_oldest_go() -> None:
    backend = FakeBackend(frozen_clock())
    app = console(backend)
    async with app.run_test(size=SIZE) as pilot:
        table = await open_events(pilot, app)
        await burst(pilot, app, table, TAIL_LIMIT)
        await pilot.press("f")
        table.move_cursor(row=TAIL_LIMIT // 2)
        chosen = table.selected_key
        assert chosen is not None

        await burst(pilot, app, table, TAIL_LIMIT // 5)
        assert table.row_count == TAIL_LIMIT
        assert table.selected_key == chosen
        assert table.cursor_row == TAIL_LIMIT // 2 - TAIL_LIMIT // 5


@pytest.fixture
def refreshed(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Widget]]:
    """Every widget asked to redraw (``Widget.refresh``), in order."""
    calls: list[Widget] = []
    original = Widget.refresh

    def spy(self: Widget, *args: object, **kwargs: object) -> Widget:
        calls.append(self)
        return original(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Widget, "refresh", spy)
    yield calls


def on_screen(widgets: list[Widget], screen: Screen[object]) -> list[Widget]:
    return [w for w in widgets if w is screen or screen in w.ancestors]


async def handled(pilot: Pilot[None], *screens: Screen[object]) -> None:
    """Wait until each screen has handled every message posted to it so far (a callback
    queued behind them has run)."""
    done: list[Screen[object]] = []
    for screen in screens:
        screen.call_later(lambda s=screen: done.append(s))
    await until(pilot, lambda: len(done) == len(screens))


async def test_hidden_views_do_no_widget_work_and_catch_up_when_shown(
        refreshed: list[Widget]) -> None:
    backend = FakeBackend(frozen_clock())
    app = console(backend)
    async with app.run_test(size=SIZE) as pilot:
        events_table = await open_events(pilot, app)
        events = app.screen
        await pilot.press("3")
        await until(pilot, lambda: isinstance(app.screen, ClusterScreen)
                    and app.screen.status is not None)
        cluster = app.screen
        await pilot.press("1")
        await until(pilot, lambda: isinstance(app.screen, SchedulesScreen))
        schedules = app.screen
        assert isinstance(schedules, SchedulesScreen)
        rows_before = events_table.row_keys()
        loads_before = backend.calls.count(("cluster_status", None))
        refreshed.clear()

        ids = await burst(pilot, app, None, 2 * TAIL_LIMIT)
        # Shown: the Schedules view follows the herd (its model, then its row).
        await until(pilot, lambda: cell(schedules.query_one(ScheduleTable), HERD, "last")
                    .startswith("pending"))
        await handled(pilot, events, cluster)
        assert events_table.row_keys() == rows_before
        assert on_screen(refreshed, events) == []
        assert on_screen(refreshed, cluster) == []
        assert backend.calls.count(("cluster_status", None)) == loads_before

        # Shown again: each catches up once.
        await pilot.press("2")
        await until(pilot, lambda: events_table.row_keys()[-1:] == [str(newest_seq(app))])
        assert events_table.row_count == TAIL_LIMIT
        assert cell(events_table, str(newest_seq(app)), "run") == short(ids[-1])
        await pilot.press("3")
        await until(pilot, lambda: backend.calls.count(("cluster_status", None))
                    == loads_before + 1)


async def test_a_hidden_schedules_view_keeps_its_model_current() -> None:
    backend = FakeBackend(frozen_clock())
    app = console(backend)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, SchedulesScreen)
                    and app.screen.complete)
        schedules = app.screen
        assert isinstance(schedules, SchedulesScreen)
        await open_events(pilot, app)
        await burst(pilot, app, None, 50)
        await until(pilot, lambda: getattr(schedules.model.get(HERD), "last_run_state", None)
                    == RunState.PENDING)
        await pilot.press("1")
        await until(pilot, lambda: cell(schedules.query_one(ScheduleTable), HERD, "last")
                    .startswith("pending"))
