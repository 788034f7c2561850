"""Benchmark: how many enabled Schedules one provider keeps up with.

Applies N Schedules that all fire every minute, then moves an injected clock across one
minute boundary and measures how long the provider takes to store and dispatch the N Runs
of that minute (they must be done well inside the minute for N to be supported). The
reference, measured in the same run, is the raw rate of sequential acknowledged publishes to
the same server (the engine's ceiling: docs/design.md, "Throughput ceilings"), beside the
NATS maintainers' own ``nats bench js pub`` on that server (bench/natsbench.py). Run:
``.venv/bin/python bench/capacity.py [--schedules 10000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from datetime import UTC, datetime

from nats.js.api import StreamConfig
from natsbench import nats_bench

from nats_scheduler import ManualClock, NatsSchedulerProvider, NatsSettings
from nats_scheduler.natsserver.process import NatsServer
from nats_scheduler.seam import RunPayload, RunState, Schedule
from nats_scheduler.testing.handler import RecordingRunHandler


async def reference_rate(provider: NatsSchedulerProvider, count: int = 3000) -> float:
    js = provider.store.js
    await js.add_stream(StreamConfig(name="REFERENCE", subjects=["reference.>"]))
    began = time.perf_counter()
    for i in range(count):
        await js.publish(f"reference.{i}", b"x" * 600)
    return count / (time.perf_counter() - began)


async def main(count: int) -> None:
    start = datetime(2030, 6, 1, 12, 0, 30, tzinfo=UTC)
    clock = ManualClock(start)
    with tempfile.TemporaryDirectory() as tmp, NatsServer(tmp).start() as server:
        settings = NatsSettings(url=server.url, prefix="CAP", max_active_schedules=count)
        provider = NatsSchedulerProvider(settings, clock=clock)
        provider.configure()
        await provider.start(RecordingRunHandler())
        rate = await reference_rate(provider)
        print(f"reference: sequential acknowledged publishes {rate:,.0f} msg/s")
        bench = await nats_bench(server.url, messages=3000, size=600, clients=64,
                                 atomic_batch=100)
        if bench is not None:
            print(f"reference (nats bench): {bench.line()}")

        began = time.perf_counter()
        limit = asyncio.Semaphore(64)

        async def apply(i: int) -> None:
            async with limit:
                await provider.apply(Schedule(f"cap-{i}", f"cap {i}", "* * * * *", "UTC", True,
                                              RunPayload("t", f"p{i}"), 1))

        await asyncio.gather(*(apply(i) for i in range(count)))
        applied = time.perf_counter() - began
        print(f"applied {count} schedules in {applied:.1f} s ({count / applied:,.0f}/s)")
        assert provider.ticker is not None and provider.ticker.planned == count

        stored_all, dispatched_all = asyncio.Event(), asyncio.Event()
        done: set[str] = set()

        def watch(record) -> None:  # type: ignore[no-untyped-def]
            if provider.ledger.created >= count:
                stored_all.set()
            if record.state == RunState.DISPATCHED:
                done.add(record.run_id)
                if len(done) >= count:
                    dispatched_all.set()

        provider.ledger.subscribe(watch)
        began = time.perf_counter()
        clock.set(datetime(2030, 6, 1, 12, 1, 0, 500_000, tzinfo=UTC))
        await asyncio.wait_for(stored_all.wait(), 300)
        stored = time.perf_counter() - began
        await asyncio.wait_for(dispatched_all.wait(), 300)
        dispatched = time.perf_counter() - began
        print(f"one minute boundary: {count} runs stored in {stored:.1f} s, "
              f"dispatched in {dispatched:.1f} s ({count / dispatched:,.0f} runs/s"
              f"{'' if bench is None else '; ' + bench.ratios(count / dispatched)})")
        # each Run costs ~5 acknowledged writes (create, claim, session, dispatched + lease ops)
        print(f"share of the minute used: {dispatched / 60:.0%}; "
              f"writes/s achieved vs reference: {count * 4 / dispatched / rate:.2f}x")
        await provider.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--schedules", type=int, default=10_000)
    asyncio.run(main(parser.parse_args().schedules))
