"""The contract suite bound to the in-memory reference provider.

Proves the suite is provider-neutral and self-consistent: it passes against a provider that
shares no code with the NATS one beyond the seam and the calendar.
"""

from __future__ import annotations

import pathlib
from datetime import datetime

from inmemory_provider import InMemorySchedulerProvider

from nats_scheduler.testing.conformance import SchedulerProviderContractSuite


class _AnyBackend:
    name = "sqlite"

    def sql_database_url(self) -> str:
        return "sqlite:///unused.db"


class TestInMemoryScheduler(SchedulerProviderContractSuite):
    engine_words = ("dict", "asyncio", "inmemory")

    def make_provider(self, store: pathlib.Path) -> InMemorySchedulerProvider:
        provider = InMemorySchedulerProvider(
            max_attempts=4,
            backoff_initial=0.02,
            backoff_cap=0.1,
            call_timeout=1.0,
            drain_seconds=0.5,
            max_active_schedules=5,
        )
        provider.configure(repository_backend=_AnyBackend())  # the store is the instance
        return provider

    async def fire_due_times(
        self,
        provider: InMemorySchedulerProvider,
        deployment_id: str,
        start: datetime,
        end: datetime,
    ) -> None:
        await provider.fire_window(deployment_id, start, end)
