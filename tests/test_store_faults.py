"""Failing fast and clearly: unreachable store, outages, servers that cannot support us."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from nats.js.api import StreamConfig

from nats_scheduler import NatsSchedulerProvider, NatsSettings
from nats_scheduler.natsserver.process import NatsServer, free_port
from nats_scheduler.seam import (
    RunPayload,
    Schedule,
    SchedulerConfigurationError,
    SchedulerUnavailable,
)
from nats_scheduler.testing.handler import RecordingRunHandler
from tests.harness.servers import connect_fast, unique_prefix
from tests.providers import MongoBackend, assert_clean, running, settings

pytestmark = pytest.mark.anyio


def schedule(dep: str = "dep-1", version: int = 1) -> Schedule:
    return Schedule(dep, "n", "0 3 1 1 *", "UTC", True, RunPayload("t", "p"), version)


def test_configure_without_url_names_the_setting() -> None:
    provider = NatsSchedulerProvider(NatsSettings())
    with pytest.raises(SchedulerConfigurationError) as info:
        provider.configure(repository_backend=MongoBackend())
    assert "ASTRABOX_NATS_URL" in str(info.value)


def test_configure_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASTRABOX_NATS_URL", "nats://127.0.0.1:1")
    monkeypatch.setenv("ASTRABOX_NATS_PREFIX", "bad prefix")
    with pytest.raises(SchedulerConfigurationError) as info:
        NatsSchedulerProvider().configure(repository_backend=MongoBackend())
    assert "ASTRABOX_NATS_PREFIX" in str(info.value)
    monkeypatch.setenv("ASTRABOX_NATS_PREFIX", "OK")
    provider = NatsSchedulerProvider()
    provider.configure(repository_backend=MongoBackend())
    assert provider.settings.servers == ["nats://127.0.0.1:1"]


@pytest.mark.wall_clock
async def test_start_against_unreachable_server_fails_within_ten_seconds() -> None:
    provider = NatsSchedulerProvider(settings(f"nats://127.0.0.1:{free_port()}", "X",
                                              connect_timeout=5.0))
    provider.configure(repository_backend=MongoBackend())
    began = time.monotonic()
    with pytest.raises(SchedulerUnavailable) as info:
        await provider.start(RecordingRunHandler())
    assert time.monotonic() - began < 10
    assert_clean(str(info.value))
    await provider.stop()  # harmless after a failed start


async def test_server_without_persistence_is_a_configuration_error(tmp_path: Path) -> None:
    server = NatsServer(tmp_path / "nojs", jetstream=False).start()
    try:
        provider = NatsSchedulerProvider(settings(server.url, "X"))
        provider.configure(repository_backend=MongoBackend())
        with pytest.raises(SchedulerConfigurationError) as info:
            await provider.start(RecordingRunHandler())
        assert "persistence" in str(info.value)
        assert_clean(str(info.value))
    finally:
        server.stop()


async def test_incompatible_existing_stream_is_named(nats_url: str) -> None:
    prefix = unique_prefix()
    nc = await connect_fast(nats_url)
    try:
        await nc.jetstream().add_stream(StreamConfig(
            name=f"{prefix}_RUNS", subjects=[f"{prefix}.run.*.*"], max_msgs_per_subject=1))
    finally:
        await nc.close()
    provider = NatsSchedulerProvider(settings(nats_url, prefix))
    provider.configure(repository_backend=MongoBackend())
    with pytest.raises(SchedulerConfigurationError) as info:
        await provider.start(RecordingRunHandler())
    message = str(info.value)
    assert f"{prefix}_RUNS" in message and "keeps only 1 events" in message


async def test_start_is_idempotent_on_an_existing_store(nats_url: str) -> None:
    prefix = unique_prefix()
    async with running(nats_url, prefix) as first:
        await first.apply(schedule())
    async with running(nats_url, prefix) as second:  # verifies instead of creating
        await second.until_ready()  # start() returns before the Schedules are loaded
        assert second.schedules.get("dep-1") is not None


@pytest.mark.wall_clock
async def test_outage_raises_unavailable_then_recovers_by_itself(tmp_path: Path) -> None:
    server = NatsServer(tmp_path / "n").start()
    try:
        async with running(server.url, "OUT", store_retry_seconds=2.0) as provider:
            await provider.apply(schedule(version=1))
            server.stop()
            began = time.monotonic()
            with pytest.raises(SchedulerUnavailable) as info:
                await provider.apply(schedule(version=2))
            assert time.monotonic() - began < 10
            assert_clean(str(info.value))
            server.restart()

            async def applied() -> bool:
                try:
                    await provider.apply(schedule(version=3))
                except SchedulerUnavailable:
                    return False
                return True

            deadline = asyncio.get_running_loop().time() + 20
            while not await applied():
                assert asyncio.get_running_loop().time() < deadline
            record = provider.schedules.get("dep-1")
            assert record is not None and record.version == 3
    finally:
        server.stop()
