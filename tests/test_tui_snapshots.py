"""Snapshot tests: every screen and dialog of the console over fixed data.

Each test drives the console (over ``tests/tui_fakes.FakeBackend``) to one screen and
compares it with ``tests/snapshots/<name>.txt`` (plain text, readable in a diff) and
``<name>.svg`` (what docs/console.md shows, copied to ``docs/screens/``). Regenerate with
``UPDATE_SNAPSHOTS=1 .venv/bin/python -m pytest tests/test_tui_snapshots.py`` and review the
diff. What would make a screen differ from run to run is frozen (fixtures below).
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual.widgets import Input

from admin_tui.app import AstraboxConsole
from admin_tui.launch import console_error
from nats_scheduler.jetstream.connection import ConnectFailure, FailureKind
from nats_scheduler.seam import SchedulerUnavailable
from nats_scheduler.settings import NatsSettings
from tests.tui_fakes import FakeBackend, frozen_clock, screen_text

pytestmark = pytest.mark.anyio

SIZE = (120, 36)
SNAPSHOTS = Path(__file__).parent / "snapshots"
DOCS_SCREENS = Path(__file__).parent.parent / "docs" / "screens"
UPDATE = os.environ.get("UPDATE_SNAPSHOTS") == "1"

Steps = Callable[[Pilot[None], AstraboxConsole], Awaitable[None]]


@pytest.fixture(autouse=True)
def _no_animations(monkeypatch: pytest.MonkeyPatch) -> None:
    """Animations (scrolling, toasts) would be caught mid-way at a random frame."""
    monkeypatch.setenv("TEXTUAL_ANIMATIONS", "none")


def _freeze_cursors(app: AstraboxConsole) -> None:
    """A blinking cursor is on or off depending on when the screenshot is taken."""
    for screen in app.screen_stack:
        for box in screen.query(Input):
            box.cursor_blink = False


LONG_LIVED = {"feed", "connect"}
"""Worker groups that run for the console's lifetime (the live feed, connection attempts)."""


async def _settle(pilot: Pilot[None], app: AstraboxConsole) -> None:
    """Wait until every short-lived worker has answered and timers have fired (max 5 s)."""
    quiet = 0
    for _ in range(100):
        await pilot.pause(0.05)
        busy = [w for w in app.workers if w.is_running and w.group not in LONG_LIVED]
        quiet = 0 if busy else quiet + 1
        if quiet >= 3:
            break
    _freeze_cursors(app)
    app.clear_notifications()
    await pilot.pause()


async def _filter(pilot: Pilot[None], app: AstraboxConsole, text: str) -> None:
    """Set the Schedules filter (typing it key by key is slow and tested elsewhere)."""
    app.screen.query_one("#filter", Input).value = text
    await pilot.press("slash", "enter")


async def _snapshots(shots: list[tuple[str, Steps | None]], **app_kwargs: object) -> None:
    """Take several snapshots along one session (each step starts where the last ended)."""
    clock = frozen_clock()
    kwargs: dict[str, object] = {"backend": FakeBackend(clock), "user": "alice",
                                 "clock": clock, "debounce": 0.01, "health_debounce": 0.01,
                                 **app_kwargs}
    if "connector" in kwargs:
        del kwargs["backend"]
    app = AstraboxConsole(**kwargs)  # type: ignore[arg-type]
    taken: list[tuple[str, str, str]] = []
    async with app.run_test(size=SIZE) as pilot:
        await _settle(pilot, app)
        for name, steps in shots:
            if steps is not None:
                await steps(pilot, app)
                await _settle(pilot, app)
            svg = app.export_screenshot(title=f"astrabox-sched-tui: {name}")
            taken.append((name, screen_text(app) + "\n", svg))
    for name, text, svg in taken:
        _compare(name, "txt", text)
        _compare(name, "svg", svg)


