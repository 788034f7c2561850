"""Three nodes, three replicas of everything: races, a leader killed, a node cut off.

- Concurrent conditional writers on a clustered stream: nats-server answers the loser of a
  race with a publish still in flight with error 10164, not 10071. Until
  ``jetstream/errors.py`` mapped 10164 to a conflict, replicas applying the same Schedule at
  once (AstraBox runs ``reconcile`` on every replica at start) got SchedulerUnavailable.
- The Run stream's leader SIGKILLed during a burst (then restarted), and a node partitioned
  from the others through the loopback proxy (then healed), with replica processes firing
  and asking for Runs throughout: every acknowledged Run is there once and finishes.

Each ends with the invariant checker.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from nats_scheduler.provider import NatsSchedulerProvider
from nats_scheduler.seam import EnqueueRequest, RunPayload, RunState, Schedule, Trigger
from tests.harness.cluster import NatsCluster
from tests.harness.proxy import TcpProxy, links_of, partitionable_cluster
from tests.harness.replicas import ReplicaSet, replica_set
from tests.harness.scenario import (
    FAST_REPLICA,
    LEASE,
    Burst,
    assert_clean_after_fault,
    assert_clean_store,
    far_dues,
    schedule,
    wait_converged,
)
from tests.harness.servers import stream_leader, unique_prefix
from tests.harness.shared_handler import SqliteRunHandler
from tests.providers import eventually, running

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

CLUSTERED: dict[str, object] = {**FAST_REPLICA, "replicas": 3, "store_retry_seconds": 15.0}
# How long the store may stall after a partition heals: a leader election (4.5-8 s measured
# when a leader dies; callers retry for 10 s) plus one lease, after which a holder that could
# not renew is rightly taken over.
HEAL_SETTLE = 10.0 + LEASE


# ----------------------------------------------------------------------------- races (10164)


async def test_concurrent_writers_on_three_nodes_get_conflicts_never_unavailable(
    nats_cluster: NatsCluster, handler: SqliteRunHandler,
) -> None:
    prefix = unique_prefix()
    dues = far_dues(6)
    async with contextlib.AsyncExitStack() as stack:
        providers: list[NatsSchedulerProvider] = [
            await stack.enter_async_context(running(
                node.url, prefix, SqliteRunHandler(handler.path, process=f"p{i}"),
                **{**CLUSTERED, "lease_seconds": LEASE}))
            for i, node in enumerate(nats_cluster.nodes)]

        def version(v: int) -> Schedule:
            return Schedule("race", "race", "*/5 * 29 2 *", "UTC", True,
                            RunPayload("t", f"v{v}"), v)

        # every replica applies every version at once: each write races the others
        for v in range(1, 9):
            await asyncio.gather(*(p.apply(version(v + i % 2)) for i, p in
                                   enumerate(providers)))
        # ... and fires the same due times and asks for the same Runs now at once
        results = await asyncio.gather(
            *(p.fire_due("race", due) for due in dues for p in providers),
            *(p.enqueue(EnqueueRequest("race", Trigger.RUN_NOW, request_id=f"r{n}"))
              for n in range(3) for p in providers))
        assert all(r is not None for r in results)
        fired = {(r.due_at, r.run_id) for r in results[:len(dues) * 3]}  # type: ignore[union-attr]
        assert len(fired) == len(dues)  # one Run per due time across the three replicas
        for p in providers:
            record = p.schedules.get("race")
            assert record is not None and record.version == 9

        async def all_finished() -> bool:
            runs = await providers[0].list_runs("race", limit=100)
            return len(runs) == len(dues) + 3 and all(
                r.state == RunState.DISPATCHED for r in runs)

        await eventually(all_finished, timeout=30)
    await assert_clean_store(nats_cluster.urls, prefix, handler=handler,
                             expected={("race", due) for due in dues})


# ----------------------------------------------------------------------------- leader killed


@pytest.fixture
def replica_url(nats_cluster: NatsCluster) -> str:
    """The ``replicas`` connect to the whole cluster (they may fail over to any node)."""
    return nats_cluster.urls


@pytest.fixture
def replica_settings() -> dict[str, object]:
    """Three replicas of everything, and a store retry budget that outlasts an election."""
    return CLUSTERED


async def test_runs_leader_killed_during_a_burst_loses_and_doubles_nothing(
    nats_cluster: NatsCluster, replicas: ReplicaSet, handler: SqliteRunHandler,
) -> None:
    spawned = await replicas.spawn("a", "b", "c")
    await spawned[0].send("apply", schedule=schedule("burst"))
    burst = Burst("burst")
    task = asyncio.create_task(burst.waves(spawned, far_dues(24), per_wave=4))
    await eventually(lambda: len(burst.expected) >= 8, timeout=30)
    victim = await stream_leader(nats_cluster, f"{replicas.prefix}_RUNS")
    killed_at = datetime.now(UTC)
    await asyncio.to_thread(nats_cluster.kill, victim)
    await asyncio.wait_for(task, 120)
    await asyncio.to_thread(nats_cluster.restart, victim)
    settled_at = datetime.now(UTC)

    assert burst.errors == [], burst.errors[:3]  # a quorum remained: nothing may fail
    assert len(burst.expected) == 24 and len(burst.enqueued) == 6
    await wait_converged(nats_cluster.url_list, replicas.prefix)
    # replicas whose server died could not renew leases until they reconnected elsewhere
    await assert_clean_after_fault(replicas, handler, fault=(killed_at, settled_at),
                                   expected=burst.expected)


# ----------------------------------------------------------------------------- partition


@pytest.fixture
def proxied_cluster(tmp_path: Path) -> Iterator[tuple[NatsCluster, TcpProxy]]:
    proxy = TcpProxy()
    cluster = partitionable_cluster(tmp_path / "cluster", proxy)
    try:
        cluster.start()
        yield cluster, proxy
    finally:
        cluster.stop()
        proxy.close()


async def test_a_node_partitioned_and_healed_loses_and_doubles_nothing(
    proxied_cluster: tuple[NatsCluster, TcpProxy], tmp_path: Path, handler: SqliteRunHandler,
) -> None:
    """Node 0 is cut off from the other two. Replica a was given node 0's address only: its
    server stays reachable but answers that it lost the quorum, so a must connect to another
    node of the cluster (it learnt their addresses from node 0) rather than stay unavailable
    for the whole partition."""
    cluster, proxy = proxied_cluster
    async with replica_set(cluster.urls, tmp_path, handler.path, lease_seconds=LEASE,
                           settings=CLUSTERED) as rs:
        replicas = [await rs.add("a", url=cluster.nodes[0].url).start(),
                    *await rs.spawn("b", "c")]
        await replicas[0].send("apply", schedule=schedule("split"))
        burst = Burst("split")
        task = asyncio.create_task(burst.waves(replicas, far_dues(24), per_wave=4))
        await eventually(lambda: len(burst.expected) >= 8, timeout=30)
        cut_at = datetime.now(UTC)
        proxy.cut(*links_of(0))
        await eventually(lambda: len(burst.expected) >= 16, timeout=60)
        proxy.heal(*links_of(0))
        await asyncio.wait_for(task, 120)
        healed_at = datetime.now(UTC)

        assert burst.errors == [], burst.errors[:3]
        assert len(burst.expected) == 24 and len(burst.enqueued) == 6
        await wait_converged(cluster.url_list, rs.prefix)
        # replicas on the cut-off node could not renew leases until they failed over; and
        # the heal itself may stall the store for an election (the rejoining node's groups
        # re-elect: every holder's renewals wait, wherever it is connected), so the fault
        # lasts until HEAL_SETTLE after the heal
        settled_at = healed_at + timedelta(seconds=HEAL_SETTLE)
        await assert_clean_after_fault(rs, handler, fault=(cut_at, settled_at),
                                       expected=burst.expected)
