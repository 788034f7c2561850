"""The nats provider beside DBOS (SQLite): fire lateness, Run now, how fast a pause stops firing.

    .venv/bin/pip install -e '.[bench]'                   # DBOS and what it needs
    .venv/bin/python bench/dbos_compare.py                # 64 and 1,000 Schedules (about 6 minutes)
    .venv/bin/python bench/dbos_compare.py --nats-manual  # the provider on a ManualClock
    .venv/bin/python bench/dbos_compare.py --sizes 10000 --skip-nats --skip-pause

Both sides call the same instant handler (``bench/firing.py``'s ``InstantHandler``) and are
measured on this machine in the same run, one after the other (never at once: they would
share the two cores):

- fire lateness: N Schedules due every minute, all due at the same real minute boundary; the
  lateness of each first ``start_session`` after the due time. DBOS's sizes are stacked
  (64 schedules at one boundary, 936 more for a later one: DBOS is launched once per run);
  the provider gets a fresh namespace per size. The provider's figures come from
  ``bench/firing.py`` (``fire_real``, one replica; ``fire_manual`` with ``--nats-manual``).
  DBOS: dynamic schedules (``DBOS.apply_schedules``, six-field cron ``0 * * * * *``) of an
  async workflow. DBOS 3.4 has no ``@DBOS.scheduled`` decorator any more; its schedules
  live in the system database and each runs on its own thread, which sleeps until the due
  time PLUS a random jitter of up to 10 % of the sleep (at most 10 s, against a thundering
  herd across processes), then enqueues the workflow on an internal queue polled every
  second.
- Run now: 64 concurrent callers for a few seconds: the provider's ``enqueue`` (stored
  PENDING on return) against ``DBOS.start_workflow_async`` (the workflow's status row
  stored on return); then how fast those Runs reach the handler and finish.
- Disable to stop: the provider's ``apply(enabled=False)`` while four loops fire due times
  as fast as they can: the last Run stored after ``apply`` returned. DBOS has a per-schedule
  pause (``DBOS.pause_schedule``); it only changes the row: the schedule's thread keeps
  firing until the scheduler's next poll of the schedules table
  (``scheduler_polling_interval_sec``, 30 s by default, 1 s during the first minute after
  launch). Measured with a schedule firing every second (``* * * * * *``): the last fire
  started after ``pause_schedule`` returned, and how many fires came after it.

Nothing is asserted; the figures are printed side by side.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dbos import DBOS
from firing import (
    CALLERS,
    PAYLOAD,
    EnqueueRun,
    FiringRun,
    InstantHandler,
    enqueue_run,
    fire_manual,
    fire_real,
    next_boundary,
    poll,
    references,
    sleep_until_wall,
    spread,
)

from nats_scheduler import NatsSchedulerProvider, NatsSettings
from nats_scheduler.core import calendar
from nats_scheduler.natsserver.process import NatsServer
from nats_scheduler.seam import RunInvocation, Schedule, Trigger

PAUSE_PROBE = "pause-probe"
DESTROY_UP_TO = 2000
"""Above this many schedules, ``DBOS.destroy`` is skipped (see :func:`dbos_side`)."""
MINUTE_CRON = "0 * * * * *"
"""DBOS's cron has six fields, seconds first: second 0 of every minute."""

# ----------------------------------------------------------------------------- DBOS side

handler = InstantHandler()
"""The instant handler of the DBOS side (its workflows are module-level, so is it)."""

probe_handler = InstantHandler()
"""The handler of the pause probe's fires, kept apart from the measured ones."""


def invocation(run_id: str, deployment: str, due: datetime | None) -> RunInvocation:
    trigger = Trigger.SCHEDULE if due is not None else Trigger.RUN_NOW
    return RunInvocation(run_id=run_id, deployment_id=deployment, trigger=trigger, due_at=due,
                         payload=PAYLOAD, attempt=1, session_id=None, replay_of=None)


async def _dispatch(deployment: str, due: datetime | None) -> None:
    """What the provider's dispatcher does per Run: start the Session, admit the turn."""
    run_id = DBOS.workflow_id or "?"
    started = invocation(run_id, deployment, due)
    calls = probe_handler if deployment == PAUSE_PROBE else handler
    session = await calls.start_session(started)
    await calls.admit_turn(RunInvocation(**{**_fields(started), "session_id": session}))


def _fields(inv: RunInvocation) -> dict[str, Any]:
    return {name: getattr(inv, name) for name in inv.__struct_fields__}


@DBOS.workflow()
async def scheduled_run(scheduled_at: datetime, context: Any) -> None:
    await _dispatch(str(context), scheduled_at.astimezone(UTC))


