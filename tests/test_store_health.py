"""The store health operators read (``cluster.status``): the history retention in force.

The retention is the index stream's limits (docs/configuration.md, "History retention"), so
the admin service and the store fallback both read it from the server: it follows a provider
started with other settings, and it is unknown (not made up) where no index exists yet.
"""

from __future__ import annotations

import pytest
from nats.js.api import StreamConfig

from nats_scheduler.admin.api import StoreHealth
from nats_scheduler.admin.client import AdminClient
from nats_scheduler.admin.reader import StoreReader
from nats_scheduler.admin.service import start_admin_service
from nats_scheduler.jetstream.store import Store
from nats_scheduler.jetstream.store_reads import Retention, retention_of
from nats_scheduler.settings import NatsSettings
from tests.harness.servers import connect_fast, unique_prefix
from tests.providers import eventually, running

pytestmark = pytest.mark.anyio


async def served(client: AdminClient) -> StoreHealth:
    """The store health as the admin service answers it.

    Polled: a request sent right after a service subscribed may find no responder (nats-py's
    flush can overtake the subscriptions it should follow), and would read the store.
    """

    async def by_service() -> StoreHealth | None:
        store = (await client.cluster_status()).store
        return store if client.last_source == "service" else None

    return await eventually(by_service, timeout=10)


async def served_by_a_provider(client: AdminClient, url: str, prefix: str,
                               **settings: object) -> StoreHealth:
    """The store health as the admin service of a provider started with ``settings``
    answers it; the service and the provider are stopped afterwards."""
    async with running(url, prefix, **settings) as provider:
        service = await start_admin_service(provider)
        try:
            return await served(client)
        finally:
            await service.stop()


def test_retention_of_reads_the_limits_nats_reports() -> None:
    assert retention_of(StreamConfig(max_age=7.5 * 86_400, max_msgs_per_subject=250)) == \
        Retention(days=7.5, runs=250)
    # 0 and -1 are NATS's "no limit"
    assert retention_of(StreamConfig(max_age=0, max_msgs_per_subject=-1)) == Retention(None, None)
    assert retention_of(StreamConfig()) == Retention(None, None)


async def test_service_and_store_report_the_retention_of_the_index_stream(nats_url: str
                                                                          ) -> None:
    prefix = unique_prefix()
    nc = await connect_fast(nats_url)
    client = AdminClient(nc, prefix, timeout=5.0)
    try:
        first = await served_by_a_provider(client, nats_url, prefix, retention_days=7.5,
                                           retention_runs=250)
        # A provider with other settings updates the index: what is shown follows the server.
        second = await served_by_a_provider(client, nats_url, prefix, retention_days=30.0,
                                            retention_runs=40)
        fallback = (await client.cluster_status()).store
        assert client.last_source == "store"
    finally:
        await nc.close()
    assert (first.retention_days, first.retention_runs) == (7.5, 250)
    assert (second.retention_days, second.retention_runs) == (30.0, 40)
    assert (fallback.retention_days, fallback.retention_runs) == (30.0, 40)


async def test_a_store_without_the_index_reports_no_retention(nats_url: str) -> None:
    """Streams of a version from before the index: health as before, retention unknown."""
    prefix = unique_prefix()
    nc = await connect_fast(nats_url)
    try:
        settings = NatsSettings(url=nats_url, prefix=prefix)
        schedules, runs, index = Store(nc, settings).stream_configs()
        assert index.name == f"{prefix}_RUNINDEX"
        for config in (schedules, runs):
            await nc.jetstream().add_stream(config)
        health = await StoreReader(nc, prefix, timeout=2.0).store_health()
    finally:
        await nc.close()
    assert health.reachable and health.detail == "0 schedule events, 0 run events"
    assert (health.retention_days, health.retention_runs) == (None, None)
