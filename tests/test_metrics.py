"""The provider's OpenTelemetry metrics, read with the SDK's in-memory reader on a real server.

Each test hands its own ``MeterProvider`` to the provider (the global one is never set), so
nothing leaks between tests. The figures are checked where an SRE reads them: the exported
data points (names, attributes, counts, a lateness histogram), and the per-replica copy the
admin service returns in ``cluster.status``.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    HistogramDataPoint,
    InMemoryMetricReader,
    Metric,
    NumberDataPoint,
)

from nats_scheduler.admin.client import AdminClient
from nats_scheduler.clock import Clock
from nats_scheduler.jetstream.errors import Conflict
from nats_scheduler.natsserver.process import NatsServer
from nats_scheduler.provider import NatsSchedulerProvider
from nats_scheduler.runtime.metrics import INSTRUMENTS, METER_NAME
from nats_scheduler.seam import (
    EnqueueRequest,
    RunPayload,
    RunState,
    Schedule,
    SchedulerUnavailable,
    Trigger,
)
from nats_scheduler.testing.handler import RecordingRunHandler
from tests.harness.clocks import OffsetClock
from tests.harness.servers import connect_fast, unique_prefix
from tests.providers import MongoBackend, eventually, running, settings

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parent.parent


def daily(dep: str) -> Schedule:
    """03:00 UTC: the ticker does not fire it during a test; the test fires a past due time."""
    return Schedule(dep, dep, "0 3 * * *", "UTC", True, RunPayload("agent", f"do {dep}"), 1)


@contextlib.asynccontextmanager
async def instrumented(
    url: str, handler: RecordingRunHandler, *, clock: Clock | None = None, **overrides: object
) -> AsyncIterator[tuple[NatsSchedulerProvider, InMemoryMetricReader]]:
    """A started provider exporting to a reader of this test's own."""
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    provider = NatsSchedulerProvider(settings(url, unique_prefix(), **overrides),
                                     meter_provider=meters, clock=clock)
    provider.configure(repository_backend=MongoBackend())
    await provider.start(handler)
    try:
        yield provider, reader
    finally:
        handler.close()
        await provider.stop()
        meters.shutdown()


def exported(reader: InMemoryMetricReader) -> dict[str, Metric]:
    """Every metric the reader collects now, by name (all from the provider's meter)."""
    data = reader.get_metrics_data()
    found: dict[str, Metric] = {}
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            assert scope.scope.name == METER_NAME
            found.update({metric.name: metric for metric in scope.metrics})
    return found


def point(metrics: dict[str, Metric], name: str, **attributes: str) -> float:
    """A counter's value (or a histogram's count) for exactly these attributes; 0 if absent."""
    metric = metrics.get(name)
    for p in metric.data.data_points if metric else []:
        if dict(p.attributes or {}) == attributes:
            if isinstance(p, HistogramDataPoint):
                return p.count
            assert isinstance(p, NumberDataPoint)
            return p.value
    return 0


def last_due(now: datetime) -> datetime:
    """The latest 03:00 UTC before ``now``: a due time of :func:`daily` already passed."""
    due = now.replace(hour=3, minute=0, second=0, microsecond=0)
    return due if due < now else due - timedelta(days=1)


