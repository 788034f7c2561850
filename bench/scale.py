"""Many Schedules on one replica: the load, a restart, reconcile and memory against N.

    .venv/bin/python bench/scale.py                                  # 100,000 and 1,000,000
    .venv/bin/python bench/scale.py --schedules 100000 --repeats 1   # one quick run
    .venv/bin/python bench/scale.py --schedules 1000000 --repeats 3 --breakdown

Why this exists: ``max_active_schedules`` (docs/configuration.md) must be what a replica
provably holds, and every cost a replica pays for its Schedules must grow at most linearly
with them (a platform with a daily digest per tenant reaches a million Schedules without
being large). AstraBox's own sequence at a restart is ``start()`` then ``reconcile`` of every
stored Schedule, unchanged; the first time it is ``reconcile`` of every one, all new.

What it does, per size and per repeat, each repeat on a fresh nats-server (default fsync):

1. A fresh process (a child mode of this script) builds the list of N enabled daily
   Schedules (spread over the day and seven time zones, none due within two hours, each
   with a prompt of its own), starts a provider on the empty store, and times
   ``reconcile`` of the whole list: the first load, all new (``load``). Then it writes
   the checkpoint of its Schedule table that the owner of the job writes within a minute
   in production (``runtime/checkpointing.py``); ``--no-checkpoint``: none, so the restart
   below replays every Schedule, as before checkpoints.
2. Reference, same run: the raw replay of the N Schedule subjects (an ordered consumer,
   last message per subject, nothing decoded): the floor of a start-up's read. And N
   lookups in a dict of N IDs by equal strings of their own: linear work whose growth from
   100,000 to 1,000,000 is what this machine's caches add to any pass over N Schedules.
3. Another fresh process, as AstraBox restarting (``restart``): builds the same list, then
   times ``start()``, then ``reconcile`` of the same list at once (it waits for the Schedule
   table: AstraBox's figure), readiness on the way; then, once the background warm-up that
   readiness begins is over (timed: ready to done), ``reconcile`` of the same list again
   (the table loaded), then one with a tenth of the Schedules changed (a new version and
   prompt; ``partly changed``). Resident memory (VmRSS) is read after the list was built
   and again after the reconciles: the provider's state is the difference. With
   ``--breakdown`` it also walks its structures (the Schedule table, the
   ticker, metrics, the ledger; each object counted once, as ``bench/held.py`` does).

Time in Python's garbage collector is measured in every timed step (``gc.callbacks``), and
the process's own CPU time beside the main ones (a shared machine stretches wall time more
than CPU time), and the nats-server's CPU over the steps that write (on two cores the
server's share of a write is part of the wall time the step waits).
Each repeat measures every size in turn (the machine's speed drifts over the minutes a
million takes: both sizes of a growth figure meet the same drift). Printed: each figure per
repeat, the median of the repeats, and with two sizes or more the growth of each median
from the smallest size to each larger one (linear is the size ratio), and the growth within
each repeat.
Nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import msgspec
from held import raw_replay_seconds  # bench/held.py, beside this script

from nats_scheduler import NatsSchedulerProvider, NatsSettings
from nats_scheduler.natsserver.process import NatsServer
from nats_scheduler.seam import RunPayload, Schedule
from nats_scheduler.testing.handler import RecordingRunHandler

SCRIPT = Path(__file__).resolve()
PREFIX = "SCALE"
ZONES = ("UTC", "Europe/Paris", "America/New_York", "Asia/Tokyo", "Australia/Sydney",
         "Asia/Kolkata", "America/Los_Angeles")
QUIET_HOURS = 3
"""No Schedule's local hour is within this many hours after the local hour the bench
started in: nothing falls due while it runs."""
CHANGED_SHARE = 10
"""``partly changed``: one Schedule in this many gets a new version and prompt."""
CHILD_TIMEOUT = 3600.0
"""Seconds a child may take for one step before the bench gives up on it."""
SETTLE_TIMEOUT = 1800.0
"""Seconds the restarted replica's background warm-up may take before RSS is read anyway."""


