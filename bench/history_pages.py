"""Pages of ONE deployment's Run history: the first page, a page from a cursor in the middle,
and the whole history walked page by page, at 10,000 and 100,000 Runs.

The Runs are made by the provider itself, the way a busy replica makes them: ``fire_many``
over that many due times of one Schedule (a burst, created microseconds apart: what lost
three quarters of a history read page after page before 0.2), then dispatched. A replica
started afterwards (it holds none of them) reads:

- a single direct get of one Run's last event (``$JS.API.DIRECT.GET``): the same-run
  reference every page is a ratio to;
- ``list_runs(limit=50)`` from the top, and from the Run in the middle of the history
  (p50 over ``--repeat`` calls each);
- the whole history, ``limit=50`` and ``limit=1000`` pages, each page's ``before`` the last
  Run of the one before: wall time, and whether it listed every Run made exactly once,
  newest first;
- ``nats-scheduler check``'s paging invariant on the deployment (its cost per deployment
  of the sample: the index read whole, the Runs' states, a walk of 100-Run pages).

Both fsync settings (``--sync both``, the default): the server's own (every 2 minutes) and
``sync_interval: always`` (what nats-server.conf ships). Figures are printed; nothing is
asserted but the walk's completeness, which is printed as ``complete``/``LOST n``.

    .venv/bin/python bench/history_pages.py                         # 10k and 100k, both
    .venv/bin/python bench/history_pages.py --sizes 10000 --sync always --repeat 50
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from nats_scheduler import NatsSchedulerProvider, NatsSettings
from nats_scheduler.admin.paging_check import check_deployment
from nats_scheduler.admin.reader import StoreReader
from nats_scheduler.jetstream.direct import reader_of
from nats_scheduler.names import scheduled_run_id
from nats_scheduler.natsserver.process import NatsServer
from nats_scheduler.seam import Run, RunPayload, Schedule
from nats_scheduler.testing.handler import RecordingRunHandler

DEPLOYMENT = "one"
FIRST_DUE = datetime(2001, 1, 1, 3, tzinfo=UTC)
"""Due at 03:00 UTC daily: the Schedule never fires by itself while the bench runs."""


def settings(url: str, prefix: str) -> NatsSettings:
    return NatsSettings(url=url, prefix=prefix, admin_service=False,
                        retention_runs=1_000_000)


async def started(url: str, prefix: str) -> NatsSchedulerProvider:
    provider = NatsSchedulerProvider(settings(url, prefix))
    provider.configure()
    await provider.start(RecordingRunHandler())
    return provider


async def make(url: str, prefix: str, total: int) -> float:
    """Fire ``total`` due times of one Schedule (in fire_many's batches) and let them finish;
    returns the seconds it took."""
    provider = await started(url, prefix)
    try:
        await provider.apply(Schedule(DEPLOYMENT, DEPLOYMENT, "0 3 * * *", "UTC", True,
                                      RunPayload("agent:bench", "summarise"), 1))
        t = time.perf_counter()
        for start in range(0, total, 10_000):
            await provider.fire_many([(DEPLOYMENT, FIRST_DUE + timedelta(days=n))
                                      for n in range(start, min(total, start + 10_000))])
        for _ in range(6000):  # every Run dispatched (at most 10 min): reads measured alone
            if not provider.ledger.unfinished_count():
                break
            await asyncio.sleep(0.1)
        return time.perf_counter() - t
    finally:
        await provider.stop()


async def p50_ms(calls: list[Callable[[], Awaitable[object]]], repeat: int) -> list[float]:
    """p50 milliseconds of each call, the calls taken in turn (so whatever else the process
    or the server does meanwhile weighs on each alike)."""
    times: list[list[float]] = [[] for _ in calls]
    for _ in range(repeat):
        for call, sink in zip(calls, times, strict=True):
            t = time.perf_counter()
            await call()
            sink.append(time.perf_counter() - t)
    return [statistics.median(sink) * 1000 for sink in times]


async def walk(provider: NatsSchedulerProvider, limit: int) -> tuple[float, list[Run]]:
    listed: list[Run] = []
    before = None
    t = time.perf_counter()
    while True:
        page = await provider.list_runs(DEPLOYMENT, limit=limit, before=before)
        listed += page
        if len(page) < limit:
            return time.perf_counter() - t, listed
        before = page[-1].run_id


def judged(listed: list[Run], made: set[str]) -> str:
    ids = [r.run_id for r in listed]
    keys = [(r.created_at, r.run_id) for r in listed]
    if len(set(ids)) != len(ids):
        return f"REPEATED {len(ids) - len(set(ids))}"
    if keys != sorted(keys, reverse=True):
        return "OUT OF ORDER"
    lost = len(made - set(ids))
    return "complete" if not lost and set(ids) == made else f"LOST {lost}"


@dataclass(frozen=True)
class Figures:
    """One size on one server: p50 milliseconds, walk seconds, and what each walk listed."""

    direct: float
    first: float
    middle: float
    walk_50: float
    walk_1000: float
    listed_50: str
    listed_1000: str
    check: float
    """Seconds ``nats-scheduler check``'s paging invariant takes for this deployment."""


async def measure(url: str, prefix: str, total: int, repeat: int) -> Figures:
    made = {scheduled_run_id(DEPLOYMENT, FIRST_DUE + timedelta(days=n)) for n in range(total)}
    provider = await started(url, prefix)  # holds none of the Runs
    try:
        for task in asyncio.all_tasks():  # let the start's background loads finish first
            if task.get_name() == "schedule load and warm-up":
                await task
        store = provider.store
        newest = (await provider.list_runs(DEPLOYMENT, limit=1))[0]
        reader = reader_of(store.nc)
        one_get = [(store.names.runs_stream,
                    {"last_by_subj": store.names.run_subject(DEPLOYMENT, newest.run_id)})]
        walk_50, listed_50 = await walk(provider, 50)
        walk_1000, listed_1000 = await walk(provider, 1000)
        middle = listed_1000[len(listed_1000) // 2].run_id
        direct, first, deep = await p50_ms([
            lambda: reader.get_many(one_get, 5.0),
            lambda: provider.list_runs(DEPLOYMENT, limit=50),
            lambda: provider.list_runs(DEPLOYMENT, limit=50, before=middle)], repeat)
        t = time.perf_counter()
        found = await check_deployment(StoreReader(store.nc, prefix, timeout=30), DEPLOYMENT)
        checked = time.perf_counter() - t
        if found:
            print(f"  paging check: {[v.line() for v in found]}", file=sys.stderr)
        return Figures(direct, first, deep, walk_50, walk_1000,
                       judged(listed_50, made), judged(listed_1000, made), checked)
    finally:
        await provider.stop()


def run(sync_always: bool, sizes: list[int], repeat: int) -> list[tuple[int, Figures]]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        server = NatsServer(store_dir=Path(tmp) / "nats", sync_always=sync_always)
        server.start()
        try:
            for size in sizes:
                prefix = f"PAGES{size}"
                made_in = asyncio.run(make(server.url, prefix, size))
                print(f"  made {size:,} Runs ({'always' if sync_always else 'default'} fsync) "
                      f"in {made_in:.1f} s", file=sys.stderr, flush=True)
                rows.append((size, asyncio.run(measure(server.url, prefix, size, repeat))))
        finally:
            server.stop()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(prog="bench/history_pages.py")
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--sync", choices=["default", "always", "both"], default="both")
    parser.add_argument("--repeat", type=int, default=100, help="calls per p50")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    syncs = {"default": [False], "always": [True], "both": [False, True]}[args.sync]
    print(f"history pages of one deployment ({os.cpu_count()} cores, "
          f"{datetime.now(UTC):%Y-%m-%d}); ms are p50 of {args.repeat} calls; x: ratio to one "
          "direct get of a Run in the same run")
    print(f"{'fsync':>8} {'runs':>8} {'direct ms':>9} {'first ms':>8} {'x':>5} "
          f"{'middle ms':>9} {'x':>5} {'mid/1st':>7} {'walk@50 s':>9} {'walk@1000 s':>11} "
          f"{'walked':>10} {'check s':>7}")
    for sync_always in syncs:
        for size, f in run(sync_always, sizes, args.repeat):
            walked = (f.listed_50 if f.listed_50 == f.listed_1000
                      else f"{f.listed_50}/{f.listed_1000}")
            print(f"{'always' if sync_always else 'default':>8} {size:>8,} {f.direct:>9.3f} "
                  f"{f.first:>8.2f} {f.first / f.direct:>5.1f} {f.middle:>9.2f} "
                  f"{f.middle / f.direct:>5.1f} {f.middle / f.first:>7.2f} {f.walk_50:>9.2f} "
                  f"{f.walk_1000:>11.2f} {walked:>10} {f.check:>7.2f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