async def test_firing_run_now_retries_and_failures_are_exported(nats_url: str) -> None:
    handler = RecordingRunHandler()
    handler.fail_transiently(1, deployment_id="flaky")
    handler.fail_permanently(deployment_id="broken")
    async with instrumented(nats_url, handler) as (provider, reader):
        for dep in ("daily", "flaky", "broken"):
            await provider.apply(daily(dep))
        before = datetime.now(UTC)
        due = last_due(before)
        fired = await provider.fire_due("daily", due)
        assert fired is not None
        runs = [fired] + [await provider.enqueue(EnqueueRequest(dep, Trigger.RUN_NOW))
                          for dep in ("daily", "flaky", "broken")]

        async def settled() -> bool:
            states = [(await provider.get_run(r.run_id)).state for r in runs]
            return states == [RunState.DISPATCHED] * 3 + [RunState.FAILED]

        await eventually(settled, timeout=15)
        m = exported(reader)

    assert point(m, "astrabox.scheduler.runs.created", trigger="schedule") == 1
    assert point(m, "astrabox.scheduler.runs.created", trigger="run_now") == 3
    assert point(m, "astrabox.scheduler.runs.dispatched", trigger="schedule") == 1
    assert point(m, "astrabox.scheduler.runs.dispatched", trigger="run_now") == 2
    assert point(m, "astrabox.scheduler.runs.failed", trigger="run_now",
                 reason="permanent") == 1
    assert point(m, "astrabox.scheduler.dispatch.attempts", trigger="schedule") == 1
    assert point(m, "astrabox.scheduler.dispatch.attempts", trigger="run_now") == 4
    assert point(m, "astrabox.scheduler.dispatch.retries", trigger="run_now") == 1
    assert point(m, "astrabox.scheduler.dispatch.takeovers", trigger="run_now") == 0

    lateness = m["astrabox.scheduler.fire.lateness"]
    assert lateness.unit == "s" and m["astrabox.scheduler.runs.created"].unit == "{run}"
    stages = {p.attributes["stage"]: p for p in lateness.data.data_points}  # type: ignore[index]
    assert set(stages) == {"stored", "started"}  # only the scheduled Run has a due time
    for stage in stages.values():
        assert isinstance(stage, HistogramDataPoint) and stage.count == 1
        assert stage.sum >= (before - due).total_seconds()


async def test_gauges_follow_the_schedules_and_the_runs_in_flight(nats_url: str) -> None:
    handler = RecordingRunHandler()
    gate = handler.block(deployment_id="slow", method="admit_turn")
    async with instrumented(nats_url, handler) as (provider, reader):
        for dep in ("slow", "quiet", "paused"):
            await provider.apply(daily(dep))
        await provider.apply(Schedule("off", "off", "0 3 * * *", "UTC", False,
                                      RunPayload("agent", "off"), 1))
        await provider.hold("paused", by="alice", reason="vendor outage")
        await provider.until_ready()  # the gauges count from the end of the start-up on
        m = exported(reader)
        schedules = "astrabox.scheduler.schedules"
        assert (point(m, schedules, state="active"), point(m, schedules, state="held"),
                point(m, schedules, state="disabled")) == (2, 1, 1)

        run = await provider.enqueue(EnqueueRequest("slow", Trigger.RUN_NOW))
        await gate.wait_until_blocked()
        assert point(exported(reader), "astrabox.scheduler.runs.in_flight") == 1
        gate.release()

        async def idle() -> bool:
            return point(exported(reader), "astrabox.scheduler.runs.in_flight") == 0

        await eventually(idle, timeout=10)
        assert (await provider.get_run(run.run_id)).state == RunState.DISPATCHED
        await provider.delete("quiet")
        await provider.release("paused", by="alice", reason="vendor back")
        m = exported(reader)
        assert (point(m, schedules, state="active"), point(m, schedules, state="held")) == (2, 0)
    # a stopped provider takes its figures out of the (possibly shared) gauges
    m = exported(reader)
    assert point(m, schedules, state="active") == 0


async def test_the_host_clocks_offset_from_the_stores_is_a_gauge(nats_url: str) -> None:
    """A host clock 5 s ahead: the gauge says +5 s (measured from the presence beats)."""
    async with instrumented(nats_url, RecordingRunHandler(),
                            clock=OffsetClock(5.0)) as (provider, reader):
        await provider.until_ready()

        async def measured() -> bool:
            return abs(point(exported(reader), "astrabox.scheduler.clock.offset") - 5.0) < 0.1

        await eventually(measured, timeout=10)


