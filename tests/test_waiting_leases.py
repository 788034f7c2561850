"""A Run that waited for a lease slot past its lease is never started on that lease.

A replica leases at most ``IN_FLIGHT_MIN`` Runs at once; the Runs of a herd beyond that wait,
their creator's lease unrenewed, for minutes on one replica. Measured before this was fixed
(bench/firing.py --herd, 100,000 due in one minute): 23 % of the Runs had ``start_session``
called twice, once on the expired lease and once after the sweep took the Run back.

Here the slots are filled by Runs whose ``start_session`` the handler holds, three more wait,
and the clock moves past their leases. Then one is taken over by another replica, one loses
its key (as its TTL would end it), one is left alone. Once the held calls go on, the first is
never started here, and the other two are started exactly once each.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import anyio
import pytest

from nats_scheduler import ManualClock
from nats_scheduler.core.events import RunClaimed, decode_run_event
from nats_scheduler.jetstream.leases import Lease, Leases
from nats_scheduler.names import scheduled_run_id
from nats_scheduler.provider import NatsSchedulerProvider
from nats_scheduler.runtime.dispatcher import IN_FLIGHT_MIN
from nats_scheduler.seam import EnqueueRequest, RunPayload, RunState, Schedule, Trigger
from nats_scheduler.testing.handler import RecordingRunHandler
from tests.harness.clocks import ManualElapsed
from tests.harness.servers import unique_prefix
from tests.providers import eventually, running

pytestmark = pytest.mark.anyio

DUE = datetime(2031, 5, 6, 3, 0, tzinfo=UTC)
LEASE = 2.0
WAITING = 3


def schedule(deployment_id: str) -> Schedule:
    return Schedule(deployment_id, deployment_id, "0 3 * * *", "UTC", True,
                    RunPayload("t", deployment_id), 1)


@pytest.mark.timeout(120)
async def test_a_run_whose_lease_ran_out_waiting_for_a_slot_starts_once_or_not_here(
    nats_url: str,
) -> None:
    prefix = unique_prefix()
    handler = RecordingRunHandler()
    held = handler.block(method="start_session")
    clock = ManualClock(DUE + timedelta(seconds=1))
    deployments = [f"herd-{i}" for i in range(IN_FLIGHT_MIN + WAITING)]
    # one handler call at a time: the slots fill with Runs waiting for it
    async with running(nats_url, prefix, handler, clock=clock, lease_seconds=LEASE,
                       max_concurrent_dispatch=1, call_timeout=60.0) as provider:
        for deployment in deployments:
            await provider.apply(schedule(deployment))
        await provider.fire_many([(deployment, DUE) for deployment in deployments])
        dispatcher = provider.dispatcher
        assert dispatcher is not None
        await eventually(lambda: len(dispatcher.in_flight) == IN_FLIGHT_MIN, timeout=30)
        await held.wait_until_blocked(1)
        # the Runs beyond the slots wait as queue entries, not as tasks (a herd's memory)
        names = [t.get_name() for t in asyncio.all_tasks()]
        assert sum(name.startswith("dispatch ") for name in names) == IN_FLIGHT_MIN
        assert dispatcher.tasks == IN_FLIGHT_MIN + WAITING
        everyone = {scheduled_run_id(d, DUE) for d in deployments}
        taken, keyless, untouched = sorted(everyone - set(dispatcher.in_flight))

        clock.advance(timedelta(seconds=LEASE * 2))  # the waiting Runs' leases ran out
        elapsed = ManualElapsed()
        other = Leases(provider.store, clock, "other-replica", LEASE, elapsed=elapsed)
        for _ in range(4):  # looked at as a sweep looks, unrenewed for over a lease
            assert await other.current(taken) is not None
            elapsed.value += LEASE * 0.4
        acquired = await other.acquire(taken)
        assert acquired is not None
        await other.forget(keyless)  # its key is gone, as when its TTL ended
        async with anyio.create_task_group() as group:
            group.start_soon(keep_renewing, other, acquired[0])  # a live holder renews
            held.release()
            await settled(provider, handler, taken, keyless, untouched)
            group.cancel_scope.cancel()


async def keep_renewing(leases: Leases, lease: Lease) -> None:
    """The other replica holding its Run: renewed every quarter of the lease, as a live one."""
    while True:
        renewed = await leases.renew(lease)
        assert renewed is not None, "the other replica lost its Run"
        lease = renewed
        await anyio.sleep(LEASE / 4)


async def settled(provider: NatsSchedulerProvider, handler: RecordingRunHandler,
                  taken: str, keyless: str, untouched: str) -> None:
    """Once every Run here is dispatched: each started once, and none on a lost lease."""
    await eventually(lambda: all(handler.calls_for(run, "admit_turn")
                                 for run in (keyless, untouched)), timeout=60)
    await provider.wait_idle(timeout=30)
    for run_id in (keyless, untouched):
        assert len(handler.calls_for(run_id, "start_session")) == 1, run_id
        assert (await provider.get_run(run_id)).state is RunState.DISPATCHED
    assert handler.calls_for(taken, "start_session") == []
    assert (await provider.get_run(taken)).state is RunState.DISPATCHING

    # the Run left alone kept its creator's claim; the keyless one was claimed again
    assert RunClaimed not in await event_types(provider, untouched)
    assert RunClaimed in await event_types(provider, keyless)


async def event_types(provider: NatsSchedulerProvider, run_id: str) -> list[type]:
    """The types of a Run's stored events, in order (a reader of the Run's subject)."""
    store = provider.store
    record = await provider.get_run(run_id)
    subject = store.names.run_subject(record.deployment_id, run_id)
    found: list[type] = []
    sub = await store.js.subscribe(subject, ordered_consumer=True)
    try:
        while True:
            try:
                msg = await sub.next_msg(timeout=1.0)
            except TimeoutError:
                return found
            found.append(type(decode_run_event(msg.data)))
    finally:
        await sub.unsubscribe()


@pytest.mark.timeout(120)
async def test_a_replica_with_every_slot_taken_leaves_unheld_runs_to_the_others(
    nats_url: str,
) -> None:
    """The sweep takes an unheld Run only into a free lease slot: a busy replica leaves it
    (to an idle one, or to itself once a slot frees), instead of queueing it to expire."""
    prefix = unique_prefix()
    handler = RecordingRunHandler()
    held = handler.block(method="start_session")
    clock = ManualClock(DUE + timedelta(seconds=1))
    deployments = [f"busy-{i}" for i in range(IN_FLIGHT_MIN + 1)]
    async with running(nats_url, prefix, handler, clock=clock, lease_seconds=LEASE,
                       max_concurrent_dispatch=1, call_timeout=60.0) as provider:
        for deployment in [*deployments, "released"]:
            await provider.apply(schedule(deployment))
        await provider.fire_many([(deployment, DUE) for deployment in deployments])
        dispatcher = provider.dispatcher
        assert dispatcher is not None
        await eventually(lambda: len(dispatcher.in_flight) == IN_FLIGHT_MIN, timeout=30)

        stopped = RecordingRunHandler()
        stopped.hang(method="start_session")
        async with running(nats_url, prefix, stopped) as elsewhere:  # stops: hands it back
            released = (await elsewhere.enqueue(request("released"))).run_id
            await eventually(lambda: stopped.calls_for(released, "start_session"), timeout=30)

        def handed_back() -> bool:  # claimed elsewhere (an attempt), then released
            record = provider.ledger.get(released)
            return (record is not None and record.attempts >= 1
                    and record.state is RunState.PENDING and record.holder is None)

        await eventually(handed_back, timeout=30)
        assert await dispatcher.sweep_once() == 0, "every slot taken: nothing swept"

        held.release()

        async def swept_and_started() -> bool:
            await dispatcher.sweep_once()
            return bool(handler.calls_for(released, "admit_turn"))

        await eventually(swept_and_started, timeout=60)
        await provider.wait_idle(timeout=30)
        assert len(handler.calls_for(released, "start_session")) == 1
        record = provider.ledger.get(released)
        assert record is not None and record.state is RunState.DISPATCHED


def request(deployment_id: str) -> EnqueueRequest:
    return EnqueueRequest(deployment_id, Trigger.RUN_NOW)
