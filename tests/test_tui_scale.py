"""The console and the bulk actions at scale, on real servers.

- 100,000 Schedules (written raw, as bench/tui_scale.py seeds them): the first rows show
  while the list still loads, the label counts what is loaded, a filter typed narrows the
  table to exactly the matching rows, a live change keeps the cursor on its row, and ``q``
  quits. Time to first rows and to the filtered result are recorded (``record_property``),
  not asserted: speed is bench/tui_scale.py's job.
- Bulk hold/release past the server's largest message (a server of its own with a small
  ``max_payload``): the answers come in pages that each fit, the client and the CLI follow
  them, an old client's request without pages is still done whole and answered in one
  message that fits.
- The console's bulk action: progress, cancel between two pages, a report of what was done
  (over the deterministic fake backend, its pages held back by a gate).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import msgspec
import pytest
from textual.pilot import Pilot
from textual.widgets import Input

from admin_tui.actions import bulk_report
from admin_tui.app import AstraboxConsole
from admin_tui.dialogs.bulk_confirm import ITEMS_SHOWN, BulkConfirmDialog
from admin_tui.dialogs.confirm import ConfirmDialog
from admin_tui.launch import ConnectionLink
from admin_tui.screens.schedules import SchedulesScreen
from admin_tui.widgets.schedule_table import ScheduleTable
from bench.tui_scale import seed_schedules
from nats_scheduler.admin.api import BulkResult
from nats_scheduler.admin.client import AdminClient
from nats_scheduler.admin.service import start_admin_service
from nats_scheduler.core.events import Hold
from nats_scheduler.natsserver.process import NatsServer
from tests.harness.servers import connect_fast, unique_prefix
from tests.providers import running, settings
from tests.tui_fakes import FakeBackend, _schedule, frozen_clock

pytestmark = pytest.mark.anyio

SIZE = (120, 36)
SMALL = 128 * 1024
"""The largest message of the bulk test's server."""


async def until(pilot: Pilot[None], check: Callable[[], object], timeout: float) -> None:
    """Let the console run until ``check()`` holds; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"condition not met within {timeout} s"
        await pilot.pause(0.02)


@pytest.fixture
def server(tmp_path: Path) -> AsyncIterator[NatsServer]:
    """A private server: 100,000 Schedules do not go into the session server's store."""
    server = NatsServer(tmp_path / "nats", server_name="scale")
    server.start()
    try:
        yield server  # type: ignore[misc]
    finally:
        server.stop()


# ----------------------------------------------------------------------------- 100,000


