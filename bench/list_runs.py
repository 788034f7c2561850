"""Benchmark: list_runs with a long history (100,000 Runs of one deployment).

Prints the provider's list_runs latency (first page, a deep page) and its start-up time
(loading the ledger), against a reference measured in the same run: answering the same
page by reading every Run event of the deployment (what a projection-less provider would
do per call). Run: ``.venv/bin/python bench/list_runs.py [--runs 100000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta

from nats.js.api import DeliverPolicy

from nats_scheduler import NatsSchedulerProvider, NatsSettings
from nats_scheduler.core import runcore
from nats_scheduler.core.events import decode_run_event, encode
from nats_scheduler.names import HDR_EXPECTED_LAST_SUBJECT_SEQUENCE, Names, random_run_id
from nats_scheduler.natsserver.process import NatsServer
from nats_scheduler.seam import RunPayload, Schedule, Trigger
from nats_scheduler.testing.handler import RecordingRunHandler


async def seed(provider: NatsSchedulerProvider, dep: str, count: int) -> None:
    """Append ``count`` finished-looking Runs straight into the store (fast, batched)."""
    js = provider.store.js
    names = Names(provider.settings.prefix)
    t0 = datetime(2030, 1, 1, tzinfo=UTC)
    for start in range(0, count, 1000):
        futures = []
        for i in range(start, min(count, start + 1000)):
            event = runcore.create(run_id=random_run_id(), deployment_id=dep,
                                   trigger=Trigger.RUN_NOW, due_at=None,
                                   payload=RunPayload("t", "p"),
                                   now=t0 + timedelta(seconds=i), actor="bench")
            claimed = runcore.claim(event.run, holder="bench", now=event.at)
            done = runcore.dispatched(claimed.run, turn_id=f"t{i}", now=event.at, actor="bench")
            subject = names.run_subject(dep, event.run.run_id)
            futures.append(await js.publish_async(
                subject, encode(done), headers={HDR_EXPECTED_LAST_SUBJECT_SEQUENCE: "0"}))
        await js.publish_async_completed()
        for f in futures:
            await f


async def reference_page(provider: NatsSchedulerProvider, dep: str, limit: int) -> list[str]:
    """The naive answer: read every event of the deployment, sort, take a page."""
    names = Names(provider.settings.prefix)
    records = {}
    sub = await provider.store.js.subscribe(
        names.deployment_runs_filter(dep), ordered_consumer=True,
        deliver_policy=DeliverPolicy.ALL)
    info = await provider.store.js.stream_info(names.runs_stream)
    seen = 0
    while seen < info.state.messages:
        msg = await sub.next_msg(timeout=10)
        record = decode_run_event(msg.data).run
        records[record.run_id] = record
        seen += 1
    await sub.unsubscribe()
    ordered = sorted(records.values(), key=lambda r: (r.created_at, r.run_id), reverse=True)
    return [r.run_id for r in ordered[:limit]]


def timed(samples: list[float]) -> str:
    return (f"median {statistics.median(samples) * 1000:.3f} ms, "
            f"worst {max(samples) * 1000:.3f} ms")


async def main(count: int) -> None:
    with tempfile.TemporaryDirectory() as tmp, NatsServer(tmp).start() as server:
        settings = NatsSettings(url=server.url, prefix="BENCH")
        seeder = NatsSchedulerProvider(settings)
        seeder.configure()
        await seeder.start(RecordingRunHandler())
        await seeder.apply(Schedule("bench", "bench", "0 0 1 1 *", "UTC", True,
                                    RunPayload("t", "p"), 1))
        began = time.perf_counter()
        await seed(seeder, "bench", count)
        print(f"seeded {count} runs in {time.perf_counter() - began:.1f} s")
        await seeder.stop()

        provider = NatsSchedulerProvider(settings)
        provider.configure()
        began = time.perf_counter()
        await provider.start(RecordingRunHandler())
        startup = time.perf_counter() - began
        print(f"provider start with {count} runs in the ledger: {startup:.2f} s")
        first = []
        for _ in range(200):
            t = time.perf_counter()
            page = await provider.list_runs("bench", limit=50)
            first.append(time.perf_counter() - t)
        deep_cursor = (await provider.list_runs("bench", limit=1000))[-1].run_id
        deep = []
        for _ in range(200):
            t = time.perf_counter()
            await provider.list_runs("bench", limit=50, before=deep_cursor)
            deep.append(time.perf_counter() - t)
        t = time.perf_counter()
        naive = await reference_page(provider, "bench", 50)
        reference = time.perf_counter() - t
        assert naive == [r.run_id for r in page], "reference and provider disagree"
        print(f"list_runs(limit=50), first page: {timed(first)}")
        print(f"list_runs(limit=50, before=<1000th>): {timed(deep)}")
        print(f"reference (read all {count} runs' events per call): {reference * 1000:.0f} ms")
        print(f"ratio reference / provider median: {reference / statistics.median(first):,.0f}x")
        await provider.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=100_000)
    asyncio.run(main(parser.parse_args().runs))