def _compare(name: str, ext: str, actual: str) -> None:
    path = SNAPSHOTS / f"{name}.{ext}"
    if UPDATE:
        SNAPSHOTS.mkdir(exist_ok=True)
        path.write_text(actual, "utf-8")
        if ext == "svg":
            DOCS_SCREENS.mkdir(parents=True, exist_ok=True)
            (DOCS_SCREENS / path.name).write_text(actual, "utf-8")
        return
    assert path.is_file(), f"no snapshot {path.name}: run with UPDATE_SNAPSHOTS=1"
    expected = path.read_text("utf-8")
    if ext == "txt":
        assert actual == expected, f"{name} differs from its snapshot"
    else:
        assert actual == expected, f"{name}.svg differs (the .txt matched: only styles changed)"


# ----------------------------------------------------------------------------- screens


async def _open(pilot: Pilot[None], app: AstraboxConsole, text: str) -> None:
    await _filter(pilot, app, text)
    await pilot.press("enter")


async def test_schedules() -> None:
    """The home screen; then the held Schedule selected: who held it, when and why."""

    async def held(pilot: Pilot[None], app: AstraboxConsole) -> None:
        await pilot.press(*["down"] * 6)

    await _snapshots([("schedules", None), ("schedules_held", held)])


async def test_filter_sort_and_the_action_dialogs() -> None:
    async def filtered(pilot: Pilot[None], app: AstraboxConsole) -> None:
        await _filter(pilot, app, "ly")
        await pilot.press("s")

    async def bulk(pilot: Pilot[None], app: AstraboxConsole) -> None:
        await pilot.press("H")

    async def hold(pilot: Pilot[None], app: AstraboxConsole) -> None:
        await pilot.press("escape")
        await _settle(pilot, app)
        await _filter(pilot, app, "hourly")
        await pilot.press("h")
        await pilot.pause()
        app.screen.query_one("#reason", Input).value = "upstream API maintenance"
        app.screen.query_one("#until", Input).value = "2026-03-28T18:00Z"

    async def held_until(pilot: Pilot[None], app: AstraboxConsole) -> None:
        await pilot.press("enter")  # confirm: held until 18:00 UTC

    await _snapshots([("schedules_filtered", filtered), ("bulk_hold_dialog", bulk),
                      ("hold_dialog", hold), ("schedules_held_until", held_until)])


async def test_schedule_detail_and_replay() -> None:
    """nightly-report: a failure, a replay of it, and the DST gap of 2026-03-29 marked."""

    async def detail(pilot: Pilot[None], app: AstraboxConsole) -> None:
        await _open(pilot, app, "nightly")

    async def replay(pilot: Pilot[None], app: AstraboxConsole) -> None:
        await pilot.press("down", "down", "R")

    await _snapshots([("schedule_detail", detail), ("replay_dialog", replay)])


async def test_events() -> None:
    async def tail(pilot: Pilot[None], app: AstraboxConsole) -> None:
        await pilot.press("2")

    async def expand(pilot: Pilot[None], app: AstraboxConsole) -> None:
        # the fifth newest event, chosen by its place among all of them (four presses of
        # "up" counted from wherever the cursor was when they landed: a loaded machine
        # could land them before the tail had settled, and the dialog showed another event)
        from admin_tui.widgets.event_table import EventTable
        table = app.screen.query_one(EventTable)
        table.focus()
        table.move_cursor(len(table.row_keys()) - 5)
        await pilot.press("enter")

    await _snapshots([("events", tail), ("event_json", expand)])


async def test_cluster() -> None:
    async def cluster(pilot: Pilot[None], app: AstraboxConsole) -> None:
        await pilot.press("3")

    await _snapshots([("cluster", cluster)])


