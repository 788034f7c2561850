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
from tests.harness.servers import unique_prefix
from tests.providers import settings

pytestmark = pytest.mark.anyio

LEASE = 2.0


class Elapsed:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.value = 100.0

    def __call__(self) -> float:
        return self.value


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
    elapsed = Elapsed()
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

    elapsed.value += LEASE  # no renewal for a whole lease: expired, taken over by CAS
    current = await reader.current("r1")
    assert current is not None and reader.expired(current[1])
    taken = await reader.acquire("r1")
    assert taken is not None and taken[1] == "holder"
    assert await holder.renew(renewed) is None  # the old holder's CAS now fails
