"""A dev host keeps the provider in step with its records and answers the handler's calls."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest

from nats_scheduler import NatsSchedulerProvider
from nats_scheduler.admin.client import AdminClient
from nats_scheduler.devhost.handler import DevHostRunHandler, count_calls, read_sessions
from nats_scheduler.devhost.host import DevHost
from nats_scheduler.devhost.records import DeploymentStore
from nats_scheduler.seam import EnqueueRequest, RunState, Trigger
from tests.harness.servers import connect_fast, unique_prefix
from tests.providers import MongoBackend, eventually, settings

pytestmark = pytest.mark.anyio


async def test_reconcile_at_start_then_apply_and_delete_on_change(
    nats_url: str, tmp_path: Path
) -> None:
    db = tmp_path / "astrabox.db"
    records = DeploymentStore(db)
    records.create("kept", cron="0 9 * * *", timezone="Europe/Berlin", prompt="kept")
    prefix = unique_prefix()
    provider = NatsSchedulerProvider(settings(nats_url, prefix))
    provider.configure(repository_backend=MongoBackend())
    host = DevHost(records, provider, DevHostRunHandler(db, process="test"), poll_interval=0.05)
    stop = asyncio.Event()
    nc = await connect_fast(nats_url)
    client = AdminClient(nc, prefix, timeout=3.0)
    try:
        await host.start()
        # the provider serves the admin service itself; the host starts none of its own
        assert provider.runtime is not None and provider.runtime.admin is not None
        assert [r.identity for r in (await client.cluster_status()).replicas] == [
            provider.identity]
        assert client.last_source == "service"
        assert provider.schedules.get("kept") is not None
        loop = asyncio.create_task(host.run_until(stop))

        async def state(dep: str) -> tuple[str, int] | None:
            views = {v.deployment_id: v for v in
                     await client.list_schedules(include_deleted=True)}
            view = views.get(dep)
            return (view.state, view.version) if view else None

        async def becomes(dep: str, expected: tuple[str, int]) -> None:
            async def check() -> bool:
                return await state(dep) == expected

            await eventually(check, timeout=10)

        records.create("new", cron="*/5 * * * *", prompt="first")
        await becomes("new", ("enabled", 1))
        records.edit("new", prompt="second")
        await becomes("new", ("enabled", 2))
        records.set_enabled("new", False)
        await becomes("new", ("disabled", 3))
        records.delete("kept")
        await becomes("kept", ("deleted", 1))  # delete carries no version

        run = await provider.enqueue(EnqueueRequest("new", Trigger.RUN_NOW))

        async def dispatched() -> bool:
            return (await provider.get_run(run.run_id)).state == RunState.DISPATCHED

        await eventually(dispatched, timeout=10)
        sessions = read_sessions(db, "new")
        assert [(s.run_id, s.prompt, s.created_by) for s in sessions] == [
            (run.run_id, "second", "test")]
        assert sessions[0].turn_id is not None
        assert count_calls(db, run.run_id) == {"start_session": 1, "admit_turn": 1}
        stop.set()
        await asyncio.wait_for(loop, 5)
    finally:
        stop.set()
        await host.stop()
        with contextlib.suppress(Exception):
            await nc.close()


async def test_without_a_provider_the_host_keeps_records_only(tmp_path: Path) -> None:
    records = DeploymentStore(tmp_path / "a.db")
    host = DevHost(records, None, DevHostRunHandler(tmp_path / "a.db"))
    await host.start()
    records.create("x", cron="* * * * *")
    assert await host.sync_once() == []
    await host.stop()
