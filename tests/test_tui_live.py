"""The console against the real thing: nats-server, a provider with its admin service, and
the console's own connection path (``admin_tui.launch.ConnectionLink`` -> ``AdminClient``).

Pilot drives the keys an operator presses; each action is checked twice — in the console's
views (pushed by the live feed) and in the provider's own state.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from textual.command import CommandList, CommandPalette
from textual.pilot import Pilot
from textual.widgets import Input

from admin_tui.app import AstraboxConsole
from admin_tui.dialogs.confirm import ConfirmDialog
from admin_tui.dialogs.event_json import EventJsonDialog
from admin_tui.launch import ConnectionLink
from admin_tui.screens.cluster import ClusterScreen
from admin_tui.screens.connect import ConnectScreen
from admin_tui.screens.events import EventsScreen
from admin_tui.screens.schedule_detail import ScheduleDetailScreen
from admin_tui.screens.schedules import SchedulesScreen
from admin_tui.widgets.event_table import EventTable
from admin_tui.widgets.replica_table import ReplicaTable
from admin_tui.widgets.run_table import RunTable
from admin_tui.widgets.schedule_table import ScheduleTable
from nats_scheduler.admin.admission import BUSY_MESSAGE
from nats_scheduler.admin.service import start_admin_service
from nats_scheduler.natsserver.process import NatsServer
from nats_scheduler.provider import NatsSchedulerProvider
from nats_scheduler.seam import EnqueueRequest, RunPayload, RunState, Schedule, Trigger
from nats_scheduler.testing.handler import RecordingRunHandler
from tests.console_helpers import cell, confirm, until
from tests.harness.servers import unique_prefix
from tests.providers import running, settings
from tests.security_support import PASSWORDS, prod_server
from tests.tui_fakes import FakeBackend

pytestmark = pytest.mark.anyio

SIZE = (120, 36)
"""Upper bound of every wait (seconds); the views normally follow in well under a second."""


def schedule(dep: str, name: str | None = None, cron: str = "0 3 * * *") -> Schedule:
    """A Schedule that does not fire during a test (03:00 UTC); Runs come from actions."""
    return Schedule(deployment_id=dep, name=name or dep, cron=cron, timezone="UTC",
                    enabled=True, payload=RunPayload(target="agent/test", prompt="hello"))


@dataclass
class Stack:
    pilot: Pilot[None]
    app: AstraboxConsole
    provider: NatsSchedulerProvider
    handler: RecordingRunHandler


@contextlib.asynccontextmanager
async def console(
    url: str, *schedules: Schedule, handler: RecordingRunHandler | None = None,
    prefix: str | None = None, limits: dict[str, int] | None = None,
    **provider_settings: object,
) -> AsyncIterator[Stack]:
    """A provider + admin service, and the console connected the way the CLI connects it."""
    prefix = prefix or unique_prefix()
    handler = handler or RecordingRunHandler()
    async with running(url, prefix, handler, **provider_settings) as provider:
        service = await start_admin_service(provider, limits=limits)
        link = ConnectionLink(settings(url, prefix))
        try:
            for s in schedules:
                await provider.apply(s)
            app = AstraboxConsole(connector=link.connect, user="alice", target=url,
                                  debounce=0.05, health_debounce=0.1, retry_seconds=0.5)
            link.app = app
            async with app.run_test(size=SIZE) as pilot:
                await until(pilot, lambda: isinstance(app.screen, SchedulesScreen)
                            and len(app.screen.schedules) == len(schedules))
                yield Stack(pilot, app, provider, handler)
        finally:
            handler.close()
            await link.close()
            await service.stop()








def select(pilot: Pilot[None], key: str) -> None:
    table = pilot.app.screen.query_one(ScheduleTable)
    table.focus()
    assert table.select_key(key)


# ----------------------------------------------------------------------------- navigation


async def test_a_busy_scheduler_is_shown_as_busy_not_as_a_lost_connection(nats_url: str
                                                                          ) -> None:
    """An endpoint at its limit (here 0: always) answers busy: the console says so and
    keeps its link, the feed and the other views (no "Connection lost; reconnecting")."""
    async with console(nats_url, schedule("busy-a"), limits={"cluster.status": 0}) as s:
        pilot, app = s.pilot, s.app
        await pilot.press("3")
        await until(pilot, lambda: any(BUSY_MESSAGE in str(n.message)
                                       for n in app._notifications))
        assert app.link == "live"
        assert not any("Connection lost" in str(n.title) for n in app._notifications)
        await pilot.press("1")
        await until(pilot, lambda: isinstance(app.screen, SchedulesScreen)
                    and app.screen.schedules)


async def test_navigation_across_every_view(nats_url: str) -> None:
    async with console(nats_url, schedule("nav-a"), schedule("nav-b", cron="*/30 * * * *")
                       ) as s:
        pilot, app = s.pilot, s.app
        table = app.screen.query_one(ScheduleTable)
        assert table.row_keys() == ["nav-a", "nav-b"]
        assert cell(table, "nav-a", "state") == "enabled"
        assert app.link == "live" and app.can_act

        select(pilot, "nav-b")
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, ScheduleDetailScreen)
                    and app.screen.detail is not None)
        detail = app.screen
        assert isinstance(detail, ScheduleDetailScreen) and detail.deployment_id == "nav-b"
        assert len(detail.detail.upcoming) == 10  # type: ignore[union-attr]
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, SchedulesScreen))

        await pilot.press("2")
        await until(pilot, lambda: isinstance(app.screen, EventsScreen)
                    and app.screen.query_one(EventTable).row_count >= 2)
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, EventJsonDialog))
        await pilot.press("escape")

        await pilot.press("3")
        await until(pilot, lambda: isinstance(app.screen, ClusterScreen)
                    and app.screen.status is not None)
        cluster = app.screen
        assert isinstance(cluster, ClusterScreen) and cluster.status is not None
        assert cluster.status.store.reachable
        assert s.provider.identity in cluster.query_one(ReplicaTable).row_keys()

        await pilot.press("1")
        await until(pilot, lambda: isinstance(app.screen, SchedulesScreen))
        await pilot.press("ctrl+p")
        await until(pilot, lambda: isinstance(app.screen, CommandPalette))
        await pilot.press(*"hold")
        await until(pilot, lambda: _palette_has(app, "Hold"))
        await pilot.press("escape")


def _palette_has(app: AstraboxConsole, title: str) -> bool:
    options = app.screen.query_one(CommandList)
    return any(title in str(options.get_option_at_index(i).prompt)
               for i in range(options.option_count))


# ----------------------------------------------------------------------------- actions


async def test_run_now_then_the_run_moves_live(nats_url: str) -> None:
    """Run now from the detail view; the new Run's row follows its state as it changes."""
    handler = RecordingRunHandler()
    gate = handler.block(deployment_id="live-run")
    async with console(nats_url, schedule("live-run"), handler=handler) as s:
        pilot, app = s.pilot, s.app
        select(pilot, "live-run")
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, ScheduleDetailScreen))
        detail = app.screen
        await pilot.press("r")
        await confirm(pilot, "smoke test after deploy")
        runs = detail.query_one(RunTable)
        await until(pilot, lambda: runs.row_count == 1)
        run_id = runs.row_keys()[0]
        await gate.wait_until_blocked()
        await until(pilot, lambda: cell(runs, run_id, "state") == "dispatching")
        assert cell(runs, run_id, "trigger") == "run_now"
        assert cell(runs, run_id, "by") == "alice"

        gate.release()
        await until(pilot, lambda: cell(runs, run_id, "state") == "dispatched")
        stored = await s.provider.get_run(run_id)
        assert stored.state == RunState.DISPATCHED and stored.requested_by == "alice"
        assert cell(runs, run_id, "session") != "—"


