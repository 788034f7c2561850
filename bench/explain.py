"""The account of due times at scale: ``nats-scheduler explain`` among 100,000 Schedules.

    .venv/bin/python bench/explain.py                       # 100,000 Schedules, 24 h, 30 days
    .venv/bin/python bench/explain.py --schedules 10000 --runs 3

One provider (a hand-held clock, so its ticker fires nothing by itself) applies N Schedules
(a daily one each, and one ``* * * * *``) with ``reconcile``, and stores the Runs of the
every-minute Schedule's 1,440 due times of one day (2030-01-01, ``fire_many`` in batches).
Then, against that store:

- ``nats-scheduler explain DEP --since ... --until ... --json`` over that day, as a process
  (what an operator waits for), ``--runs`` times; the same run's reference is
  ``nats-scheduler runs DEP --limit 1 --json`` (one request: the command line's own cost);
- the same account read in the process, through the admin service and from the store (the
  fallback when no process runs), each page of 500 timed;
- 30 days of the same Schedule (43,200 due times, 87 pages): the first page, and every page
  to the end, through the admin service.

Every account is checked (1,440 due times, each ``run`` with its Run ID). Nothing is
asserted; the figures are printed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta

import msgspec
import nats

from nats_scheduler import ManualClock, NatsSchedulerProvider, NatsSettings
from nats_scheduler.admin.account_reads import AccountReader
from nats_scheduler.admin.client import AdminClient
from nats_scheduler.admin.reader import StoreReader
from nats_scheduler.core.dueaccount import Outcome
from nats_scheduler.names import scheduled_run_id
from nats_scheduler.natsserver.process import NatsServer
from nats_scheduler.runtime.ticker import DueTime
from nats_scheduler.seam import RunPayload, Schedule
from nats_scheduler.testing.handler import RecordingRunHandler

DAY = datetime(2030, 1, 1, tzinfo=UTC)
SINCE = DAY + timedelta(seconds=30)
"""The day's window starts here: its due times are 00:01 to 00:00 of the next day."""
TARGET = "every-minute"
PREFIX = "EXPLAIN"


def _schedules(count: int) -> list[Schedule]:
    others = [Schedule(f"daily-{i:06d}", f"daily {i}", f"{i % 60} {i % 24} * * *", "UTC",
                       True, RunPayload("agent/report", f"report {i}"), 1)
              for i in range(count - 1)]
    return [*others, Schedule(TARGET, TARGET, "* * * * *", "UTC", True,
                              RunPayload("agent/ping", "ping"), 1)]


async def _load(provider: NatsSchedulerProvider, count: int) -> None:
    began = time.perf_counter()
    await provider.reconcile(_schedules(count))
    print(f"applied {count:,} Schedules in {time.perf_counter() - began:.1f} s")
    runtime = provider.runtime
    assert runtime is not None
    dues = [DAY + timedelta(minutes=m) for m in range(1, 1441)]
    began = time.perf_counter()
    for start in range(0, len(dues), 256):
        await runtime.firing.fire_many([DueTime(TARGET, d) for d in dues[start:start + 256]])
    print(f"stored the {len(dues):,} Runs of one day of {TARGET!r} in "
          f"{time.perf_counter() - began:.1f} s")


async def _cli(url: str, *argv: str) -> tuple[float, str]:
    began = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "nats_scheduler.cli.main", *argv, "--url", url, "--prefix",
        PREFIX, "--json", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    seconds = time.perf_counter() - began
    assert proc.returncode == 0, err.decode()
    return seconds, out.decode()


def _checked_day(lines: list[object]) -> None:
    """1,440 due times, each the Run of its due time."""
    assert len(lines) == 1440, len(lines)
    for line in lines:
        data = line if isinstance(line, dict) else msgspec.to_builtins(line)
        assert data["outcome"] == Outcome.RUN.value, data
        due = datetime.fromisoformat(str(data["due_at"]).replace("Z", "+00:00"))
        assert data["run_id"] == scheduled_run_id(TARGET, due)


def _spread(values: list[float]) -> str:
    return (f"median {statistics.median(values) * 1000:,.0f} ms "
            f"(min {min(values) * 1000:,.0f}, max {max(values) * 1000:,.0f}, n={len(values)})")


async def _in_process(url: str, runs: int) -> None:
    nc = await nats.connect(url)
    try:
        client = AdminClient(nc, PREFIX, timeout=30.0)
        since, until = SINCE, DAY + timedelta(days=1)
        service = []
        for _ in range(runs):
            began = time.perf_counter()
            lines = [line async for page in client.explain_pages(TARGET, since=since,
                                                                   until=until)
                     for line in page.due_times]
            service.append(time.perf_counter() - began)
            _checked_day(lines)
        print(f"  through the admin service, 24 h (3 pages of 500): {_spread(service)}")
        reader = AccountReader(StoreReader(nc, PREFIX, timeout=30.0).store(), timeout=30.0)
        store = []
        for _ in range(runs):
            began = time.perf_counter()
            before, lines = None, []
            while True:
                page = await reader.page(TARGET, now=until, since=since, until=until,
                                         before=before, limit=500)
                lines += page.due_times
                if page.next_before is None:
                    break
                before = page.next_before
            store.append(time.perf_counter() - began)
            _checked_day(lines)
        print(f"  from the store (no process needed), 24 h: {_spread(store)}")
        month_until = DAY + timedelta(days=30)
        first, total, pages, count = [], [], 0, 0
        for _ in range(runs):
            began = time.perf_counter()
            pages = count = 0
            async for page in client.explain_pages(TARGET, since=SINCE, until=month_until):
                if pages == 0:
                    first.append(time.perf_counter() - began)
                pages += 1
                count += len(page.due_times)
            total.append(time.perf_counter() - began)
        print(f"  30 days ({count:,} due times, {pages} pages): first page {_spread(first)}; "
              f"all pages {_spread(total)}")
    finally:
        await nc.close()


async def main(args: argparse.Namespace) -> None:
    clock = ManualClock(DAY - timedelta(days=1))
    with tempfile.TemporaryDirectory() as tmp, NatsServer(tmp).start() as server:
        settings = NatsSettings(url=server.url, prefix=PREFIX,
                                max_active_schedules=args.schedules)
        provider = NatsSchedulerProvider(settings, clock=clock)
        provider.configure()
        await provider.start(RecordingRunHandler())
        try:
            await _load(provider, args.schedules)
            since, until = SINCE.isoformat(), (DAY + timedelta(days=1)).isoformat()
            cli, reference = [], []
            for _ in range(args.runs):
                seconds, out = await _cli(server.url, "explain", TARGET, "--since", since,
                                          "--until", until)
                _checked_day(json.loads(out)["due_times"])
                cli.append(seconds)
                reference.append((await _cli(server.url, "runs", TARGET, "--limit", "1"))[0])
            print(f"explain over 24 h of a '* * * * *' Schedule among {args.schedules:,} "
                  "Schedules (1,440 due times, every one a Run):")
            print(f"  nats-scheduler explain --json, the whole process: {_spread(cli)}")
            print(f"  same-run reference, nats-scheduler runs --limit 1 --json: "
                  f"{_spread(reference)}")
            await _in_process(server.url, args.runs)
        finally:
            await provider.stop()


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--schedules", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse()))