@pytest.mark.wall_clock
async def test_store_errors_are_counted_by_kind(tmp_path: Path) -> None:
    server = NatsServer(tmp_path / "nats", server_name="metrics-store")
    server.start()
    try:
        async with instrumented(server.url, RecordingRunHandler()) as (provider, reader):
            await provider.apply(daily("dep"))
            assert provider.runtime is not None  # its start-up's reads done: only the probes
            await asyncio.wait_for(provider.runtime.warmed.wait(), 30)  # below count errors
            run = await provider.enqueue(EnqueueRequest("dep", Trigger.RUN_NOW))
            subject = provider.store.names.run_subject("dep", run.run_id)
            # a conditional append on a sequence that is not the subject's last: refused
            with pytest.raises(Conflict):
                await provider.store.append(subject, b"{}", expected_seq=0, msg_id="probe")
            # a read the server refuses for good (no such stream): unavailable at once
            with pytest.raises(SchedulerUnavailable):
                store = provider.store
                await store.retrying("probe", lambda: store.js.stream_info("NO_SUCH_STREAM"))
            m = exported(reader)
            assert point(m, "astrabox.scheduler.store.errors", kind="conflict") == 1
            assert point(m, "astrabox.scheduler.store.errors", kind="unavailable") == 1
            assert point(m, "astrabox.scheduler.store.errors", kind="transient") == 0

            server.kill()  # now every try fails transiently until the budget is spent
            with pytest.raises(SchedulerUnavailable):
                await provider.store.last_seq(provider.store.names.runs_stream)
            m = exported(reader)
            assert point(m, "astrabox.scheduler.store.errors", kind="transient") >= 1
            assert point(m, "astrabox.scheduler.store.errors", kind="unavailable") == 2
            server.restart()
    finally:
        server.stop()


async def test_a_stale_schedule_copy_is_counted_apart_from_conflicts(nats_url: str) -> None:
    """A change decided on this process's copy that another writer made stale is refused
    once and decided again: a stale copy, not a write conflict."""
    async with instrumented(nats_url, RecordingRunHandler()) as (provider, reader):
        await provider.apply(daily("dep"))
        assert provider.runtime is not None
        await provider.runtime.followers[0].stop()  # the copy stops hearing of changes
        async with running(nats_url, provider.settings.prefix) as other:
            await other.hold("dep", by="ops", reason="incident")
        changed = Schedule("dep", "dep", "0 4 * * *", "UTC", True, RunPayload("a", "b"), 2)
        await provider.apply(changed)
        assert provider.runtime is not None
        stored = await provider.runtime.schedules.read("dep")
        assert stored is not None and stored.hold is not None and stored.cron == "0 4 * * *"
        m = exported(reader)
        assert point(m, "astrabox.scheduler.schedules.stale_copies") == 1
        assert point(m, "astrabox.scheduler.store.errors", kind="conflict") == 0
        assert provider.runtime.metrics.snapshot().stale_schedule_copies == 1


async def test_each_replica_reports_its_figures_in_cluster_status(nats_url: str) -> None:
    handler = RecordingRunHandler()
    handler.fail_transiently(1, deployment_id="dep")
    async with instrumented(nats_url, handler) as (provider, _):
        await provider.apply(daily("dep"))
        fired = await provider.fire_due("dep", last_due(datetime.now(UTC)))
        assert fired is not None

        async def dispatched() -> bool:
            return (await provider.get_run(fired.run_id)).state == RunState.DISPATCHED

        await eventually(dispatched, timeout=10)
        nc = await connect_fast(nats_url)
        try:
            status = await AdminClient(nc, provider.settings.prefix, timeout=3.0).cluster_status()
        finally:
            await nc.close()
    [replica] = status.replicas
    assert replica.identity == provider.identity and replica.metrics is not None
    figures = replica.metrics
    assert figures.runs_created == {"schedule": 1}
    assert figures.runs_dispatched == {"schedule": 1}
    assert (figures.dispatch_attempts, figures.dispatch_retries) == (2, 1)
    assert figures.schedules == {"active": 1}
    assert figures.lateness["stored"].count == figures.lateness["started"].count == 1
    assert figures.lateness["stored"].p99 <= figures.lateness["started"].p99


def test_every_instrument_is_documented_for_operators() -> None:
    """docs/operations.md "Metrics": one table row per instrument, with its type and unit."""
    doc = (ROOT / "docs" / "operations.md").read_text("utf-8")
    start = doc.index("## Metrics")
    section = doc[start:doc.find("\n## ", start + 1)]
    rows = {cells[0].strip("` "): [c.strip() for c in cells]
            for line in section.splitlines() if line.startswith("| `")
            for cells in [line.strip("|").split("|")]}
    assert set(rows) == {spec.name for spec in INSTRUMENTS}
    for spec in INSTRUMENTS:
        _, kind, unit, attributes, *_ = rows[spec.name]
        assert kind == spec.kind and unit == f"`{spec.unit}`", spec.name
        assert set(re.findall(r"`(\w+)`", attributes)) == set(spec.attributes), spec.name