@DBOS.workflow()
async def run_now(deployment: str) -> None:
    await _dispatch(deployment, None)


@dataclass
class EnqueueLike:
    """Run now figures in the provider's terms (stored/s, dispatched/s, return -> start)."""

    enqueue_rate: float
    dispatch_rate: float | None
    to_start: list[float]
    errors: int


@dataclass
class DbosFigures:
    lateness: dict[int, list[float]] = field(default_factory=dict)
    """size -> lateness of each first start_session at its boundary (seconds)"""
    missing: dict[int, int] = field(default_factory=dict)
    """size -> Schedules that had not fired when the wait ended"""
    duplicates: int = 0
    run_now: EnqueueLike | None = None
    pause_stop: float | None = None
    fires_after_pause: int = 0
    pause_wait: float = 0.0


def dbos_launch(workdir: Path, log_level: str = "WARNING") -> float:
    """DBOS on a fresh SQLite system database; returns the launch instant (wall time)."""
    DBOS(config={"name": "bench-compare", "log_level": log_level,
                 "system_database_url": f"sqlite:///{workdir / 'dbos.sqlite'}"})
    DBOS.launch()
    return time.time()


async def dbos_fire(sizes: list[int], figures: DbosFigures, launched: float, *,
                    cleanup: bool) -> None:
    """Stack the schedules size by size; measure each size at the next boundary it can make.

    ``cleanup``: delete the schedules afterwards (their threads stop at the next poll), so
    that they do not fire during the phases that follow.
    """
    have = 0
    for size in sizes:
        await asyncio.to_thread(DBOS.apply_schedules, [
            {"schedule_name": f"cmp-{i:05d}", "workflow_fn": scheduled_run,
             "schedule": MINUTE_CRON, "context": f"dep-{i:05d}"} for i in range(have, size)])
        # The scheduler starts a schedule's thread at its next poll of the table (every
        # second during the first minute after launch, then every 30 s by default), one
        # thread per schedule: the boundary must come after that poll and those starts.
        fast = time.time() - launched < 50
        margin = (3.0 if fast else 32.0) + 0.002 * (size - have)
        have = size
        due = next_boundary(time.time() + margin)
        due_iso = datetime.fromtimestamp(due, UTC).isoformat()
        print(f"DBOS: {size:,} schedules due at {due_iso} (pid {os.getpid()})", flush=True)
        await sleep_until_wall(due)
        await poll(lambda d=due_iso, n=size: handler.per_due[d] >= n, timeout=55.0, interval=0.1)
        figures.lateness[size] = [wall - d for d, wall in list(handler.starts.values())
                                  if d == due]
        figures.missing[size] = size - handler.per_due[due_iso]
    figures.duplicates = handler.extra_starts
    if cleanup:
        names = [f"cmp-{i:05d}" for i in range(have)]
        await asyncio.to_thread(lambda: [DBOS.delete_schedule(n) for n in names])


async def dbos_run_now(seconds: float) -> EnqueueLike:
    """``CALLERS`` concurrent callers of ``DBOS.start_workflow_async`` for ``seconds``."""
    returned: dict[str, float] = {}
    errors = 0
    began, wall = time.perf_counter(), time.time()

    async def caller(i: int) -> None:
        nonlocal errors
        while time.perf_counter() - began < seconds:
            try:
                handle = await DBOS.start_workflow_async(run_now, f"dep-{i:05d}")
                returned[handle.get_workflow_id()] = time.time()
            except Exception:
                errors += 1

    await asyncio.gather(*(caller(i) for i in range(CALLERS)))
    elapsed = time.perf_counter() - began
    done = await poll(lambda: handler.admitted >= len(returned), timeout=120)
    done_in = time.time() - wall if done else None
    to_start = [handler.starts[r][1] - t for r, t in returned.items() if r in handler.starts]
    return EnqueueLike(len(returned) / elapsed,
                       None if done_in is None else len(returned) / done_in, to_start, errors)


async def dbos_pause(figures: DbosFigures, launched: float) -> None:
    """Pause an every-second schedule; how long it keeps firing (until the scheduler polls)."""
    await poll(lambda: _probe_fires(0.0) >= 3, timeout=40.0)
    await asyncio.to_thread(DBOS.pause_schedule, PAUSE_PROBE)
    paused = time.time()
    figures.pause_wait = 30.0 + 3.0 if paused - launched > 60 else 1.0 + 3.0
    await asyncio.sleep(figures.pause_wait)
    after = [wall for due, wall in list(probe_handler.starts.values())
             if due is not None and due > paused]
    figures.fires_after_pause = len(after)
    figures.pause_stop = (max(after) - paused) if after else None


