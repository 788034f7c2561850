"""The provider-neutral contract suite, bound to the nats provider (docs/contract.md).

Each test gets a fresh store: a private prefix (its own streams and lease table) on the
session's real nats-server.
"""

from __future__ import annotations

import pathlib
from datetime import datetime

import pytest

from nats_scheduler import NatsSchedulerProvider
from nats_scheduler.core import calendar
from nats_scheduler.natsserver.process import NatsServer
from nats_scheduler.testing.conformance import SchedulerProviderContractSuite
from tests.harness.servers import unique_prefix
from tests.providers import ENGINE_WORDS, SqliteBackend, settings


class TestNatsScheduler(SchedulerProviderContractSuite):
    engine_words = ENGINE_WORDS

    @pytest.fixture(autouse=True)
    def _server(self, nats_server: NatsServer) -> None:
        self._url = nats_server.url

    def make_provider(self, store: pathlib.Path) -> NatsSchedulerProvider:
        provider = NatsSchedulerProvider(
            settings(self._url, unique_prefix(), max_active_schedules=50)
        )
        provider.configure(repository_backend=SqliteBackend(store))  # a fresh store at `store`
        return provider

    async def fire_due_times(
        self, provider: NatsSchedulerProvider, deployment_id: str, start: datetime, end: datetime
    ) -> None:
        record = provider.schedules.get(deployment_id)
        if record is None:
            return
        for due in calendar.due_times(record.cron, record.timezone, start, end):
            await provider.fire_due(deployment_id, due)
