"""One loop renews the leases of every Run a replica holds (runtime/holds.py).

It replaced a renewal task per Run. What it must keep: every held lease renewed by
compare-and-set no later than a third of a lease after the last write, a Run whose key
someone else wrote is marked lost and its dispatch cancelled (and only that one), and no
timer left running once nothing is held.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from nats_scheduler import ManualClock
from nats_scheduler.runtime.holds import Holds
from tests.harness.servers import unique_prefix
from tests.providers import eventually, running

pytestmark = pytest.mark.anyio

NOW = datetime(2031, 5, 6, 2, 0, tzinfo=UTC)
LEASE = 3.0


def _renewal_loops() -> int:
    return sum(task.get_name() == "lease renewals" and not task.done()
               for task in asyncio.all_tasks())


async def test_one_loop_renews_every_held_lease_and_stops_only_the_run_that_lost_its_own(
    nats_url: str,
) -> None:
    clock = ManualClock(NOW)
    async with running(nats_url, unique_prefix(), clock=clock,
                       lease_seconds=LEASE) as provider:
        runtime = provider.runtime
        assert runtime is not None
        leases = runtime.leases
        holds = Holds(leases, clock)
        first, second = await leases.announce("held-a"), await leases.announce("held-b")
        assert first is not None and second is not None
        never = asyncio.Event()
        dispatch_a = asyncio.create_task(never.wait())
        dispatch_b = asyncio.create_task(never.wait())
        loops_before, parked = _renewal_loops(), clock.sleepers
        held_a, held_b = holds.take(first, dispatch_a), holds.take(second, dispatch_b)
        assert _renewal_loops() == loops_before + 1, "one loop for both, not one each"
        await eventually(lambda: clock.sleepers == parked + 1, timeout=5)  # the loop waits

        clock.advance(LEASE / 3)  # a third of a lease: both renewed, by compare-and-set
        await eventually(lambda: held_a.lease.revision != first.revision
                         and held_b.lease.revision != second.revision, timeout=10)
        assert held_a.lease.value.expires_at > first.value.expires_at

        # someone else writes b's key: its next renewal fails, its dispatch is stopped
        await provider.store.leases.put(provider.store.names.lease_key("held-b"), b"taken")
        renewed_a = held_a.lease.revision
        await eventually(lambda: clock.sleepers == parked + 1, timeout=5)
        clock.advance(LEASE / 3)
        await eventually(lambda: dispatch_b.done() and held_a.lease.revision != renewed_a,
                         timeout=10)
        assert dispatch_b.cancelled() and held_b.lost
        assert not dispatch_a.done() and not held_a.lost

        holds.drop(held_b)
        assert _renewal_loops() == loops_before + 1
        holds.drop(held_a)  # nothing held: no timer left running
        await eventually(lambda: _renewal_loops() == loops_before, timeout=5)
        dispatch_a.cancel()
