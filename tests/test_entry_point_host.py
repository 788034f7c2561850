"""Operator actions under a host that only speaks the seam, as AstraBox does.

The provider is loaded ONLY through the ``astrabox.providers.scheduler`` entry point,
constructed with no arguments, configured from ``ASTRABOX_NATS_*`` environment variables,
then ``configure()``, ``start(handler)``, ``apply()``: nothing else. No test code starts an
admin service, yet ``nats-scheduler`` and the console hold, release, Run now and Replay, and
each action is checked in the store. After ``stop()``, and with
``ASTRABOX_NATS_ADMIN_SERVICE=0``, no process answers them.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import nats.errors
import pytest
from textual.pilot import Pilot

from admin_tui.app import AstraboxConsole
from admin_tui.launch import ConnectionLink
from admin_tui.screens.schedule_detail import ScheduleDetailScreen
from admin_tui.screens.schedules import SchedulesScreen
from admin_tui.widgets.run_table import RunTable
from admin_tui.widgets.schedule_table import ScheduleTable
from nats_scheduler.admin.client import event_type as event_tag
from nats_scheduler.admin.service import start_admin_service
from nats_scheduler.cli.common import EXIT_UNAVAILABLE
from nats_scheduler.cli.main import main as nats_scheduler
from nats_scheduler.command_line import default_actor
from nats_scheduler.core.events import decode_run_event, decode_schedule_event
from nats_scheduler.names import Names
from nats_scheduler.seam import RunPayload, RunState, Schedule, Trigger
from nats_scheduler.settings import NatsSettings
from nats_scheduler.testing.handler import RecordingRunHandler
from tests.console_helpers import cell, confirm, until
from tests.harness.servers import connect_fast, unique_prefix
from tests.providers import SqliteBackend

pytestmark = pytest.mark.anyio

DEP = "ep-daily"
SCHEDULE = Schedule(DEP, "Entry point daily", "0 3 * * *", "UTC", True,
                    RunPayload("agent/report", "write the report"), 1)
"""Fires at 03:00 UTC only: every Run of these tests comes from an operator action."""


def load_like_astrabox() -> object:
    """The provider as AstraBox gets it: the entry point's class, constructed bare."""
    cls = importlib.metadata.entry_points(group="astrabox.providers.scheduler")["nats"].load()
    return cls()


