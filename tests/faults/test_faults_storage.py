"""The store runs out of space (the server's ``max_file_store`` used up by another stream).

While it is full, every write is refused at once with SchedulerUnavailable saying so in
AstraBox's words (not after seconds of retries: space does not come back by itself); what
was acknowledged before stays; a Run caught mid-dispatch waits; once space returns (the
filler is purged) the same provider works again without a restart and finishes that Run.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import nats.js.errors
import pytest
from nats.js.api import StreamConfig

from nats_scheduler.natsserver.process import NatsServer
from nats_scheduler.provider import NatsSchedulerProvider
from nats_scheduler.seam import (
    EnqueueRequest,
    RunPayload,
    RunState,
    Schedule,
    SchedulerUnavailable,
    Trigger,
)
from tests.harness.scenario import FAR, assert_clean_store
from tests.harness.servers import connect_fast, unique_prefix
from tests.harness.shared_handler import SqliteRunHandler
from tests.providers import assert_clean, eventually, running

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

LIMIT = 3 * 1024 * 1024


@pytest.fixture
def small_server(tmp_path: Path) -> Iterator[NatsServer]:
    with NatsServer(tmp_path / "nats", max_file_store=LIMIT, sync_always=True) as server:
        yield server


async def fill(url: str) -> int:
    """Publish into a stream of our own until the server refuses: messages stored."""
    nc = await connect_fast(url)
    try:
        js = nc.jetstream(timeout=5.0)
        await js.add_stream(StreamConfig(name="FILLER", subjects=["filler"]))
        stored = 0
        while True:
            try:
                await js.publish("filler", b"x" * 60_000)
            except nats.js.errors.APIError as exc:
                assert exc.err_code == 10023, exc
                return stored
            stored += 1
    finally:
        await nc.close()


async def purge(url: str) -> None:
    nc = await connect_fast(url)
    try:
        await nc.jetstream().purge_stream("FILLER")
    finally:
        await nc.close()


async def state(provider: NatsSchedulerProvider, run_id: str) -> RunState:
    return (await provider.get_run(run_id)).state


async def test_a_full_store_refuses_cleanly_loses_nothing_and_recovers(
    small_server: NatsServer, tmp_path: Path,
) -> None:
    prefix = unique_prefix()
    handler = SqliteRunHandler(tmp_path / "handler.db", process="p")
    async with running(small_server.url, prefix, handler, store_retry_seconds=3.0,
                       retry_initial=0.05, retry_cap=0.2) as provider:
        await provider.apply(Schedule("d", "d", "*/5 * 29 2 *", "UTC", True,
                                      RunPayload("t", "p"), 1))
        before = [await provider.enqueue(EnqueueRequest("d", Trigger.RUN_NOW))
                  for _ in range(3)]
        for run in before:
            await eventually(lambda r=run.run_id: _dispatched(provider, r), timeout=10)
        handler.set_rule("d", "hang_admit")  # the next Run stops inside admit_turn
        caught = await provider.enqueue(EnqueueRequest("d", Trigger.RUN_NOW))
        await eventually(lambda: any(c.outcome == "hang" for c in handler.calls(caught.run_id)))

        assert await fill(small_server.url) > 0
        began = time.monotonic()
        with pytest.raises(SchedulerUnavailable) as info:
            await provider.enqueue(EnqueueRequest("d", Trigger.RUN_NOW))
        assert time.monotonic() - began < 2.0  # at once, not after the retry budget
        assert "is full" in str(info.value)
        assert_clean(str(info.value))
        with pytest.raises(SchedulerUnavailable) as info:
            await provider.apply(Schedule("d", "d", "*/5 * 29 2 *", "UTC", True,
                                          RunPayload("t", "p2"), 2))
        assert_clean(str(info.value))
        handler.set_rule("d", None)  # the caught Run's turn is admitted, but cannot be stored
        for run in before:  # what was acknowledged is all there
            assert await state(provider, run.run_id) == RunState.DISPATCHED

        await purge(small_server.url)
        after = await eventually(lambda: _enqueue_when_possible(provider), timeout=15)
        fired = await provider.fire_due("d", FAR)
        assert fired is not None
        for run_id in (caught.run_id, after.run_id, fired.run_id):
            await eventually(lambda r=run_id: _dispatched(provider, r), timeout=30)
    await assert_clean_store(small_server.url, prefix, handler=handler,
                             expected={("d", FAR)})


async def _enqueue_when_possible(provider: NatsSchedulerProvider) -> object:
    try:
        return await provider.enqueue(EnqueueRequest("d", Trigger.RUN_NOW))
    except SchedulerUnavailable:
        return None


async def _dispatched(provider: NatsSchedulerProvider, run_id: str) -> bool:
    return await state(provider, run_id) == RunState.DISPATCHED