def _probe_fires(after: float) -> int:
    return sum(1 for due, _ in list(probe_handler.starts.values())
               if due is not None and due > after)


async def dbos_side(sizes: list[int], run_now_seconds: float, pause: bool) -> DbosFigures:
    figures = DbosFigures()
    workdir = Path(tempfile.mkdtemp(prefix="dbos-compare-"))
    launched = await asyncio.to_thread(dbos_launch, workdir)
    try:
        if pause:  # created now so it is running (and past its first minute) at the pause
            await asyncio.to_thread(
                DBOS.create_schedule, schedule_name=PAUSE_PROBE, workflow_fn=scheduled_run,
                schedule="* * * * * *", context=PAUSE_PROBE)
        if sizes:
            await dbos_fire(sizes, figures, launched, cleanup=run_now_seconds > 0 or pause)
        if run_now_seconds > 0:
            figures.run_now = await dbos_run_now(run_now_seconds)
        if pause:
            await dbos_pause(figures, launched)
    finally:
        if max(sizes, default=0) <= DESTROY_UP_TO:
            await asyncio.to_thread(DBOS.destroy)
        # Else left to the process exit: destroy joins each schedule's thread in turn (5 s
        # timeout each), which at 10,000 schedules stuck on the connection pool takes many
        # minutes. Its threads are daemons.
        shutil.rmtree(workdir, ignore_errors=True)
    return figures


# ----------------------------------------------------------------------------- nats side


@dataclass
class NatsFigures:
    lateness: dict[int, list[float]] = field(default_factory=dict)
    missing: dict[int, int] = field(default_factory=dict)
    duplicates: int = 0
    run_now: EnqueueRun | None = None
    gathered: float = 0.0
    pause_stop: float | None = None
    stored_after_pause: int = 0
    stored_before_pause: int = 0


async def nats_pause(server: NatsServer, figures: NatsFigures) -> None:
    """Four loops fire due times as fast as they can; ``apply(enabled=False)`` mid-storm.

    The calendar (every hour of 29 February) never comes due for real, so only the loops
    fire it. Figure: the last Run stored (``fire_due`` returned it) after ``apply`` returned.
    """
    provider = NatsSchedulerProvider(NatsSettings(url=server.url, prefix="PAUSE"))
    provider.configure()
    await provider.start(InstantHandler())
    probe = Schedule("pause-probe", "probe", "0 * 29 2 *", "UTC", True, PAYLOAD, 1)
    await provider.apply(probe)
    stored: list[float] = []
    stop = asyncio.Event()

    async def loop(k: int) -> None:
        due = datetime(2032, 1, 1, tzinfo=UTC)
        n = 0
        while not stop.is_set():
            due = calendar.next_due(probe.cron, "UTC", due)
            n += 1
            if n % 4 == k and await provider.fire_due(probe.deployment_id, due) is not None:
                stored.append(time.time())

    loops = [asyncio.create_task(loop(k)) for k in range(4)]
    try:
        await asyncio.sleep(0.5)
        await provider.apply(Schedule(**{**_schedule_fields(probe), "enabled": False,
                                         "version": 2}))
        paused = time.time()
        await asyncio.sleep(1.0)
    finally:
        stop.set()
        await asyncio.gather(*loops, return_exceptions=True)
        await provider.stop()
    after = [t for t in stored if t > paused]
    figures.stored_before_pause = len(stored) - len(after)
    figures.stored_after_pause = len(after)
    figures.pause_stop = max(stored) - paused if stored else None


def _schedule_fields(schedule: Schedule) -> dict[str, Any]:
    return {name: getattr(schedule, name) for name in schedule.__struct_fields__}


async def nats_side(sizes: list[int], run_now_seconds: float, pause: bool,
                    manual: bool) -> NatsFigures:
    figures = NatsFigures()
    with tempfile.TemporaryDirectory() as tmp, NatsServer(tmp).start() as server:
        refs = await references(server.url, 2000, with_schedules=False)
        figures.gathered = refs.rates.gathered
        for size in sizes:
            prefix = f"CMP{size}"
            run: FiringRun = (await fire_manual(server, size, boundaries=1, prefix=prefix)
                              if manual else
                              await fire_real(server, size, boundaries=1, prefix=prefix))
            boundary = run.boundaries[0]
            figures.lateness[size] = boundary.starts
            figures.missing[size] = size - len(boundary.starts)
            figures.duplicates += run.extra_starts + boundary.duplicate_runs
        if run_now_seconds > 0:
            figures.run_now = await enqueue_run(server, seconds=run_now_seconds)
        if pause:
            await nats_pause(server, figures)
    return figures


# ----------------------------------------------------------------------------- report


