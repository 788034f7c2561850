"""History at scale: a replica's start time and memory, and its reads, against the history size.

For each size (default 1,000 / 100,000 / 1,000,000 Runs stored, spread over 100
deployments) this stores the Runs directly (their index entry, ``run.created`` and
``run.dispatched``, as the provider writes them), then starts a fresh replica in a child
process several times and reports, as medians of those runs:

- ``start()``: seconds until it returns, and the process's resident memory after it (and
  again after the background warm-up of the last day's Runs finished);
- ``list_runs(limit=50)``: the first page right after ``start()`` returned (a replica
  started a moment ago, its warm-up still running), then the first page and a page deep in
  the history, p50 over 50 calls (pages of one deployment's long history made by the
  provider itself, and whole walks of it: bench/history_pages.py);
- ``get_run`` of Runs the replica never touched (from a page deep in the history): p50
  over 50 calls;
- the same-run references: one direct get of a Run's last event (``$JS.API.DIRECT.GET``)
  and one leader read of it (``STREAM.MSG.GET``), p50.

Then, on a separate namespace, retention: 5 deployments x 200 Runs with
``retention_runs=50`` keep 50 Runs each and purge the events of the others.

    .venv/bin/python bench/history.py                 # 1k, 100k, 1M (about 6 minutes)
    .venv/bin/python bench/history.py --sizes 1000,100000 --starts 3
    .venv/bin/python bench/history.py --deployments 1 --sizes 10000,100000  # one deployment

Figures are printed as a table with ratios; nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec
import nats

from nats_scheduler import NatsSchedulerProvider, NatsSettings
from nats_scheduler.core import runcore
from nats_scheduler.core.events import encode
from nats_scheduler.jetstream.direct import reader_of
from nats_scheduler.jetstream.history import IndexEntry
from nats_scheduler.names import (
    HDR_MSG_ID,
    Names,
    index_msg_id,
    random_run_id,
)
from nats_scheduler.natsserver.process import NatsServer
from nats_scheduler.seam import RunPayload, Schedule, Trigger
from nats_scheduler.testing.handler import RecordingRunHandler

DEPLOYMENTS = 100
PREFIX = "HIST"


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def p50(values: list[float]) -> float:
    return statistics.median(values)


def settings(url: str, prefix: str, **extra: object) -> NatsSettings:
    return NatsSettings(url=url, prefix=prefix, admin_service=False, **extra)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- filling


async def fill(url: str, prefix: str, total: int, already: int, chunk_size: int = 10_000) -> None:
    """Store Runs ``already..total`` spread over the deployments, as the provider writes them:
    each Run's index entry acknowledged before its events (the provider's order), a chunk of
    ``chunk_size`` Runs at a time."""
    names = Names(prefix)
    nc = await nats.connect(url)
    js = nc.jetstream(timeout=30)
    payload = RunPayload("agent:bench", "summarise")
    start = datetime.now(UTC) - timedelta(days=30)
    step = timedelta(days=29) / max(total, 1)
    for chunk in range(already, total, chunk_size):
        runs = []
        for i in range(chunk, min(total, chunk + chunk_size)):
            dep = f"dep-{i % DEPLOYMENTS:03d}"
            run_id, at = random_run_id(), start + step * i
            # in the Runs' order, as the provider writes entries (ordered)
            entry = msgspec.json.encode(IndexEntry(run_id=run_id, created_at=at, ordered=True))
            acked = await js.publish_async(names.index_subject(dep), entry,
                                           headers={HDR_MSG_ID: index_msg_id(run_id)})
            runs.append((dep, run_id, at, acked))
        await js.publish_async_completed()
        for dep, run_id, at, acked in runs:
            created = runcore.indexed(runcore.create(
                run_id=run_id, deployment_id=dep, trigger=Trigger.RUN_NOW, due_at=None,
                payload=payload, now=at, actor="bench"), (await acked).seq)
            claimed = runcore.claim(created.run, holder="bench", now=at)
            done = runcore.dispatched(claimed.run, turn_id="t", now=at, actor="bench")
            subject = names.run_subject(dep, run_id)
            await js.publish_async(subject, encode(created))
            await js.publish_async(subject, encode(done))
        await js.publish_async_completed()
    await nc.close()


async def prepare(url: str, prefix: str) -> None:
    """Create the streams and the Schedules with the provider itself."""
    provider = NatsSchedulerProvider(settings(url, prefix))
    provider.configure()
    await provider.start(RecordingRunHandler())
    try:
        for d in range(DEPLOYMENTS):
            dep = f"dep-{d:03d}"
            await provider.apply(Schedule(dep, dep, "0 0 29 2 *", "UTC", True,
                                          RunPayload("agent:bench", "summarise"), 1))
    finally:
        await provider.stop()


# ----------------------------------------------------------------------------- one replica


async def child(url: str, prefix: str) -> dict[str, float]:
    """A fresh replica: start it, read, and report (runs in its own process)."""
    base = rss_mb()
    provider = NatsSchedulerProvider(settings(url, prefix))
    provider.configure()
    dep = "dep-007" if DEPLOYMENTS > 7 else "dep-000"
    t0 = time.perf_counter()
    await provider.start(RecordingRunHandler())
    started = time.perf_counter() - t0
    t = time.perf_counter()
    page = await provider.list_runs(dep, limit=50)  # a replica started a moment ago
    cold = time.perf_counter() - t
    rss_started = rss_mb()
    try:
        assert provider.runtime is not None
        # let the background warm-up of the last day's Runs finish
        for task in asyncio.all_tasks():
            if task.get_name() == "schedule load and warm-up":
                await task
        rss_warm = rss_mb()
        first, deep, gets, direct, leader = [], [], [], [], []
        cursor = page[-1].run_id
        for _ in range(4):  # a cursor deep in the history: walk a few thousand Runs back
            deeper = await provider.list_runs(dep, limit=1000, before=cursor)
            if deeper:
                cursor = deeper[-1].run_id
        store = provider.store
        subject = store.names.run_subject(dep, page[0].run_id)
        reader = reader_of(store.nc)
        one_get = [(store.names.runs_stream, {"last_by_subj": subject})]
        # get_run of Runs this process never touched (not in its memory): a page deep down
        olds = [r.run_id for r in await provider.list_runs(dep, limit=50, before=cursor)]
        for i in range(50):
            for sink, call in (
                (first, lambda: provider.list_runs(dep, limit=50)),
                (deep, lambda: provider.list_runs(dep, limit=50, before=cursor)),
                (gets, lambda i=i: provider.get_run(olds[i % len(olds)] if olds
                                                    else page[-1].run_id)),
                (direct, lambda: reader.get_many(one_get, 2.0)),
                (leader, lambda: store.js.get_last_msg(store.names.runs_stream, subject)),
            ):
                t = time.perf_counter()
                await call()
                sink.append(time.perf_counter() - t)
        return {"start_s": started, "rss_base_mb": base, "rss_started_mb": rss_started,
                "rss_warm_mb": rss_warm, "list_cold_ms": cold * 1000,
                "list_first_ms": p50(first) * 1000, "list_deep_ms": p50(deep) * 1000,
                "get_ms": p50(gets) * 1000, "direct_ms": p50(direct) * 1000,
                "leader_ms": p50(leader) * 1000}
    finally:
        await provider.stop()


def measure(url: str, prefix: str, starts: int) -> dict[str, float]:
    runs = []
    for _ in range(starts):
        out = subprocess.run([sys.executable, __file__, "--child", url, prefix,
                              "--deployments", str(DEPLOYMENTS)],
                             capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit(f"replica failed:\n{out.stderr[-3000:]}")
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return {key: p50([r[key] for r in runs]) for key in runs[0]}


# ----------------------------------------------------------------------------- retention


async def retention(url: str) -> tuple[int, int, int]:
    prefix = "HISTRET"
    names = Names(prefix)
    provider = NatsSchedulerProvider(settings(url, prefix, retention_runs=50))
    provider.configure()
    await provider.start(RecordingRunHandler())
    try:
        for d in range(5):
            dep = f"dep-{d:03d}"
            await provider.apply(Schedule(dep, dep, "0 0 29 2 *", "UTC", True,
                                          RunPayload("t", "p"), 1))
    finally:
        await provider.stop()
    await fill_retention(url, prefix)
    provider = NatsSchedulerProvider(settings(url, prefix, retention_runs=50))
    provider.configure()
    await provider.start(RecordingRunHandler())
    assert provider.runtime is not None
    provider.runtime.history.purge_margin = timedelta(0)  # one server: one clock
    try:
        nc = await nats.connect(url)
        js = nc.jetstream()
        before = len((await js.stream_info(names.runs_stream,
                                           subjects_filter=names.runs_filter)).state.subjects)
        await provider.enforce_retention()
        after = len((await js.stream_info(names.runs_stream,
                                          subjects_filter=names.runs_filter)).state.subjects)
        listed = sum([len(await provider.list_runs(f"dep-{d:03d}", limit=1000))
                      for d in range(5)])
        await nc.close()
    finally:
        await provider.stop()
    return before, after, listed


async def fill_retention(url: str, prefix: str) -> None:
    global DEPLOYMENTS
    saved, DEPLOYMENTS = DEPLOYMENTS, 5
    try:
        await fill(url, prefix, 1000, 0, chunk_size=1)
    finally:
        DEPLOYMENTS = saved


# ----------------------------------------------------------------------------- main


def main() -> int:
    global DEPLOYMENTS
    parser = argparse.ArgumentParser(prog="bench/history.py")
    parser.add_argument("--sizes", default="1000,100000,1000000")
    parser.add_argument("--starts", type=int, default=3, help="replica starts per size")
    parser.add_argument("--deployments", type=int, default=DEPLOYMENTS,
                        help="deployments the Runs are spread over (1: one deployment's)")
    parser.add_argument("--child", nargs=2, metavar=("URL", "PREFIX"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    DEPLOYMENTS = args.deployments
    if args.child:
        print(json.dumps(asyncio.run(child(*args.child))))
        return 0
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        server = NatsServer(store_dir=Path(tmp) / "nats")
        server.start()
        try:
            asyncio.run(prepare(server.url, PREFIX))
            stored, rows = 0, []
            for size in sizes:
                t = time.perf_counter()
                asyncio.run(fill(server.url, PREFIX, size, stored))
                print(f"stored {size - stored:,} Runs in {time.perf_counter() - t:.1f} s",
                      file=sys.stderr)
                stored = size
                rows.append((size, measure(server.url, PREFIX, args.starts)))
            before, after, listed = asyncio.run(retention(server.url))
        finally:
            server.stop()
    report(rows, before, after, listed, args.starts)
    return 0


def report(rows: list[tuple[int, dict[str, float]]], before: int, after: int, listed: int,
           starts: int) -> None:
    base = rows[0][1]
    print(f"\nhistory bench ({os.cpu_count()} cores, {datetime.now(UTC):%Y-%m-%d}, "
          f"{DEPLOYMENTS} deployment(s)), medians of {starts} replica starts; references: one "
          "direct get and one leader read of a Run (same run)")
    print(f"{'runs stored':>12} {'start s':>8} {'rss MB':>7} {'warm MB':>8} "
          f"{'start vs 1st':>12} {'rss vs 1st':>10}")
    for size, m in rows:
        print(f"{size:>12,} {m['start_s']:>8.3f} {m['rss_started_mb']:>7.1f} "
              f"{m['rss_warm_mb']:>8.1f} {m['start_s'] / base['start_s']:>12.2f} "
              f"{m['rss_started_mb'] / base['rss_started_mb']:>10.2f}")
    print("\nlist_runs(limit=50), ms (p50; 'cold': the first page right after start())")
    print(f"{'runs stored':>12} {'cold':>7} {'first':>7} {'deep':>7} "
          f"{'get_run':>8} {'direct':>7} {'leader':>7} {'1st/dir':>7} {'deep/dir':>8}")
    for size, m in rows:
        print(f"{size:>12,} {m['list_cold_ms']:>7.2f} {m['list_first_ms']:>7.2f} "
              f"{m['list_deep_ms']:>7.2f} {m['get_ms']:>8.2f} {m['direct_ms']:>7.3f} "
              f"{m['leader_ms']:>7.3f} {m['list_first_ms'] / m['direct_ms']:>7.1f} "
              f"{m['list_deep_ms'] / m['direct_ms']:>8.1f}")
    print(f"retention (5 deployments x 200 Runs, retention_runs=50): Run subjects {before} -> "
          f"{after} after enforcement; list_runs returns {listed} (expected 250)")


if __name__ == "__main__":
    raise SystemExit(main())