async def test_hold_and_release_round_trip(nats_url: str) -> None:
    async with console(nats_url, schedule("hold-me"), schedule("leave-me")) as s:
        pilot, app = s.pilot, s.app
        table = app.screen.query_one(ScheduleTable)
        select(pilot, "hold-me")
        await pilot.press("h")
        await until(pilot, lambda: isinstance(app.screen, ConfirmDialog))
        await pilot.press("enter")  # an empty reason is refused: the dialog stays
        assert isinstance(app.screen, ConfirmDialog)
        await pilot.press(*"db maint")
        await pilot.press("enter")
        await until(pilot, lambda: cell(table, "hold-me", "state") == "held")
        record = s.provider.schedules.get("hold-me")
        assert record is not None and record.hold is not None
        assert (record.hold.by, record.hold.reason) == ("alice", "db maint")
        assert cell(table, "leave-me", "state") == "enabled"

        await pilot.press("u")
        await confirm(pilot, "maintenance over")
        await until(pilot, lambda: cell(table, "hold-me", "state") == "enabled")
        record = s.provider.schedules.get("hold-me")
        assert record is not None and record.hold is None


async def test_bulk_hold_and_release_of_the_filtered_schedules(nats_url: str) -> None:
    async with console(nats_url, schedule("bulk-a"), schedule("bulk-b"),
                       schedule("other")) as s:
        pilot, app = s.pilot, s.app
        table = app.screen.query_one(ScheduleTable)
        app.screen.query_one("#filter", Input).value = "bulk"
        await until(pilot, lambda: table.row_keys() == ["bulk-a", "bulk-b"])
        await pilot.press("H")
        await until(pilot, lambda: isinstance(app.screen, ConfirmDialog))
        listed = [str(item.render()) for item in app.screen.query(".dialog-item")]
        assert len(listed) == 2 and "bulk-a" in listed[0] + listed[1]
        await confirm(pilot, "freeze the bulk jobs")
        await until(pilot, lambda: cell(table, "bulk-a", "state") == "held"
                    and cell(table, "bulk-b", "state") == "held")
        assert s.provider.schedules.get("other").hold is None  # type: ignore[union-attr]

        await pilot.press("U")
        await confirm(pilot, "unfreeze")
        await until(pilot, lambda: cell(table, "bulk-a", "state") == "enabled"
                    and cell(table, "bulk-b", "state") == "enabled")