@pytest.fixture
def env(nats_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """AstraBox's environment for the provider (and the operator's for the tools); the prefix."""
    prefix = unique_prefix()
    for name, value in {"URL": nats_url, "PREFIX": prefix, "LEASE_SECONDS": "2",
                        "DRAIN_SECONDS": "2", "STORE_RETRY_SECONDS": "3",
                        "CONNECT_TIMEOUT_SECONDS": "3", "RETRY_INITIAL_SECONDS": "0.01",
                        "RETRY_CAP_SECONDS": "0.05"}.items():
        monkeypatch.setenv(f"ASTRABOX_NATS_{name}", value)
    return prefix


@contextlib.asynccontextmanager
async def astrabox(tmp_path: Path) -> AsyncIterator[tuple[object, RecordingRunHandler]]:
    """The seam's lifecycle only: configure, start, apply; stop at the end (again is a no-op)."""
    provider = load_like_astrabox()
    provider.configure(repository_backend=SqliteBackend(tmp_path))  # type: ignore[attr-defined]
    handler = RecordingRunHandler()
    await provider.start(handler)  # type: ignore[attr-defined]
    try:
        await provider.apply(SCHEDULE)  # type: ignore[attr-defined]
        yield provider, handler
    finally:
        handler.close()
        await provider.stop()  # type: ignore[attr-defined]


async def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``nats-scheduler ARGV`` in-process (its own event loop, in a thread), env settings."""
    capsys.readouterr()
    code = await anyio.to_thread.run_sync(nats_scheduler, [*argv, "--timeout", "3"])
    out, err = capsys.readouterr()
    return code, out, err


async def cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:  # type: ignore[type-arg]
    code, out, err = await cli(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)  # type: ignore[no-any-return]


@dataclass
class StoreView:
    """Reads straight from the store with a connection of its own (not the provider's)."""

    nc: nats.aio.client.Client
    names: Names

    async def last_schedule_event(self) -> object:
        msg = await self.nc.jetstream().get_last_msg(self.names.schedules_stream,
                                                      self.names.schedule_subject(DEP))
        return decode_schedule_event(msg.data)

    async def run_events(self, run_id: str) -> list[object]:
        js = self.nc.jetstream()
        subject = self.names.run_subject(DEP, run_id)
        events, seq = [], 0
        while True:
            try:
                msg = await js.get_msg(self.names.runs_stream, seq=seq + 1, subject=subject,
                                       next=True)
            except nats.js.errors.NotFoundError:
                return events
            events.append(decode_run_event(msg.data))
            seq = msg.seq


@contextlib.asynccontextmanager
async def store_view(url: str, prefix: str) -> AsyncIterator[StoreView]:
    nc = await connect_fast(url)
    try:
        yield StoreView(nc, Names(prefix))
    finally:
        await nc.close()


# ----------------------------------------------------------------------------- command line


async def test_cli_actions_are_served_by_the_provider_alone(
    env: str, nats_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with store_view(nats_url, env) as store:
        async with astrabox(tmp_path) as (provider, handler):
            held = await cli_json(capsys, "hold", DEP, "--by", "alice", "--reason", "vendor down")
            assert held["state"] == "held"
            event = await store.last_schedule_event()
            assert event_tag(event) == "schedule.held"
            hold = event.schedule.hold  # type: ignore[attr-defined]
            # no login of its own here: who acted is the name the client gives, --by is
            # whom it acted for
            assert (hold.by, hold.on_behalf_of, hold.reason) == (
                default_actor(), "alice", "vendor down")

            released = await cli_json(capsys, "release", DEP, "--by", "alice",
                                      "--reason", "vendor back")
            assert released["state"] == "enabled"
            event = await store.last_schedule_event()
            assert event_tag(event) == "schedule.released"
            assert event.schedule.hold is None  # type: ignore[attr-defined]

            now = await cli_json(capsys, "run-now", DEP, "--by", "alice", "--reason", "check",
                                 "--wait", "10")
            assert (now["trigger"], now["state"]) == ("run_now", "dispatched")
            created = (await store.run_events(now["run_id"]))[0]
            assert event_tag(created) == "run.created"
            assert (created.run.requested_by, created.run.reason) == ("alice", "check")  # type: ignore[attr-defined]
            assert handler.session_of(now["run_id"]) is not None

            replay = await cli_json(capsys, "replay", now["run_id"], "--by", "bob", "--wait", "10")
            assert replay["state"] == "dispatched"
            created = (await store.run_events(replay["run_id"]))[0]
            assert created.run.trigger == Trigger.REPLAY  # type: ignore[attr-defined]
            assert (created.run.replay_of, created.run.requested_by) == (  # type: ignore[attr-defined]
                now["run_id"], "bob")
            assert created.run.payload == SCHEDULE.payload  # type: ignore[attr-defined]

            status = await cli_json(capsys, "status")
            assert [r["identity"] for r in status["cluster"]["replicas"]] == [
                provider.identity]  # type: ignore[attr-defined]

        # stop(): no process serves actions any more; reads still come from the store
        code, _, err = await cli(capsys, "run-now", DEP, "--by", "alice")
        assert code == EXIT_UNAVAILABLE and "no scheduler process is running" in err
        code, _, err = await cli(capsys, "hold", DEP, "--by", "alice", "--reason", "late")
        assert code == EXIT_UNAVAILABLE and "no scheduler process is running" in err
        runs = await cli_json(capsys, "runs", DEP)
        assert [r["run_id"] for r in runs["runs"]] == [replay["run_id"], now["run_id"]]
        assert event_tag(await store.last_schedule_event()) == "schedule.released"


async def test_with_the_setting_off_no_admin_service_answers(
    env: str, nats_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ASTRABOX_NATS_ADMIN_SERVICE", "0")
    async with store_view(nats_url, env) as store, astrabox(tmp_path) as (provider, _):
        assert provider.settings.admin_service is False  # type: ignore[attr-defined]
        assert provider.runtime.admin is None  # type: ignore[attr-defined]
        with pytest.raises(nats.errors.NoRespondersError):
            await store.nc.request(f"{store.names.admin_prefix}.health", b"{}", timeout=2)
        # the process is alive and says why it serves no actions (its key, from its join)
        await provider.until_ready()  # type: ignore[attr-defined]
        code, _, err = await cli(capsys, "hold", DEP, "--by", "alice", "--reason", "x")
        assert code == EXIT_UNAVAILABLE and (
            "1 scheduler replica is alive but none serves actions: turned off "
            "(ASTRABOX_NATS_ADMIN_SERVICE=0)") in err, err
        assert provider.schedules.get(DEP).hold is None  # type: ignore[attr-defined]


async def test_start_admin_service_replaces_the_providers_own(
    env: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Tests that start one with other options still get one service per process."""
    async with astrabox(tmp_path) as (provider, _):
        own = provider.runtime.admin  # type: ignore[attr-defined]
        assert own is not None
        service = await start_admin_service(provider)  # type: ignore[arg-type]
        assert provider.runtime.admin is service and service is not own  # type: ignore[attr-defined]
        status = await cli_json(capsys, "status")
        assert len(status["cluster"]["replicas"]) == 1
    code, _, _ = await cli(capsys, "run-now", DEP)
    assert code == EXIT_UNAVAILABLE  # stop() stopped the replacement too


# ----------------------------------------------------------------------------- console

SIZE = (120, 36)








async def test_console_actions_are_served_by_the_provider_alone(
    env: str, nats_url: str, tmp_path: Path
) -> None:
    link = ConnectionLink(NatsSettings.from_env().validated())
    try:
        async with store_view(nats_url, env) as store, astrabox(tmp_path) as (provider, _):
            app = AstraboxConsole(connector=link.connect, user="carol", target=nats_url,
                                  debounce=0.05, health_debounce=0.1, retry_seconds=0.5)
            link.app = app
            async with app.run_test(size=SIZE) as pilot:
                await _console_walk(pilot, app, provider, store)
    finally:
        await link.close()


async def _console_walk(pilot: Pilot[None], app: AstraboxConsole, provider: object,
                        store: StoreView) -> None:
    await until(pilot, lambda: isinstance(app.screen, SchedulesScreen)
                and len(app.screen.schedules) == 1 and app.can_act)
    table = app.screen.query_one(ScheduleTable)
    table.focus()
    assert table.select_key(DEP)

    await pilot.press("h")
    await confirm(pilot, "db maintenance")
    await until(pilot, lambda: cell(table, DEP, "state") == "held")
    event = await store.last_schedule_event()
    assert event_tag(event) == "schedule.held"
    assert (event.schedule.hold.by, event.schedule.hold.reason) == (  # type: ignore[attr-defined]
        "carol", "db maintenance")

    await pilot.press("u")
    await confirm(pilot, "maintenance over")
    await until(pilot, lambda: cell(table, DEP, "state") == "enabled")
    assert event_tag(await store.last_schedule_event()) == "schedule.released"

    await pilot.press("enter")
    await until(pilot, lambda: isinstance(app.screen, ScheduleDetailScreen))
    runs = app.screen.query_one(RunTable)
    await pilot.press("r")
    await confirm(pilot, "smoke test")
    await until(pilot, lambda: runs.row_count == 1)
    first = runs.row_keys()[0]
    await until(pilot, lambda: cell(runs, first, "state") == "dispatched")
    created = (await store.run_events(first))[0]
    assert (created.run.trigger, created.run.requested_by) == (  # type: ignore[attr-defined]
        Trigger.RUN_NOW, "carol")

    runs.focus()
    assert runs.select_key(first)
    await pilot.press("R")
    await confirm(pilot, "again with the captured payload")
    await until(pilot, lambda: runs.row_count == 2)
    replay_id = next(k for k in runs.row_keys() if k != first)
    await until(pilot, lambda: cell(runs, replay_id, "state") == "dispatched")
    created = (await store.run_events(replay_id))[0]
    assert (created.run.trigger, created.run.replay_of, created.run.requested_by) == (  # type: ignore[attr-defined]
        Trigger.REPLAY, first, "carol")
    stored = await provider.get_run(replay_id)  # type: ignore[attr-defined]
    assert stored.state == RunState.DISPATCHED

    # stop(): the console's next action is answered by nobody, and says so
    await provider.stop()  # type: ignore[attr-defined]
    await pilot.press("r")
    await confirm(pilot, "after the stop")
    await until(pilot, lambda: any("no scheduler process is running" in str(n.message)
                                   for n in app._notifications))
    assert runs.row_count == 2