# ----------------------------------------------------------------------------- Schedules


def schedules(count: int, started: datetime) -> list[Schedule]:
    """``count`` enabled daily Schedules, none due within ``QUIET_HOURS`` of ``started``.

    Deterministic given ``started``'s hour, so two processes build the same list. Each has
    a prompt of its own (a digest per tenant); the target is shared."""
    local_hours = {zone: started.astimezone(ZoneInfo(zone)).hour for zone in ZONES}
    allowed = {zone: [h for h in range(24) if (h - hour) % 24 > QUIET_HOURS]
               for zone, hour in local_hours.items()}
    out = []
    for i in range(count):
        zone = ZONES[i % len(ZONES)]
        hours = allowed[zone]
        cron = f"{(i * 7) % 60} {hours[(i // 7) % len(hours)]} * * *"
        dep = f"scale-{i:07d}"
        out.append(Schedule(dep, dep, cron, zone, True,
                            RunPayload("agent:digest", f"summarise the day for tenant {i}"), 1))
    return out


def changed_share(listed: list[Schedule]) -> list[Schedule]:
    """Every ``CHANGED_SHARE``-th Schedule with a new version and prompt."""
    return [msgspec.structs.replace(s, version=s.version + 1,
                                    payload=RunPayload(s.payload.target, s.payload.prompt + "!"))
            if i % CHANGED_SHARE == 0 else s for i, s in enumerate(listed)]


# ----------------------------------------------------------------------------- measuring


