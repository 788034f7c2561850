"""A projection's start-up replay: waited for while it moves, refused when it stalls.

A replica holding 100,000 Schedules replays them all at start; on a busy machine that can
take longer than any fixed timeout, and failing start() then would be wrong. A replay that
makes no progress for the timeout still fails.
"""

from __future__ import annotations

import time

import nats
import pytest
from nats.js.api import StreamConfig

from nats_scheduler.jetstream.follower import Follower
from nats_scheduler.jetstream.store import Store
from nats_scheduler.settings import NatsSettings
from tests.harness.servers import unique_prefix

pytestmark = pytest.mark.anyio


async def _stream_with(nats_url: str, count: int) -> tuple[Store, str]:
    nc = await nats.connect(nats_url)
    stream = unique_prefix()
    js = nc.jetstream()
    await js.add_stream(StreamConfig(name=stream, subjects=[f"{stream}.>"]))
    for start in range(0, count, 500):
        futures = [await js.publish_async(f"{stream}.s{i}", b"x")
                   for i in range(start, min(count, start + 500))]
        for future in futures:
            await future
    return Store(nc, NatsSettings(url=nats_url, prefix=stream)), stream


async def test_a_replay_slower_than_the_timeout_but_moving_is_waited_for(
    nats_url: str,
) -> None:
    store, stream = await _stream_with(nats_url, 4000)
    applied: list[int] = []

    def slow(seq: int, _subject: str, _data: bytes) -> None:
        applied.append(seq)
        end = time.perf_counter() + 0.0004  # 4,000 x 0.4 ms: three times the timeout
        while time.perf_counter() < end:
            pass

    follower = Follower(store, stream=stream, filter_subject=f"{stream}.>", on_message=slow)
    try:
        await follower.start(timeout=0.5)
        assert len(applied) == 4000
    finally:
        await follower.stop()
        await store.nc.close()


async def test_a_replay_that_never_moves_fails_after_the_timeout(nats_url: str) -> None:
    store, stream = await _stream_with(nats_url, 10)
    # a filter nothing matches: the stream's last sequence is never reached
    follower = Follower(store, stream=stream, filter_subject=f"{stream}.none.>",
                        on_message=lambda *_: None)
    try:
        with pytest.raises(TimeoutError):
            await follower.start(timeout=0.3)
    finally:
        await follower.stop()
        await store.nc.close()