async def test_load_ahead() -> None:
    """The next hour's bars and the day's heat strip, a herd at 13:00 UTC (60 tenant reports
    and the hourly, quarter-hourly and five-minutely jobs: 74 due, two slow fake replicas
    start 30 within 15 s) and the Berlin spring-forward night in the strip."""

    async def load(pilot: Pilot[None], app: AstraboxConsole) -> None:
        await pilot.press("4")

    await _snapshots([("load_ahead", load)], backend=FakeBackend(frozen_clock(),
                                                                  platform=True))


async def test_read_only() -> None:
    """The auditor: everything visible, action keys dimmed, '(read-only)' in the bar."""
    backend = FakeBackend(frozen_clock(), can_act=False,
                          act_reason="user 'auditor' may only read")
    await _snapshots([("read_only", None)], backend=backend)


async def test_unreachable() -> None:
    async def refuse() -> FakeBackend:
        raise SchedulerUnavailable("no server answered at nats://127.0.0.1:4222 within 2 s")

    await _snapshots([("unreachable", None)], connector=refuse,
                     target="nats://127.0.0.1:4222", retry_seconds=60)


async def test_credentials_refused() -> None:
    async def refuse() -> FakeBackend:
        raise console_error(ConnectFailure(FailureKind.REFUSED_CREDENTIALS),
                            NatsSettings(url="nats://127.0.0.1:4222"))

    await _snapshots([("credentials_refused", None)], connector=refuse,
                     target="nats://127.0.0.1:4222", retry_seconds=60)


def test_docs_show_the_current_snapshots() -> None:
    """docs/screens/*.svg are copies of the snapshots: the docs never show a stale screen."""
    for svg in sorted(SNAPSHOTS.glob("*.svg")):
        copy = DOCS_SCREENS / svg.name
        assert copy.is_file(), f"docs/screens/{svg.name} missing (UPDATE_SNAPSHOTS=1)"
        assert copy.read_bytes() == svg.read_bytes(), f"docs/screens/{svg.name} is stale"


KEY_NAMES = {"slash": "/", "escape": "Esc", "enter": "Enter",
             "left_square_bracket": "[", "right_square_bracket": "]",
             "less_than_sign": "<", "greater_than_sign": ">"}


@pytest.mark.parametrize("page", ["console.md", "operations.md"])
def test_docs_list_every_key_binding(page: str) -> None:
    """The key tables of docs/console.md and docs/operations.md name every binding of the app,
    its screens and dialogs."""
    from admin_tui.dialogs.confirm import ConfirmDialog
    from admin_tui.dialogs.event_json import EventJsonDialog
    from admin_tui.screens.cluster import ClusterScreen
    from admin_tui.screens.connect import ConnectScreen
    from admin_tui.screens.events import EventsScreen
    from admin_tui.screens.load import LoadScreen
    from admin_tui.screens.schedule_detail import ScheduleDetailScreen
    from admin_tui.screens.schedules import SchedulesScreen

    doc = (Path(__file__).parent.parent / "docs" / page).read_text("utf-8")
    rows = [line for line in doc.splitlines() if line.startswith("| ")]
    owners = (AstraboxConsole, SchedulesScreen, ScheduleDetailScreen, EventsScreen,
              ClusterScreen, LoadScreen, ConnectScreen, ConfirmDialog, EventJsonDialog)
    for owner in owners:
        for binding in owner.BINDINGS:
            for key in binding.key.split(","):  # type: ignore[union-attr]
                shown = f"`{KEY_NAMES.get(key, key)}`"
                word = binding.description.split()[0]  # type: ignore[union-attr]
                assert any(shown in row and word in row for row in rows), \
                    f"{owner.__name__}: {shown} ({binding.description}) not in docs/{page}"


def test_operations_doc_shows_every_screen() -> None:
    """docs/operations.md embeds every screen the snapshot tests render."""
    doc = (Path(__file__).parent.parent / "docs" / "operations.md").read_text("utf-8")
    for svg in sorted(SNAPSHOTS.glob("*.svg")):
        assert f"(screens/{svg.name})" in doc, f"docs/operations.md does not show {svg.name}"
