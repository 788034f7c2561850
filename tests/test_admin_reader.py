"""Read-only admin queries keep working when no scheduler process answers (store reads)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec
import pytest

from nats_scheduler.admin.api import AdminError, ErrorCode
from nats_scheduler.admin.client import AdminClient
from nats_scheduler.admin.service import start_admin_service
from nats_scheduler.clock import ManualClock
from nats_scheduler.seam import RunPayload, RunState, Schedule
from nats_scheduler.testing.handler import RecordingRunHandler
from tests.harness.servers import connect_fast, unique_prefix
from tests.providers import assert_clean, eventually, running

pytestmark = pytest.mark.anyio


async def test_reads_from_the_store_match_the_service_answers(nats_url: str) -> None:
    prefix = unique_prefix()
    # The same frozen "now" for both answers (next due times, health windows).
    clock = ManualClock(datetime.now(UTC) + timedelta(seconds=30))
    handler = RecordingRunHandler()
    handler.fail_permanently(deployment_id="b")
    nc = await connect_fast(nats_url)
    client = AdminClient(nc, prefix, timeout=2.0, clock=clock)
    try:
        async with running(nats_url, prefix, handler) as provider:
            service = await start_admin_service(provider, clock=clock)
            for dep, tz in (("a", "Asia/Kolkata"), ("b", "America/New_York")):
                await provider.apply(Schedule(dep, dep.upper(), "*/10 * * * *", tz, True,
                                              RunPayload("t", dep), 1))
            runs = [await client.run_now(dep, by="alice", reason="r")
                    for dep in ("a", "a", "a", "b")]
            await client.hold("b", by="alice", reason="broken")

            async def settled() -> bool:
                states = [(await client.get_run(r.run_id)).state for r in runs]
                return states == [RunState.DISPATCHED] * 3 + [RunState.FAILED]

            await eventually(settled, timeout=10)
            by_service = (await client.list_schedules(), await client.get_schedule("a"),
                          await client.list_runs("a", limit=2),
                          await client.get_run(runs[0].run_id), await client.health())
            assert client.last_source == "service"
            await service.stop()

            by_store = (await client.list_schedules(), await client.get_schedule("a"),
                        await client.list_runs("a", limit=2),
                        await client.get_run(runs[0].run_id), await client.health())
            assert client.last_source == "store"
            # the differences: what only a running replica knows, its own clock against the
            # store's, the replicas it counts live and the busiest minute it found
            assert by_service[4].server_offset is not None
            assert by_store[4].server_offset is None
            assert by_service[4].live_replicas == 1 and by_store[4].live_replicas is None
            health = msgspec.structs.replace(
                by_service[4], server_offset=None, server_offset_error=None,
                busiest_minute=None, busiest_due=0, live_replicas=None)
            assert by_store == (*by_service[:4], health)
            assert by_store[4].failed_runs[0].run_id == runs[3].run_id
        # no process at all any more: still readable
        page = await client.list_runs("a", limit=2, before=by_service[2].next_before)
        assert [r.run_id for r in page.runs] == [runs[0].run_id]
        status = await client.cluster_status()
        assert status.replicas == [] and status.in_flight == []
        assert status.store.reachable and "3 schedule events" in (status.store.detail or "")
        assert await client.can_act() == (False, "no scheduler process is running: actions "
                                                  "need a running scheduler process")
        with pytest.raises(AdminError) as refused:
            await client.run_now("a", by="alice")
        assert refused.value.code == ErrorCode.UNAVAILABLE
        assert_clean(refused.value.message)
        history = await client.recent_events(deployment_id="b")
        assert "ScheduleHeld" in [type(e).__name__ for e in history]
    finally:
        await nc.close()


async def test_an_empty_namespace_reads_as_empty(nats_url: str) -> None:
    nc = await connect_fast(nats_url)
    try:
        client = AdminClient(nc, unique_prefix(), timeout=2.0)
        assert await client.list_schedules() == []
        assert (await client.list_runs("x")).runs == []
        assert await client.recent_events() == []
        with pytest.raises(AdminError) as missing:
            await client.get_run("x")
        assert missing.value.code == ErrorCode.NOT_FOUND
        with pytest.raises(AdminError) as bad:
            await client.get_schedule("")
        assert bad.value.code == ErrorCode.INVALID_REQUEST
        health = await client.health()
        assert (health.silent_stops, health.stuck_runs, health.failed_runs) == ([], [], [])
        status = await client.cluster_status()
        assert "not prepared" in (status.store.detail or "")
    finally:
        await nc.close()