@pytest.mark.slow
async def test_a_hundred_thousand_schedules(server: NatsServer,
                                            record_property: Callable[[str, object], None]
                                            ) -> None:
    count = 100_000
    prefix = unique_prefix()
    async with running(server.url, prefix, max_active_schedules=count) as bootstrap:
        del bootstrap  # the streams exist; the Schedules go in raw, the way the bench does
    await seed_schedules(server.url, prefix, count)
    async with running(server.url, prefix, max_active_schedules=count) as provider:
        await provider.until_ready()  # the Schedule table loads behind start()'s gate
        # and the warm-up after it (100,000 deployments' newest Runs) shares this test's one
        # event loop with the admin service and the console: a page answered after the
        # client's timeout would be read whole from the store instead
        assert provider.runtime is not None
        await asyncio.wait_for(provider.runtime.warmed.wait(), 120)
        assert len(provider.schedules.live()) == count
        service = await start_admin_service(provider)
        link = ConnectionLink(settings(server.url, prefix))
        app = AstraboxConsole(connector=link.connect, user="alice", debounce=0.05)
        link.app = app
        try:
            began = time.perf_counter()
            async with app.run_test(size=SIZE) as pilot:
                def screen() -> SchedulesScreen:
                    assert isinstance(app.screen, SchedulesScreen)
                    return app.screen

                await until(pilot, lambda: isinstance(app.screen, SchedulesScreen)
                            and screen().query_one(ScheduleTable).row_count > 0, 60)
                record_property("first_rows_s", round(time.perf_counter() - began, 3))
                table = screen().query_one(ScheduleTable)
                # The first rows came from the first page, not the whole list.
                assert screen().first_rows_after is not None
                assert 0 < screen().first_rows_after < count  # type: ignore[operator]
                await until(pilot, lambda: screen().complete, 240)
                record_property("all_loaded_s", round(time.perf_counter() - began, 3))
                await until(pilot, lambda: table.row_count == count, 10)
                label = screen().query_one("#sort-label")
                assert "100,000 Schedules · sort: name" in str(label.render())

                # Sorted by state, the cursor on a row deep in the list: a Schedule held
                # (sorted after it) moves to the top, every row before it one down; the
                # cursor stays on its row, one line further down.
                table.focus()
                await pilot.press("s", "s")
                await until(pilot, lambda: screen().sort_key == "state", 10)
                assert table.select_key("con-054321")
                before = table.cursor_row
                await provider.hold("con-054322", by="alice", reason="scale test")
                await until(pilot, lambda: table.row_keys()[0] == "con-054322", 15)
                assert table.selected_key == "con-054321"
                assert table.cursor_row == before + 1
                assert table.cell_text("con-054322", "state") == "held"

                box = screen().query_one("#filter", Input)
                box.focus()
                await pilot.pause()
                box.value = "con-0999"
                box.action_end()
                await pilot.pause()
                typed = time.perf_counter()
                await pilot.press("9")
                await until(pilot, lambda: table.row_count == 10, 10)
                record_property("filter_s", round(time.perf_counter() - typed, 3))
                assert sorted(table.row_keys()) == [f"con-09999{i}" for i in range(10)]
                assert "10 of 100,000 Schedules" in str(label.render())
                table.focus()
                await pilot.pause()
                quitting = time.perf_counter()
                await pilot.press("q")
            record_property("quit_s", round(time.perf_counter() - quitting, 3))
            assert app.return_code == 0
        finally:
            await link.close()
            await service.stop()


# ----------------------------------------------------------------------------- bulk pages


@pytest.fixture
def small_server(tmp_path: Path) -> AsyncIterator[NatsServer]:
    """A server whose largest message is 128 KiB: 3,000 IDs of 50 characters exceed it.

    (Not smaller: the provider's start-up reads the newest Run of up to 1,000 deployments
    in one request naming their subjects, which must fit too.)"""
    server = NatsServer(tmp_path / "nats", server_name="small",
                        extra_config=f"max_payload: {SMALL}")
    server.start()
    try:
        yield server  # type: ignore[misc]
    finally:
        server.stop()


async def test_bulk_hold_and_release_past_the_largest_message(small_server: NatsServer
                                                              ) -> None:
    count, width = 3000, 46  # 3,000 IDs of 50 characters: about 160 KB of IDs
    prefix = unique_prefix()
    async with running(small_server.url, prefix, max_active_schedules=count) as bootstrap:
        del bootstrap
    await seed_schedules(small_server.url, prefix, count, width=width)
    async with running(small_server.url, prefix, max_active_schedules=count) as provider:
        service = await start_admin_service(provider)
        nc = await connect_fast(small_server.url)
        try:
            assert nc.max_payload == SMALL
            client = AdminClient(nc, prefix, timeout=30)
            await provider.hold(f"con-{7:0{width}d}", by="bob", reason="before")

            pages = [page async for page in client.bulk_pages(
                "con-", hold=True, by="alice", reason="freeze", limit=1000)]
            assert len(pages) > 2  # no page could hold them all: each stopped at its size
            assert all(len(msgspec.json.encode(p)) < SMALL for p in pages)
            assert [p.next_after for p in pages[:-1]] == [p_last(p) for p in pages[:-1]]
            assert pages[-1].next_after is None
            changed = [dep for p in pages for dep in p.changed]
            assert sum(p.changed_total for p in pages) == count - 1 == len(changed)
            assert [dep for p in pages for dep in p.unchanged] == [f"con-{7:0{width}d}"]
            assert changed == sorted(changed)
            assert all(r.hold is not None and r.hold.by in {"alice", "bob"}
                       for r in provider.schedules.live())

            # An old client asks without pages: all done, one answer that fits, lists cut.
            reply = await nc.request(f"{prefix}.admin.schedules.release_bulk",
                                     b'{"filter": "con-", "by": "carol", "reason": "thaw"}',
                                     timeout=60)
            assert len(reply.data) < SMALL
            old = msgspec.json.decode(reply.data, type=BulkResult)
            assert (old.changed_count, old.unchanged_count, old.truncated) == (count, 0, True)
            assert 0 < len(old.changed) < count and old.next_after is None
            assert all(r.hold is None for r in provider.schedules.live())

            # The client's whole-set call follows the pages and joins them.
            whole = await client.hold_bulk("0" * (width - 2), by="alice", reason="again")
            assert whole.changed_total == len(whole.changed) == 100 and not whole.truncated
        finally:
            await nc.close()
            await service.stop()


