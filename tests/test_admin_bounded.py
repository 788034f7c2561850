"""Admin answers that grow with the Schedules or Runs, past the server's largest message.

A server with ``max_payload: 65536``: a health answer listing 3,000 silent stops, or a page
of Runs with 20 KB prompts, would not fit one message, and a reply that does not fit is
never delivered. The service cuts each growing list to fit and says how long it was
(``health``, ``cluster.status``, ``replica.status``), or ends a page early and continues it
(``runs.list``). Requests go to the service itself, so a fallback read cannot stand in.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec
import pytest

from nats_scheduler import ManualClock
from nats_scheduler.admin.api import (
    ClusterStatus,
    Health,
    LeaseView,
    ReplicaView,
    RunList,
    StoreHealth,
)
from nats_scheduler.admin.bounded import bounded_cluster_status, bounded_replica
from nats_scheduler.admin.service import start_admin_service
from nats_scheduler.names import Names
from nats_scheduler.natsserver.process import NatsServer
from nats_scheduler.provider import NatsSchedulerProvider
from nats_scheduler.seam import EnqueueRequest, Run, RunPayload, Schedule, Trigger
from tests.harness.servers import connect_fast, unique_prefix
from tests.providers import running

pytestmark = pytest.mark.anyio

MAX_PAYLOAD = 65536
T0 = datetime(2031, 7, 1, 9, 0, 30, tzinfo=UTC)


@pytest.fixture
def small_server(tmp_path: Path) -> Iterator[NatsServer]:
    server = NatsServer(tmp_path / "small", extra_config=f"max_payload: {MAX_PAYLOAD}").start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
async def provider(small_server: NatsServer) -> AsyncIterator[NatsSchedulerProvider]:
    async with running(small_server.url, unique_prefix(), clock=ManualClock(T0),
                       max_active_schedules=5000) as started:
        yield started


async def request(url: str, prefix: str, endpoint: str, body: bytes = b"{}") -> bytes:
    nc = await connect_fast(url)
    try:
        reply = await nc.request(f"{Names(prefix).admin_prefix}.{endpoint}", body, timeout=10)
    finally:
        await nc.close()
    assert len(reply.data) <= MAX_PAYLOAD
    assert b'"error"' not in reply.data[:20], reply.data[:300]
    return reply.data


async def test_health_with_more_silent_stops_than_one_message_holds_counts_them(
    provider: NatsSchedulerProvider, small_server: NatsServer,
) -> None:
    wanted = [Schedule(f"silent-stop-deployment-{i:05d}", f"s{i}", "* * * * *", "UTC", True,
                       RunPayload("agent", "p"), 1) for i in range(3000)]
    await provider.reconcile(wanted)
    assert len(msgspec.json.encode([s.deployment_id for s in wanted])) > MAX_PAYLOAD
    later = ManualClock(T0)  # the service's clock; the provider's never moves (no firing)
    await start_admin_service(provider, clock=later)
    later.advance(timedelta(minutes=10))
    health = msgspec.json.decode(await request(small_server.url, provider.settings.prefix,
                                               "health"), type=Health)
    assert health.silent_stops_total == 3000
    assert 0 < len(health.silent_stops) < 3000
    assert set(health.silent_stops) <= {s.deployment_id for s in wanted}
    assert health.failed_runs_total == health.stuck_runs_total == 0


async def test_a_page_of_large_runs_ends_early_and_continues(small_server: NatsServer) -> None:
    clock = ManualClock(T0)
    async with running(small_server.url, unique_prefix(), clock=clock) as provider:
        prompt = "p" * 20_000  # six Runs of 20 KB: twice the server's largest message
        await provider.apply(Schedule("big", "big", "0 3 * * *", "UTC", True,
                                      RunPayload("agent", prompt), 1))
        made = []
        for _ in range(6):
            clock.advance(1)  # distinct creation times: the page order is theirs
            made.append(await provider.enqueue(EnqueueRequest("big", Trigger.RUN_NOW)))
        await provider.wait_idle(timeout=30)
        await _follow_pages(provider, small_server, made)


async def _follow_pages(provider: NatsSchedulerProvider, small_server: NatsServer,
                        made: list[Run]) -> None:
    seen: list[str] = []
    before: str | None = None
    pages = 0
    while True:
        body = msgspec.json.encode({"deployment_id": "big", "limit": 50, "before": before})
        page = msgspec.json.decode(await request(small_server.url, provider.settings.prefix,
                                                 "runs.list", body), type=RunList)
        pages += 1
        seen.extend(r.run_id for r in page.runs)
        if page.next_before is None:
            break
        before = page.next_before
    expected = sorted(made, key=lambda r: (r.created_at, r.run_id), reverse=True)
    assert seen == [r.run_id for r in expected]
    assert pages > 1


async def test_cluster_status_names_its_counts(
    provider: NatsSchedulerProvider, small_server: NatsServer,
) -> None:
    status = msgspec.json.decode(await request(small_server.url, provider.settings.prefix,
                                               "cluster.status"), type=ClusterStatus)
    assert status.leases_total == len(status.leases) == 0
    assert status.in_flight_total == 0
    assert [r.in_flight_total for r in status.replicas] == [0]


def test_growing_lists_are_cut_to_the_budget_and_counted() -> None:
    """The cut itself, at sizes a test server cannot reach quickly (a lease per Run)."""
    leases = [LeaseView(run_id=f"run-{i:06d}-" + "x" * 40, holder="replica-a",
                        expires_at=T0) for i in range(20_000)]
    ids = [lease.run_id for lease in leases]
    replica = ReplicaView(identity="replica-a", in_flight=ids)
    status = ClusterStatus(replicas=[bounded_replica(replica, 32_768)], leases=leases,
                           in_flight=ids, store=StoreHealth(reachable=True))
    assert len(msgspec.json.encode(status)) > 1024 * 1024  # past the default 1 MB too
    cut = bounded_cluster_status(status, 32_768)
    assert len(msgspec.json.encode(cut)) <= 2 * 32_768
    assert cut.leases_total == cut.in_flight_total == 20_000
    assert cut.leases == leases[:len(cut.leases)] and 0 < len(cut.leases) < 20_000
    assert cut.replicas[0].in_flight_total == 20_000
    assert 0 < len(cut.replicas[0].in_flight) < 20_000