class GcTimer:
    """Seconds spent in the garbage collector while installed (``gc.callbacks``)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.collections = 0
        self._began = 0.0
        gc.callbacks.append(self._on)

    def _on(self, phase: str, _info: dict[str, int]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._began
            self.collections += 1


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


SERVER_PID: int | None = None
"""The nats-server's process (a child is told it): its CPU is read beside each step's."""


def server_cpu_seconds() -> float:
    """The nats-server's CPU time so far (user + system, its own accounting), 0 unknown."""
    if SERVER_PID is None:
        return 0.0
    try:
        fields = Path(f"/proc/{SERVER_PID}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Step:
    """Times one step: wall seconds, seconds of it in the garbage collector, this process's
    CPU and the server's meanwhile (on two cores, the server's share is part of the wall
    time a step waits)."""

    def __init__(self, timer: GcTimer) -> None:
        self._timer = timer

    def __enter__(self) -> Step:
        self.began, self.gc_began = time.perf_counter(), self._timer.seconds
        self.cpu_began = time.process_time()
        self.server_began = server_cpu_seconds()
        return self

    def __exit__(self, *_: object) -> None:
        self.seconds = time.perf_counter() - self.began
        self.gc_seconds = self._timer.seconds - self.gc_began
        self.cpu_seconds = time.process_time() - self.cpu_began
        self.server_seconds = server_cpu_seconds() - self.server_began


def emit(**figures: Any) -> None:
    print(json.dumps(figures), flush=True)


def settings_for(url: str, count: int) -> NatsSettings:
    return NatsSettings(url=url, prefix=PREFIX, max_active_schedules=max(count, 1))


# ----------------------------------------------------------------------------- children


async def load_main(url: str, count: int, started: datetime, checkpoint: bool) -> None:
    """A fresh process: ``reconcile`` of every Schedule into an empty store (all new); then
    the checkpoint of the table its replica would write within a minute (unless told not
    to: then a restart replays every Schedule)."""
    timer = GcTimer()
    listed = schedules(count, started)
    provider = NatsSchedulerProvider(settings_for(url, count))
    provider.configure()
    await provider.start(RecordingRunHandler())
    await provider.until_ready()
    running = provider.runtime
    assert running is not None
    checkpointing = getattr(running, "checkpointing", None)  # None: a release without them
    if checkpointing is not None:
        checkpointing.enabled = False  # its loop writes none: the one below is timed
    with Step(timer) as step:
        await provider.reconcile(listed)
    figures = {"load_s": step.seconds, "load_cpu_s": step.cpu_seconds,
               "load_gc_s": step.gc_seconds, "load_server_s": step.server_seconds}
    if checkpoint and checkpointing is not None:
        with Step(timer) as written:
            if not await checkpointing.write_now():
                raise SystemExit("no checkpoint was written (see the log)")
        figures["checkpoint_s"] = written.seconds
    emit(**figures)
    await provider.stop()


async def restart_main(url: str, count: int, started: datetime, walk: bool) -> None:
    """A fresh process as AstraBox restarting: ``start()``, then ``reconcile`` unchanged."""
    timer = GcTimer()
    listed = schedules(count, started)
    gc.collect()
    rss_list = rss_mb()
    provider = NatsSchedulerProvider(settings_for(url, count))
    provider.configure()
    with Step(timer) as start:
        await provider.start(RecordingRunHandler())
    assert provider.runtime is not None
    ready_at: list[float] = []
    waiter = asyncio.create_task(provider.until_ready())
    waiter.add_done_callback(lambda _: ready_at.append(time.perf_counter()))
    with Step(timer) as first:
        await provider.reconcile(listed)
    await waiter
    # The background warm-up (each deployment's newest Run, the last day's Runs) begins at
    # readiness; the steps below wait for it, so each measures its own reconcile: it
    # overlapped them by a share that depended on the size (most of its 0.8 s at a
    # million, half of its 0.08 s at 100,000), which no reconcile figure should carry.
    with Step(timer) as warm_up, contextlib.suppress(TimeoutError):
        await asyncio.wait_for(provider.runtime.warmed.wait(), SETTLE_TIMEOUT)
    warmed_at = time.perf_counter()
    with Step(timer) as again:
        await provider.reconcile(listed)
    relisted = changed_share(listed)  # AstraBox's list, built before it calls
    with Step(timer) as partly:
        await provider.reconcile(relisted)
    del relisted
    rss_reconciled = rss_mb()
    gc.collect()
    rss_warmed = rss_mb()
    ticker = provider.ticker
    assert ticker is not None
    figures: dict[str, Any] = dict(
        start_s=start.seconds, ready_s=ready_at[0] - start.began,
        warm_up_s=warmed_at - ready_at[0], warm_up_wait_cpu_s=warm_up.cpu_seconds,
        reconcile_after_start_s=first.seconds, reconcile_after_start_gc_s=first.gc_seconds,
        reconcile_after_start_cpu_s=first.cpu_seconds + start.cpu_seconds,
        reconcile_unchanged_s=again.seconds, reconcile_unchanged_gc_s=again.gc_seconds,
        reconcile_unchanged_cpu_s=again.cpu_seconds,
        reconcile_partly_s=partly.seconds, reconcile_partly_gc_s=partly.gc_seconds,
        reconcile_partly_cpu_s=partly.cpu_seconds,
        reconcile_partly_server_s=partly.server_seconds,
        rss_list_mb=rss_list, state_mb=rss_reconciled - rss_list,
        state_warmed_mb=rss_warmed - rss_list,
        heap=getattr(ticker, "filed", None) or getattr(ticker, "heap_entries", 0),
        planned=ticker.planned, gc_s=timer.seconds, gc_collections=timer.collections,
        from_checkpoint=getattr(getattr(provider.runtime, "checkpointing", None), "loaded",
                                None) or 0)
    if walk:
        from held import breakdown

        figures["breakdown"] = breakdown(provider)
    emit(**figures)
    await provider.stop()


# ----------------------------------------------------------------------------- parent


async def child(*args: str) -> dict[str, Any]:
    proc = await asyncio.create_subprocess_exec(sys.executable, str(SCRIPT), *args,
                                                stdout=asyncio.subprocess.PIPE)
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), CHILD_TIMEOUT)
    except BaseException:
        if proc.returncode is None:
            proc.kill()  # our own child, by its handle
            await proc.wait()
        raise
    lines = [line for line in out.decode().splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"child {args[0]} failed ({proc.returncode}): {out.decode()[-500:]}")
    figures: dict[str, Any] = json.loads(lines[-1])
    return figures


