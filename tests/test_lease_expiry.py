"""Lease expiry is judged on the reader's elapsed time, never by comparing wall clocks.

A reader whose clock runs an hour ahead, or a holder whose written ``expires_at`` is already
in the past, must not make a lease that is being renewed look expired; a lease whose
revision stopped changing for a lease length is expired whatever the clocks say
(tests/faults/test_faults_clock.py shows it across processes).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from nats_scheduler import ManualClock
from nats_scheduler.jetstream.connection import connect
from nats_scheduler.jetstream.leases import Leases
from nats_scheduler.jetstream.store import Store
from tests.harness.clocks import ManualElapsed
from tests.harness.servers import unique_prefix
from tests.providers import settings

pytestmark = pytest.mark.anyio

LEASE = 2.0


@pytest.fixture
async def store(nats_url: str) -> AsyncIterator[Store]:
    config = settings(nats_url, unique_prefix())
    store = Store(await connect(config, "lease-test"), config)
    await store.ensure()
    try:
        yield store
    finally:
        await store.close()


async def test_only_an_unrenewed_revision_expires_whatever_the_clocks_say(store: Store) -> None:
    now = datetime.now(UTC)
    holder = Leases(store, ManualClock(now - timedelta(hours=1)), "holder", LEASE)
    elapsed = ManualElapsed()
    reader = Leases(store, ManualClock(now + timedelta(hours=1)), "reader", LEASE,
                    elapsed=elapsed)
    acquired = await holder.acquire("r1")
    assert acquired is not None
    lease, _ = acquired

    current = await reader.current("r1")
    assert current is not None
    # the reader's wall clock is two hours past the holder's expires_at: not expired
    assert current[1].expires_at < datetime.now(UTC)
    assert not reader.expired(current[1])
    assert await reader.acquire("r1") is None

    elapsed.value += LEASE * 0.9
    renewed = await holder.renew(lease)  # a renewal changes the revision: observed afresh
    assert renewed is not None
    elapsed.value += LEASE * 0.9
    current = await reader.current("r1")
    assert current is not None and not reader.expired(current[1])

    elapsed.value += LEASE  # unread for a whole lease (the store down): counts from now
    current = await reader.current("r1")
    assert current is not None and not reader.expired(current[1])
    for _ in range(3):  # read as a sweep reads; no renewal for a whole lease: expired
        elapsed.value += LEASE * 0.4
        current = await reader.current("r1")
    assert current is not None and reader.expired(current[1])
    taken = await reader.acquire("r1")
    assert taken is not None and taken[1] == "holder"
    assert await holder.renew(renewed) is None  # the old holder's CAS now fails


async def test_open_runs_reads_every_open_key_and_drops_closed_ones(
    store: Store,
) -> None:
    """Start-up finds the unfinished Runs by this read: it must end after the bucket's last
    key, not at a guess that nothing is pending (nats-py's watch could end before its first
    entry arrived, and a restarted replica then knew no open Run)."""
    leases = Leases(store, ManualClock(datetime.now(UTC)), "opener", LEASE)
    run_ids = [f"r{i:05d}" for i in range(1_500)]
    announced = await leases.announce_many(run_ids)
    assert all(not isinstance(a, Exception) and a is not None for a in announced)
    await leases.forget(run_ids[3])  # closed (purged, with a marker): not open any more
    renewed = await leases.renew(announced[0])  # type: ignore[arg-type]
    assert renewed is not None  # moved to the stream's end: read once, with its new value
    released = Leases(store, ManualClock(datetime.now(UTC)), "opener", LEASE)
    await released.release(renewed, finished=False)  # given back: still open, holder FREE

    found = await leases.open_runs()

    assert sorted(found) == sorted(r for r in run_ids if r != run_ids[3])
    assert found[run_ids[0]].holder == ""
    assert {v.holder for k, v in found.items() if k != run_ids[0]} == {"opener"}


async def test_open_runs_of_an_empty_bucket_is_empty(store: Store) -> None:
    leases = Leases(store, ManualClock(datetime.now(UTC)), "opener", LEASE)
    assert await leases.open_runs() == {}
    await leases.announce("only")
    await leases.forget("only")
    assert await leases.open_runs() == {}
