"""The admin service (nats.micro) and AdminClient against real providers on a real server."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest
from nats.aio.client import Client

from nats_scheduler.admin.api import AdminError, ErrorCode, RunView
from nats_scheduler.admin.client import AdminClient, event_type
from nats_scheduler.admin.service import AdminService, start_admin_service
from nats_scheduler.core import calendar
from nats_scheduler.core.events import RunCreated, ScheduleHeld
from nats_scheduler.jetstream.permissions import ViolationLog
from nats_scheduler.names import SERVICE_NAME
from nats_scheduler.natsserver.process import NatsServer
from nats_scheduler.provider import NatsSchedulerProvider
from nats_scheduler.seam import RunPayload, RunState, Schedule, Trigger
from nats_scheduler.testing.handler import RecordingRunHandler
from tests.harness.servers import connect_fast, unique_prefix
from tests.providers import assert_clean, eventually, running

pytestmark = pytest.mark.anyio


class OffsetClock:
    """The real clock moved forward: the service sees leases expired and due times passed."""

    def __init__(self, offset: timedelta) -> None:
        self.offset = offset

    def now(self) -> datetime:
        return datetime.now(UTC) + self.offset

    async def sleep_until(self, instant: datetime) -> None:  # pragma: no cover - unused
        raise NotImplementedError


@dataclass
class Admin:
    provider: NatsSchedulerProvider
    service: AdminService
    client: AdminClient
    nc: Client
    handler: RecordingRunHandler
    prefix: str


@contextlib.asynccontextmanager
async def admin_on(url: str, prefix: str, handler: RecordingRunHandler | None = None,
                   clock: object | None = None) -> AsyncIterator[Admin]:
    handler = handler or RecordingRunHandler()
    async with running(url, prefix, handler) as provider:
        service = await start_admin_service(provider, clock=clock)  # type: ignore[arg-type]
        nc = await connect_fast(url)
        try:
            yield Admin(provider, service, AdminClient(nc, prefix, timeout=3.0), nc, handler,
                        prefix)
        finally:
            handler.close()
            await service.stop()
            await nc.close()


@pytest.fixture
async def admin(nats_url: str) -> AsyncIterator[Admin]:
    async with admin_on(nats_url, unique_prefix()) as ctx:
        yield ctx


def daily(dep: str, *, name: str | None = None, cron: str = "0 9 * * *",
          tz: str = "Europe/Berlin", enabled: bool = True, version: int = 1) -> Schedule:
    return Schedule(dep, name or dep, cron, tz, enabled, RunPayload("agent", f"prompt {dep}"),
                    version)


async def dispatched(client: AdminClient, run_id: str) -> RunView:
    async def check() -> RunView | None:
        run = await client.get_run(run_id)
        return run if run.state == RunState.DISPATCHED else None

    return await eventually(check, timeout=10)


async def raw(nc: Client, prefix: str, endpoint: str, body: bytes) -> tuple[dict, dict]:
    msg = await nc.request(f"{prefix}.admin.{endpoint}", body, timeout=3)
    return json.loads(msg.data), dict(msg.headers or {})


# ----------------------------------------------------------------------------- discovery


async def test_micro_discovers_the_service_with_every_endpoint(admin: Admin) -> None:
    msg = await admin.nc.request(f"$SRV.INFO.{SERVICE_NAME}.{admin.service.service.id}", b"",
                                 timeout=2)
    info = json.loads(msg.data)
    assert info["name"] == SERVICE_NAME
    assert info["metadata"] == {"prefix": admin.prefix, "identity": admin.provider.identity,
                                "callers": "stated"}  # no login of its own: names as given
    subjects = {e["subject"] for e in info["endpoints"]}
    for endpoint in ("schedules.list", "schedules.get", "schedules.hold", "schedules.release",
                     "schedules.hold_bulk", "schedules.release_bulk", "runs.list", "runs.get",
                     "runs.run_now", "runs.replay", "cluster.status", "health",
                     "replica.status"):
        assert f"{admin.prefix}.admin.{endpoint}" in subjects
    stats = json.loads((await admin.nc.request(
        f"$SRV.STATS.{SERVICE_NAME}.{admin.service.service.id}", b"", timeout=2)).data)
    assert stats["type"] == "io.nats.micro.v1.stats_response"


# ----------------------------------------------------------------------------- Schedules


async def test_list_and_get_schedules(admin: Admin) -> None:
    await admin.provider.apply(daily("berlin", name="Berlin report"))
    await admin.provider.apply(daily("off", enabled=False, tz="UTC"))
    views = await admin.client.list_schedules()
    assert admin.client.last_source == "service"
    assert [(v.deployment_id, v.state) for v in views] == [("berlin", "enabled"),
                                                           ("off", "disabled")]
    berlin = views[0]
    assert len(berlin.next_due) == 3 and berlin.next_due == sorted(berlin.next_due)
    assert berlin.payload == RunPayload("agent", "prompt berlin")
    assert views[1].next_due == []
    assert [v.deployment_id for v in await admin.client.list_schedules("REPORT")] == ["berlin"]
    detail = await admin.client.get_schedule("berlin")
    assert len(detail.upcoming) == 10 and len(detail.dst_notes) == 10
    with pytest.raises(AdminError) as missing:
        await admin.client.get_schedule("nope")
    assert missing.value.code == ErrorCode.NOT_FOUND


async def test_hold_and_release_record_who_and_why_and_survive_apply(admin: Admin) -> None:
    await admin.provider.apply(daily("dep"))
    held = await admin.client.hold("dep", by="alice", reason="vendor outage")
    assert held.state == "held" and held.hold is not None
    assert (held.hold.by, held.hold.reason) == ("alice", "vendor outage")
    assert held.next_due == []
    await admin.provider.apply(daily("dep", cron="30 9 * * *", version=2))  # AstraBox edits
    assert (await admin.client.get_schedule("dep")).schedule.state == "held"
    released = await admin.client.release("dep", by="bob", reason="vendor back")
    assert released.state == "enabled" and released.cron == "30 9 * * *"
    events = await admin.client.recent_events(deployment_id="dep", types={"schedule"})
    kinds = [event_type(e) for e in events]
    assert kinds == ["schedule.applied", "schedule.held", "schedule.applied",
                     "schedule.released"]
    hold_event = events[1]
    assert isinstance(hold_event, ScheduleHeld)
    assert (hold_event.by, hold_event.reason) == ("alice", "vendor outage")


async def test_actions_are_validated_with_stable_codes(admin: Admin) -> None:
    await admin.provider.apply(daily("dep"))
    cases = [
        (admin.client.hold("dep", by="alice", reason="  "), ErrorCode.INVALID_REQUEST),
        (admin.client.hold("dep", by="", reason="why"), ErrorCode.INVALID_REQUEST),
        (admin.client.hold("nope", by="alice", reason="why"), ErrorCode.NOT_FOUND),
        (admin.client.hold_bulk("", by="alice", reason="why"), ErrorCode.INVALID_REQUEST),
        (admin.client.release_bulk(" ", by="alice", reason="why"), ErrorCode.INVALID_REQUEST),
        (admin.client.run_now("nope", by="alice"), ErrorCode.NOT_FOUND),
        (admin.client.replay("nope", by="alice"), ErrorCode.NOT_FOUND),
        (admin.client.get_run("nope"), ErrorCode.NOT_FOUND),
        (admin.client.list_runs("dep", limit=0), ErrorCode.INVALID_REQUEST),
        (admin.client.list_runs("dep", before="nope"), ErrorCode.NOT_FOUND),
    ]
    for call, code in cases:
        with pytest.raises(AdminError) as error:
            await call
        assert error.value.code == code, error.value.message
        assert_clean(error.value.message, echoed="nope")


async def test_malformed_requests_get_clean_json_errors(admin: Admin) -> None:
    for endpoint, body in (("schedules.hold", b"not json"), ("schedules.hold", b"{}"),
                           ("runs.list", b'{"deployment_id": 5}'),
                           ("schedules.hold", b'{"deployment_id": "a.b*>", "by": "x",'
                                              b' "reason": "y"}')):
        answer, headers = await raw(admin.nc, admin.prefix, endpoint, body)
        assert set(answer) == {"error"}, answer
        assert answer["error"]["code"] in {"invalid_request", "not_found"}
        assert headers["Nats-Service-Error-Code"] in {"400", "404"}
        assert_clean(answer["error"]["message"], echoed="a.b*>")


async def test_bulk_hold_and_release_by_filter(admin: Admin) -> None:
    for dep in ("eu-berlin", "eu-paris", "us-boston"):
        await admin.provider.apply(daily(dep))
    await admin.client.hold("eu-paris", by="alice", reason="first")
    result = await admin.client.hold_bulk("EU-", by="alice", reason="maintenance")
    assert (result.changed, result.unchanged) == (["eu-berlin"], ["eu-paris"])
    states = {v.deployment_id: v.state for v in await admin.client.list_schedules()}
    assert states == {"eu-berlin": "held", "eu-paris": "held", "us-boston": "enabled"}
    result = await admin.client.release_bulk("eu", by="alice", reason="done")
    assert sorted(result.changed) == ["eu-berlin", "eu-paris"]


# ----------------------------------------------------------------------------- Runs


async def test_run_now_replay_get_and_page_runs(admin: Admin) -> None:
    await admin.provider.apply(daily("dep"))
    first = await admin.client.run_now("dep", by="alice", reason="check the fix")
    assert (first.trigger, first.requested_by, first.reason) == (Trigger.RUN_NOW, "alice",
                                                                  "check the fix")
    first = await dispatched(admin.client, first.run_id)
    assert first.session_id and first.turn_id
    await admin.provider.apply(Schedule("dep", "dep", "0 9 * * *", "Europe/Berlin", True,
                                        RunPayload("agent", "edited"), 2))
    replay = await admin.client.replay(first.run_id, by="bob")
    assert replay.replay_of == first.run_id and replay.trigger == Trigger.REPLAY
    assert replay.payload.prompt == "prompt dep"  # the captured payload, not the edit
    await dispatched(admin.client, replay.run_id)
    again = await admin.client.run_now("dep", by="alice", request_id="once")
    same = await admin.client.run_now("dep", by="alice", request_id="once")
    assert same.run_id == again.run_id
    page = await admin.client.list_runs("dep", limit=2)
    assert [r.run_id for r in page.runs] == [again.run_id, replay.run_id]
    assert page.next_before == replay.run_id
    rest = await admin.client.list_runs("dep", limit=2, before=page.next_before)
    assert [r.run_id for r in rest.runs] == [first.run_id] and rest.next_before is None
    created = await admin.client.recent_events(deployment_id="dep", types={"run.created"})
    assert [e.run.requested_by for e in created if isinstance(e, RunCreated)] == [
        "alice", "bob", "alice"]


async def test_events_follow_new_run_events(admin: Admin) -> None:
    await admin.provider.apply(daily("dep"))
    seen: list[str] = []
    done = asyncio.Event()

    async def follow() -> None:
        async for event in admin.client.events(deployment_id="dep", types={"run"}, history=0):
            seen.append(event_type(event))
            if seen[-1] == "run.dispatched":
                done.set()

    task = asyncio.create_task(follow())
    try:
        await asyncio.sleep(0.2)  # let the consumer start before the Run exists
        await admin.client.run_now("dep", by="alice")
        await asyncio.wait_for(done.wait(), 10)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert seen[0] == "run.created" and seen[-1] == "run.dispatched"


# ----------------------------------------------------------------------------- cluster


async def test_cluster_status_counts_every_replica_and_the_runs_in_flight(nats_url: str) -> None:
    prefix = unique_prefix()
    handler = RecordingRunHandler()
    gate = handler.block(deployment_id="slow", method="admit_turn")
    async with admin_on(nats_url, prefix, handler) as one, \
            admin_on(nats_url, prefix, handler) as two:
        await one.provider.apply(daily("slow"))
        run = await one.client.run_now("slow", by="alice")
        await gate.wait_until_blocked()
        status = await two.client.cluster_status()
        identities = {r.identity for r in status.replicas}
        assert identities == {one.provider.identity, two.provider.identity}
        assert status.in_flight == [run.run_id]
        assert [lease.run_id for lease in status.leases] == [run.run_id]
        assert status.store.reachable and status.store.server_version
        assert all(r.now is not None for r in status.replicas)
        assert await one.client.can_act() == (True, None)
        gate.release()
        await dispatched(one.client, run.run_id)


async def test_health_reports_silent_stops_stuck_and_failed_runs(nats_url: str) -> None:
    handler = RecordingRunHandler()
    handler.fail_permanently(deployment_id="broken")
    stuck_gate = handler.hang(deployment_id="hung", method="admit_turn")
    # The service starts on the real clock, which then jumps an hour ahead: the every-minute
    # Schedule's due times passed (while the replica ran) without Runs, and the hung Run's
    # lease (renewed on the real clock) looks expired.
    clock = OffsetClock(timedelta(0))
    async with admin_on(nats_url, unique_prefix(), handler, clock=clock) as ctx:
        assert (await ctx.client.health()).silent_stops == []
        await ctx.provider.apply(daily("minutely", cron="* * * * *", tz="UTC"))
        # due half a day from now: the hour's jump passes none of their due times, whatever
        # the time of day the test runs at (only the every-minute Schedule goes silent)
        far = f"0 {(datetime.now(UTC).hour + 12) % 24} * * *"
        await ctx.provider.apply(daily("broken", cron=far, tz="UTC"))
        await ctx.provider.apply(daily("hung", cron=far, tz="UTC"))
        failed = await ctx.client.run_now("broken", by="alice")
        hung = await ctx.client.run_now("hung", by="alice")
        await stuck_gate.wait_until_blocked()

        async def failed_seen() -> bool:
            return (await ctx.client.get_run(failed.run_id)).state == RunState.FAILED

        await eventually(failed_seen, timeout=10)
        clock.offset = timedelta(hours=1)
        health = await ctx.client.health()
        assert health.silent_stops == ["minutely"]
        assert [r.run_id for r in health.stuck_runs] == [hung.run_id]
        assert [r.run_id for r in health.failed_runs] == [failed.run_id]
        assert health.failed_runs[0].error


async def test_health_names_the_busiest_minute_and_the_live_replicas(admin: Admin) -> None:
    """Three Schedules at 09:00 UTC and one every minute: the busiest minute of the next
    day is the next 09:00, with all four due (what ``status`` judges against the replicas)."""
    for dep in ("nine-a", "nine-b", "nine-c"):
        await admin.provider.apply(daily(dep, cron="0 9 * * *", tz="UTC"))
    await admin.provider.apply(daily("minutely", cron="* * * * *", tz="UTC"))
    before = datetime.now(UTC)
    health = await admin.client.health()
    nine = calendar.next_due("0 9 * * *", "UTC", before)
    assert (health.busiest_minute, health.busiest_due) == (nine, 4)
    assert health.live_replicas == 1


AUDITOR_CONFIG = """
authorization {
  users = [
    {user: ops, password: ops}
    {user: auditor, password: auditor, permissions: {publish: {deny: [
      "*.admin.schedules.hold", "*.admin.schedules.release", "*.admin.schedules.*_bulk",
      "*.admin.runs.run_now", "*.admin.runs.replay"]}}}
  ]
}
"""


async def test_a_user_refused_actions_is_told_so_and_can_still_read(tmp_path: Path) -> None:
    server = NatsServer(tmp_path / "nats", extra_config=AUDITOR_CONFIG)
    await anyio.to_thread.run_sync(server.start)
    try:
        url = server.url.replace("nats://", "nats://ops:ops@")
        async with admin_on(url, unique_prefix()) as ops:
            await ops.provider.apply(daily("dep"))
            assert await ops.client.can_act() == (True, None)
            log = ViolationLog()
            nc = await connect_fast(server.url, user="auditor", password="auditor",
                                    error_cb=log.on_error)
            try:
                auditor = AdminClient(nc, ops.prefix, timeout=1.0, violations=log)
                allowed, reason = await auditor.can_act()
                assert not allowed and "may not request actions" in (reason or "")
                assert [v.deployment_id for v in await auditor.list_schedules()] == ["dep"]
                with pytest.raises(AdminError) as refused:
                    await auditor.run_now("dep", by="mallory")
                assert refused.value.code == ErrorCode.FORBIDDEN
                assert_clean(refused.value.message)
            finally:
                await nc.close()
    finally:
        await anyio.to_thread.run_sync(server.stop)


def test_the_error_mapping_table_is_pinned() -> None:
    """A decoding error raised past the request's own decoding is a stored record the
    scheduler could not read: its failure (internal), never the operator's request."""
    import msgspec

    from nats_scheduler.admin.api import OperatorAction
    from nats_scheduler.admin.request_checks import decode_request
    from nats_scheduler.admin.service import to_admin_error
    from nats_scheduler.seam import (
        InvalidSchedule,
        RunNotFound,
        ScheduleCapacityExceeded,
        ScheduleNotFound,
        SchedulerConfigurationError,
        SchedulerUnavailable,
    )

    try:
        msgspec.json.decode(b"{}", type=OperatorAction)
    except msgspec.ValidationError as exc:
        invalid_body = exc
    table = [
        (ScheduleNotFound("x"), ErrorCode.NOT_FOUND),
        (RunNotFound("x"), ErrorCode.NOT_FOUND),
        (ScheduleCapacityExceeded("x"), ErrorCode.CONFLICT),
        (InvalidSchedule("x"), ErrorCode.INVALID_REQUEST),
        (ValueError("x"), ErrorCode.INVALID_REQUEST),
        (SchedulerUnavailable("x"), ErrorCode.UNAVAILABLE),
        (SchedulerConfigurationError("x"), ErrorCode.UNAVAILABLE),
        (invalid_body, ErrorCode.INTERNAL),
        (msgspec.DecodeError("x"), ErrorCode.INTERNAL),
        (KeyError("secret internals"), ErrorCode.INTERNAL),
    ]
    for exc, code in table:
        error = to_admin_error(exc)
        assert error.code == code, exc
        assert "secret" not in error.message
    assert "could not read a record it stored" in to_admin_error(invalid_body).message
    with pytest.raises(AdminError) as refused:
        decode_request(OperatorAction, b"{}", "schedules.hold")
    assert refused.value.code == ErrorCode.INVALID_REQUEST
    assert "lacks the field 'deployment_id'" in refused.value.message


async def test_a_schedule_list_larger_than_one_message_arrives_in_pages(admin: Admin) -> None:
    """The list crosses the server's largest message in pages; the client joins them."""
    big = "p" * 40_000  # 40 Schedules of about 40 KB: beyond the 1 MB max_payload
    for i in range(40):
        await admin.provider.apply(Schedule(f"big-{i:02d}", f"big-{i:02d}", "0 9 * * *",
                                            "UTC", True, RunPayload("agent", big), 1))
    first, _ = await raw(admin.nc, admin.prefix, "schedules.list", b"{}")
    page = first["schedules"]
    assert 0 < len(page) < 40 and first["next_after"] == page[-1]["deployment_id"]
    listed = await admin.client.list_schedules()
    assert [v.deployment_id for v in listed] == [f"big-{i:02d}" for i in range(40)]
    assert admin.client.last_source == "service"
    filtered = await admin.client.list_schedules("big-3")
    assert [v.deployment_id for v in filtered] == [f"big-3{i}" for i in range(10)]