async def test_replay_round_trip(nats_url: str) -> None:
    async with console(nats_url, schedule("replay-me")) as s:
        pilot, app = s.pilot, s.app
        original = await s.provider.enqueue(EnqueueRequest(
            deployment_id="replay-me", trigger=Trigger.RUN_NOW, requested_by="setup"))
        select(pilot, "replay-me")
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, ScheduleDetailScreen))
        runs = app.screen.query_one(RunTable)
        await until(pilot, lambda: cell(runs, original.run_id, "state") == "dispatched")
        runs.focus()
        assert runs.select_key(original.run_id)
        await pilot.press("R")
        await confirm(pilot, "re-run with the captured payload")
        await until(pilot, lambda: runs.row_count == 2)
        replay_id = next(k for k in runs.row_keys() if k != original.run_id)
        assert cell(runs, replay_id, "trigger") == "replay"
        assert cell(runs, replay_id, "by") == "alice"
        stored = await s.provider.get_run(replay_id)
        assert stored.replay_of == original.run_id and stored.trigger == Trigger.REPLAY
        await until(pilot, lambda: cell(runs, replay_id, "state") == "dispatched")


# ----------------------------------------------------------------------------- connection


async def test_auditor_sees_everything_and_may_not_act(tmp_path: Path) -> None:
    """The production config: wrong credentials get a clear screen; the auditor reads only."""
    prefix = unique_prefix()
    with prod_server(tmp_path / "nats", prefix=prefix) as server:
        async with running(server.url, prefix, user="scheduler",
                           password=PASSWORDS["scheduler"]) as provider:
            service = await start_admin_service(provider)
            try:
                await provider.apply(schedule("audited"))
                await _refused(server, prefix)
                await _read_only(server, prefix)
            finally:
                await service.stop()


