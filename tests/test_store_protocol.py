"""The store behind its Protocols, and the lease writes behind the store's failover watch.

The logs, the history, the followers and the leases see the store only through the
Protocols of ``jetstream/event_store.py``; the :class:`Store` must offer every member they
name, with the same parameters. The lease writes go through the store
(``publish_grouped``: the writes of one turn of the event loop in one atomic batch): sent
once, so a renewal on a server that stopped answering fails after one publish timeout, not
after the store's retry budget, and what it saw counts for failing over
(``jetstream/retry.py``).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import nats.errors
import nats.js.errors
import pytest

from nats_scheduler import ManualClock
from nats_scheduler.jetstream import event_store
from nats_scheduler.jetstream.connection import connect
from nats_scheduler.jetstream.leases import Leases
from nats_scheduler.jetstream.store import Store
from nats_scheduler.natsserver.process import NatsServer
from tests.harness.servers import unique_prefix
from tests.providers import settings

pytestmark = pytest.mark.anyio

PROTOCOLS = (event_store.EventLog, event_store.HistoryStore, event_store.FollowedStore,
             event_store.LeaseStore, event_store.EventStore)


def _members(protocol: type) -> dict[str, object]:
    """The members a Protocol declares itself (its bases are checked on their own)."""
    return {name: value for name, value in vars(protocol).items()
            if not name.startswith("_") and (callable(value) or isinstance(value, property))}


@pytest.fixture
async def store(fresh_nats_server: NatsServer) -> AsyncIterator[Store]:
    config = settings(fresh_nats_server.url, unique_prefix(), store_retry_seconds=10.0)
    store = Store(await connect(config, "protocol-test"), config)
    await store.ensure()
    try:
        yield store
    finally:
        fresh_nats_server.resume()
        await store.close()


@pytest.mark.parametrize("protocol", PROTOCOLS, ids=lambda p: p.__name__)
async def test_the_store_offers_every_member_its_protocols_name(
    protocol: type, store: Store
) -> None:
    assert _members(protocol), f"{protocol.__name__} declares nothing"
    for name, declared in _members(protocol).items():
        assert hasattr(store, name), f"Store has no {name} ({protocol.__name__})"
        if isinstance(declared, property):
            continue
        wanted = list(inspect.signature(declared).parameters)[1:]  # without self
        actual = list(inspect.signature(getattr(store, name)).parameters)
        assert actual == wanted, f"Store.{name}{actual} != {protocol.__name__}.{name}{wanted}"


async def test_a_renewal_on_a_silent_server_fails_after_one_publish_and_is_noted(
    store: Store, fresh_nats_server: NatsServer
) -> None:
    leases = Leases(store, ManualClock(datetime.now(UTC)), "holder", 2.0)
    acquired = await leases.acquire("r1")
    assert acquired is not None
    lease, _ = acquired
    renewed = await leases.renew(lease)  # through the store: answered
    assert renewed is not None and renewed.revision > lease.revision
    assert store._retry._unanswered_since is None

    fresh_nats_server.pause()
    deadline = time.monotonic() + 5.0
    while fresh_nats_server.healthy():  # SIGSTOP is delivered asynchronously
        assert time.monotonic() < deadline, "the paused server still answers"
    began = time.monotonic()
    with pytest.raises(nats.errors.TimeoutError):  # the client's own error, as before
        await leases.renew(renewed)
    waited = time.monotonic() - began
    # one publish timeout (2 s, swept every 0.25 s), not the store's retry budget (10 s)
    assert waited < 3.0, f"the renewal waited {waited:.2f} s"
    assert store._retry._unanswered_since is not None  # counts towards failing over

    fresh_nats_server.resume()
    deadline = time.monotonic() + 10.0
    while True:  # the server answers again: the next renewal settles the lease, once
        try:
            again = await leases.renew(renewed)
            break
        except (nats.errors.TimeoutError, nats.js.errors.Error):
            assert time.monotonic() < deadline, "the resumed server never answered"
    # the lost one was stored (its CAS took the revision) or not: either way answered now
    assert again is None or again.revision > renewed.revision
    # an answer to a one-shot write does not clear the watch (a server that answers some
    # requests while it cannot store must still be left): only the retried operations do
    await store.last_seq(store.names.runs_stream)
    assert store._retry._unanswered_since is None


async def test_a_lost_compare_and_set_is_not_a_failure(store: Store) -> None:
    holder = Leases(store, ManualClock(datetime.now(UTC)), "holder", 2.0)
    other = Leases(store, ManualClock(datetime.now(UTC)), "other", 2.0)
    acquired = await holder.acquire("r2")
    assert acquired is not None
    lease, _ = acquired
    assert await other.acquire("r2") is None  # live: not taken
    renewed = await holder.renew(lease)
    assert renewed is not None
    assert store._retry._unanswered_since is None
    assert await holder.renew(lease) is None  # the stale revision loses its CAS
    assert store._retry._unanswered_since is None  # a refusal is an answer, not a failure


async def test_renewals_made_together_share_one_atomic_batch_and_keep_their_own_answers(
    store: Store
) -> None:
    # A herd's waiting Runs renew their lapsed leases as slots free up, many in one turn of
    # the event loop: one atomic batch (one fsync on `sync_interval: always`), not one
    # acknowledged publish each. A lost compare-and-set among them refuses the batch; it is
    # resent one by one, so every renewal still gets its own answer.
    leases = Leases(store, ManualClock(datetime.now(UTC)), "holder", 5.0)
    held = []
    for i in range(80):  # more than ATOMIC_MIN (64)
        acquired = await leases.acquire(f"herd-{i}")
        assert acquired is not None
        held.append(acquired[0])
    batches = store.acks.batches_atomic
    renewed = await asyncio.gather(*(leases.renew(lease) for lease in held))
    assert all(r is not None and r.revision > lease.revision
               for r, lease in zip(renewed, held, strict=True))
    assert store.acks.batches_atomic == batches + 1

    splits = store.acks.batches_split
    stale = held[7]  # its revision was just replaced: this renewal must lose
    again = await asyncio.gather(*(leases.renew(lease) for lease in [*renewed[:70], stale]))
    assert again[-1] is None
    assert all(r is not None for r in again[:-1])
    assert store.acks.batches_split == splits + 1


@pytest.mark.parametrize("sync_always, atomic", [(False, 0), (True, 1)])
async def test_a_server_declared_to_sync_every_write_gets_atomic_batches_from_sixteen(
    fresh_nats_server: NatsServer, sync_always: bool, atomic: int,
) -> None:
    # ASTRABOX_NATS_SERVER_SYNC_ALWAYS: on such a server a plain publish waits for a sync
    # of its own, so 20 writes made together leave as one atomic batch; on a server that
    # does not, a batch that small costs more than 20 pipelined publishes (jetstream/acks.py).
    config = settings(fresh_nats_server.url, unique_prefix(), server_sync_always=sync_always)
    store = Store(await connect(config, "sync-test"), config)
    await store.ensure()
    try:
        leases = Leases(store, ManualClock(datetime.now(UTC)), "holder", 5.0)
        held = []
        for i in range(20):
            acquired = await leases.acquire(f"small-{i}")
            assert acquired is not None
            held.append(acquired[0])
        batches = store.acks.batches_atomic
        renewed = await asyncio.gather(*(leases.renew(lease) for lease in held))
        assert all(r is not None for r in renewed)
        assert store.acks.batches_atomic == batches + atomic
    finally:
        await store.close()