async def one_repeat(count: int, started: datetime, walk: bool,
                     checkpoint: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp, NatsServer(tmp).start() as server:
        common = ["--url", server.url, "--schedules", str(count), "--started",
                  started.isoformat(), "--server-pid", str(server.pid or "")]
        figures = await child("--child-load", *common,
                              *([] if checkpoint else ["--no-checkpoint"]))
        figures["replay_s"] = await raw_replay_seconds(server.url, PREFIX, count)
        figures["lookups_s"] = dict_lookups_seconds(count)
        figures.update(await child("--child-restart", *common,
                                   *(["--breakdown"] if walk else [])))
        return figures


def dict_lookups_seconds(count: int) -> float:
    """Reference, same run: ``count`` lookups in a dict of ``count`` deployment IDs, each by
    an equal string of its own (as a reconcile looks AstraBox's Schedules up in the table),
    in the order they were added. Linear work; its growth from one size to the next is what
    this machine's caches add to any pass over that many Schedules (best of three)."""
    keys = [f"dep-{i:09d}" for i in range(count)]
    table = dict.fromkeys(keys, 0)
    asked = [f"dep-{i:09d}" for i in range(count)]
    best = float("inf")
    for _ in range(3):
        began = time.perf_counter()
        for key in asked:
            table.get(key)
        best = min(best, time.perf_counter() - began)
    return best


ROWS = (
    ("load_s", "first reconcile, all new", "s"),
    ("load_cpu_s", "  this process's CPU meanwhile", "s"),
    ("load_gc_s", "  of it in the garbage collector", "s"),
    ("load_server_s", "  the server's CPU meanwhile", "s"),
    ("checkpoint_s", "then its checkpoint written", "s"),
    ("replay_s", "reference: raw replay of the Schedule subjects", "s"),
    ("start_s", "fresh process: start()", "s"),
    ("ready_s", "fresh process: ready (table loaded, planned)", "s"),
    ("reconcile_after_start_s", "then reconcile unchanged (waits for the table)", "s"),
    ("reconcile_after_start_cpu_s", "  this process's CPU from start() on", "s"),
    ("reconcile_after_start_gc_s", "  of it in the garbage collector", "s"),
    ("warm_up_s", "background warm-up, from ready to done", "s"),
    ("warm_up_wait_cpu_s", "  this process's CPU while waiting for its end", "s"),
    ("reconcile_unchanged_s", "reconcile unchanged again, table loaded", "s"),
    ("reconcile_unchanged_cpu_s", "  this process's CPU meanwhile", "s"),
    ("reconcile_unchanged_gc_s", "  of it in the garbage collector", "s"),
    ("lookups_s", "  reference: N dict lookups (this machine's caches)", "s"),
    ("reconcile_partly_s", f"reconcile, 1 in {CHANGED_SHARE} changed", "s"),
    ("reconcile_partly_cpu_s", "  this process's CPU meanwhile", "s"),
    ("reconcile_partly_gc_s", "  of it in the garbage collector", "s"),
    ("reconcile_partly_server_s", "  the server's CPU meanwhile", "s"),
    ("state_mb", "RSS after the reconciles less the caller's list", "MB"),
    ("state_warmed_mb", "the same after a full collection", "MB"),
    ("rss_list_mb", "RSS with the caller's list, before start()", "MB"),
    ("heap", "Schedules filed by the ticker (heap entries before)", ""),
    ("from_checkpoint", "Schedules the restart loaded from a checkpoint", ""),
)


def report(results: dict[int, list[dict[str, Any]]]) -> None:
    sizes = sorted(results)
    medians = {n: {key: statistics.median(r.get(key, 0.0) for r in rows)
                   for key, _, _ in ROWS} for n, rows in results.items()}
    print(f"\n{'figure (median of repeats)':<52}"
          + "".join(f"{n:>14,}" for n in sizes)
          + "".join(f"{'growth x' + format(n // sizes[0], ','):>14}" for n in sizes[1:]))
    for key, label, unit in ROWS:
        line = f"{label + (' (' + unit + ')' if unit else ''):<52}"
        line += "".join(f"{medians[n][key]:>14,.2f}" for n in sizes)
        line += "".join(f"{medians[n][key] / medians[sizes[0]][key]:>14.1f}"
                        if medians[sizes[0]][key] else f"{'':>14}" for n in sizes[1:])
        print(line)
    for n in sizes[1:]:
        print(f"\ngrowth from {sizes[0]:,} to {n:,} in each repeat (the two sizes measured "
              "one after the other):")
        for key, label, _ in ROWS:
            pairs = [(big.get(key, 0.0), small.get(key, 0.0))
                     for big, small in zip(results[n], results[sizes[0]], strict=False)]
            if any(small for _, small in pairs):
                print(f"  {label:<50} " + ", ".join(
                    f"{big / small:.1f}" if small else "-" for big, small in pairs))
    for n in sizes:
        print(f"\n{n:,} Schedules, each repeat:")
        for key, label, _ in ROWS:
            print(f"  {label:<50} " + ", ".join(f"{r.get(key, 0.0):,.2f}"
                                                  for r in results[n]))
        walked = [r["breakdown"] for r in results[n] if "breakdown" in r]
        if walked:
            print("  structures walked (first repeat), bytes per Schedule:")
            for name, size in walked[0].items():
                print(f"    {name:<40} {size / 2**20:>9.1f} MB {size / n:>8,.0f} B")


async def main(args: argparse.Namespace) -> None:
    """Each repeat measures every size, one after the other (100,000 then 1,000,000, then
    again): this machine's speed drifts by tens of percent over the minutes a million
    takes, and a growth figure is only fair when both of its sizes met the same drift."""
    sizes = [int(n) for n in args.schedules.split(",")]
    results: dict[int, list[dict[str, Any]]] = {count: [] for count in sizes}
    for repeat in range(args.repeats):
        for count in sizes:
            started = datetime.now(UTC)
            figures = await one_repeat(count, started, args.breakdown and repeat == 0,
                                       not args.no_checkpoint)
            results[count].append(figures)
            print(f"{count:,} Schedules, repeat {repeat + 1}: " + ", ".join(
                f"{k} {v:,.2f}" for k, v in figures.items() if isinstance(v, float | int)),
                flush=True)
    report(results)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--schedules", default="100000,1000000",
                        help="Schedules held, or several sizes separated by commas")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--breakdown", action="store_true",
                        help="walk the restarted replica's structures (slow at 1,000,000)")
    parser.add_argument("--no-checkpoint", action="store_true",
                        help="no checkpoint of the table: the restart replays every Schedule")
    parser.add_argument("--child-load", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child-restart", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--started", help=argparse.SUPPRESS)
    parser.add_argument("--server-pid", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


if __name__ == "__main__":
    arguments = parse()
    if arguments.child_load or arguments.child_restart:
        SERVER_PID = int(arguments.server_pid) if arguments.server_pid else None
        when = datetime.fromisoformat(arguments.started)
        number = int(arguments.schedules)
        asyncio.run(load_main(arguments.url, number, when, not arguments.no_checkpoint)
                    if arguments.child_load
                    else restart_main(arguments.url, number, when, arguments.breakdown))
    else:
        asyncio.run(main(arguments))