async def _refused(server: NatsServer, prefix: str) -> None:
    link = ConnectionLink(settings(server.url, prefix, user="auditor", password="wrong"))
    app = AstraboxConsole(connector=link.connect, user="auditor", target=server.url,
                          retry_seconds=30)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: isinstance(app.screen, ConnectScreen)
                        and app.screen.attempts >= 1 and "refused" in _status(app))
            assert "credentials" in _status(app)
    finally:
        await link.close()


async def _read_only(server: NatsServer, prefix: str) -> None:
    link = ConnectionLink(settings(server.url, prefix, user="auditor",
                                   password=PASSWORDS["auditor"]))
    app = AstraboxConsole(connector=link.connect, user="auditor", target=server.url)
    link.app = app
    try:
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: isinstance(app.screen, SchedulesScreen)
                        and app.screen.schedules and app.act_reason != "checking what this "
                        "user may do…")
            assert not app.can_act
            screen = app.screen
            assert screen.check_action("hold", ()) is None  # dimmed in the footer
            assert screen.check_action("filter", ()) is True
            select(pilot, "audited")
            await pilot.press("h")
            await pilot.pause(0.2)
            assert not isinstance(app.screen, ConfirmDialog)
            assert any("Hold is disabled" in str(n.message) for n in app._notifications)
            await pilot.press("enter")
            await until(pilot, lambda: isinstance(app.screen, ScheduleDetailScreen)
                        and app.screen.detail is not None)
    finally:
        await link.close()


async def test_a_passing_no_to_actions_is_asked_again_without_a_reconnect() -> None:
    """A permission check that fails (a scheduler process not yet listening, permissions
    being fixed) leaves the console read-only only until it asks again: no reconnect."""
    backend = FakeBackend(can_act=False, act_reason="no scheduler process is running")
    app = AstraboxConsole(backend=backend, user="alice", clock=backend.clock)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.act_reason == "no scheduler process is running")
        assert not app.can_act
        backend.act_answer = (True, None)
        await until(pilot, lambda: app.can_act)
        assert sum(1 for name, _ in backend.calls if name == "can_act") >= 2


def _status(app: AstraboxConsole) -> str:
    return str(app.screen.query_one("#connect-status").render())


async def test_unreachable_then_connects_and_reconnects_by_itself(tmp_path: Path) -> None:
    server = NatsServer(tmp_path / "nats", server_name="tui-reconnect")
    prefix = unique_prefix()
    link = ConnectionLink(settings(server.url, prefix))
    app = AstraboxConsole(connector=link.connect, user="alice", target=server.url,
                          retry_seconds=0.3, debounce=0.05)
    link.app = app
    try:
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: isinstance(app.screen, ConnectScreen)
                        and "Cannot reach" in _status(app))
            server.start()
            async with running(server.url, prefix) as provider:
                service = await start_admin_service(provider)
                try:
                    await provider.apply(schedule("comes-back"))
                    await until(pilot, lambda: isinstance(app.screen, SchedulesScreen)
                                and app.link == "live" and app.screen.schedules)
                    server.kill()
                    await until(pilot, lambda: app.link == "lost")
                    server.restart()
                    # live again, and able to act (a permission check that failed
                    # while the server came back is asked again)
                    await until(pilot, lambda: app.link == "live" and app.can_act)
                    table = app.screen.query_one(ScheduleTable)
                    select(pilot, "comes-back")
                    await pilot.press("h")
                    await confirm(pilot, "after the outage")
                    await until(pilot, lambda: cell(table, "comes-back", "state") == "held")
                finally:
                    await service.stop()
    finally:
        await link.close()
        server.stop()