def p_last(page: BulkResult) -> str:
    """The last deployment a page went through (its cursor)."""
    return max(page.changed + page.unchanged)


# ----------------------------------------------------------------------------- the console


def many(backend: FakeBackend, count: int) -> None:
    for i in range(count):
        s = _schedule(f"dep-bulk-{i:04d}", f"bulk-{i:04d}", "0 3 * * *", "UTC",
                      hold=Hold(by="bob", reason="x", at=backend.clock.now()) if i < 3
                      else None)
        backend.schedules[s.deployment_id] = s


async def test_the_console_bulk_action_shows_progress_cancels_and_reports() -> None:
    clock = frozen_clock()
    backend = FakeBackend(clock)
    many(backend, 700)
    permits = backend.bulk_permits = asyncio.Semaphore(0)
    app = AstraboxConsole(backend=backend, user="alice", clock=clock, debounce=0.01)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, SchedulesScreen)
                    and app.screen.complete, 10)
        screen = app.screen
        assert isinstance(screen, SchedulesScreen)
        screen.query_one("#filter", Input).value = "dep-bulk"
        await pilot.press("H")
        await until(pilot, lambda: isinstance(app.screen, BulkConfirmDialog), 10)
        dialog = app.screen
        assert isinstance(dialog, BulkConfirmDialog)
        assert dialog.title_text == "Hold 700 Schedules?"
        assert dialog.confirm_label == "Hold 697"
        assert len(dialog.items) == ITEMS_SHOWN + 1  # the first 100, then "… and 600 more"
        assert str(dialog.items[-1]) == "… and 600 more"
        dialog.query_one("#reason", Input).value = "freeze"
        await pilot.press("enter")
        await until(pilot, lambda: not isinstance(app.screen, ConfirmDialog), 10)

        label = screen.query_one("#bulk-label")
        await until(pilot, lambda: screen.bulk_tally is not None and label.display, 10)
        assert "0 of 700" in str(label.render())
        permits.release()  # one page through
        await until(pilot, lambda: "200 of 700" in str(label.render()), 10)
        await pilot.press("c")  # stop: the page asked for meanwhile is the last one
        permits.release()
        await until(pilot, lambda: screen.bulk_tally is None, 10)
        report = screen.last_bulk
        assert report is not None and report.cancelled and not label.display
        assert (report.done, report.changed, report.unchanged) == (400, 397, 3)
        held = sorted(d for d, s in backend.schedules.items() if s.hold is not None
                      and s.hold.by == "alice" and d.startswith("dep-bulk"))
        assert held == report.changed_ids == [f"dep-bulk-{i:04d}" for i in range(3, 400)]
        assert bulk_report(report) == (
            "397 Schedules held, 3 unchanged (matching 'dep-bulk'); cancelled after 400 of "
            "700: the others were not touched")
        assert [c for c in backend.calls if c[0] == "hold_bulk"] == [
            ("hold_bulk", ("dep-bulk", "alice", "freeze"))] * 2

        # Again, unpaced, to the end: what the first one did is now unchanged.
        backend.bulk_permits = None
        await pilot.press("H")
        await until(pilot, lambda: isinstance(app.screen, BulkConfirmDialog), 10)
        app.screen.query_one("#reason", Input).value = "freeze"
        await pilot.press("enter")
        await until(pilot, lambda: screen.last_bulk is not report
                    and screen.bulk_tally is None, 10)
        final = screen.last_bulk
        assert final is not None and not final.cancelled
        assert (final.done, final.changed, final.unchanged) == (700, 300, 400)
        assert all(s.hold is not None for s in backend.schedules.values()
                   if s.deployment_id.startswith("dep-bulk"))