def _late(values: list[float] | None) -> str:
    return "not measured" if values is None else spread(values)


def _rate(value: float | None, gathered: float) -> str:
    if value is None:
        return "not measured"
    ratio = f" ({value / gathered:.3f}x gathered)" if gathered else ""
    return f"{value:,.0f}/s{ratio}"


def print_side_by_side(sizes: list[int], nats_fig: NatsFigures | None,
                       dbos_fig: DbosFigures | None, manual: bool) -> None:
    clock = "ManualClock" if manual else "real clock"
    print(f"\n| figure | nats provider (1 replica, {clock}) | DBOS 3.4 (SQLite) |")
    print("| --- | --- | --- |")
    for size in sizes:
        n_late = nats_fig.lateness.get(size) if nats_fig else None
        d_late = dbos_fig.lateness.get(size) if dbos_fig else None
        print(f"| {size:,} Schedules due at once: start_session lateness | {_late(n_late)} "
              f"| {_late(d_late)} |")
        n_miss = nats_fig.missing.get(size, "-") if nats_fig else "-"
        d_miss = dbos_fig.missing.get(size, "-") if dbos_fig else "-"
        print(f"| {size:,}: not started within the wait | {n_miss} | {d_miss} |")
    print(f"| repeated start_session calls (duplicates) | "
          f"{nats_fig.duplicates if nats_fig else '-'} | "
          f"{dbos_fig.duplicates if dbos_fig else '-'} |")
    gathered = nats_fig.gathered if nats_fig else 0.0
    n_now = nats_fig.run_now if nats_fig else None
    d_now = dbos_fig.run_now if dbos_fig else None
    print(f"| Run now, {CALLERS} callers: stored on return | "
          f"{_rate(n_now.enqueue_rate if n_now else None, gathered)} | "
          f"{_rate(d_now.enqueue_rate if d_now else None, gathered)} |")
    print(f"| Run now: handled (start_session + admit_turn) | "
          f"{_rate(n_now.dispatch_rate if n_now else None, gathered)} | "
          f"{_rate(d_now.dispatch_rate if d_now else None, gathered)} |")
    print(f"| Run now: returned -> start_session | "
          f"{_late(n_now.to_start if n_now else None)} | "
          f"{_late(d_now.to_start if d_now else None)} |")
    print(f"| disable -> firing stops (last fire after it) | {_nats_pause(nats_fig)} | "
          f"{_dbos_pause(dbos_fig)} |")
    if gathered:
        print(f"\nratios are to the server's gathered acknowledged-publish rate, same run: "
              f"{gathered:,.0f}/s")


def _nats_pause(fig: NatsFigures | None) -> str:
    if fig is None or fig.pause_stop is None:
        return "not measured"
    return (f"apply(enabled=False): last Run stored {fig.pause_stop * 1000:+,.1f} ms after it "
            f"returned ({fig.stored_after_pause} stored after, {fig.stored_before_pause} "
            "before; declared bound 0.5 s)")


def _dbos_pause(fig: DbosFigures | None) -> str:
    if fig is None or (fig.pause_stop is None and fig.fires_after_pause == 0 and
                       fig.pause_wait == 0):
        return "not measured"
    last = "none" if fig.pause_stop is None else f"{fig.pause_stop:,.1f} s"
    return (f"pause_schedule: last fire {last} after it returned, {fig.fires_after_pause} "
            f"fires after it (watched {fig.pause_wait:.0f} s; stops at the scheduler's next "
            "poll, 30 s by default)")


# ----------------------------------------------------------------------------- main


async def main(args: argparse.Namespace) -> None:
    sizes = sorted({int(s) for s in args.sizes.split(",") if s})
    nats_fig = None
    if not args.skip_nats:
        nats_fig = await nats_side(sizes, args.run_now_seconds, not args.skip_pause,
                                   args.nats_manual)
    dbos_fig = None
    if not args.skip_dbos:
        dbos_fig = await dbos_side(sizes, args.run_now_seconds, not args.skip_pause)
    print_side_by_side(sizes, nats_fig, dbos_fig, args.nats_manual)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="64,1000",
                        help="Schedule counts, stacked: measured at successive boundaries")
    parser.add_argument("--run-now-seconds", type=float, default=5.0,
                        help="length of the Run now phase (0: skip it)")
    parser.add_argument("--nats-manual", action="store_true",
                        help="the provider on a ManualClock in-process (no minute waits)")
    parser.add_argument("--skip-nats", action="store_true")
    parser.add_argument("--skip-dbos", action="store_true")
    parser.add_argument("--skip-pause", action="store_true")
    asyncio.run(main(parser.parse_args()))
