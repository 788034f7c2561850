"""Held: N enabled Schedules kept by ONE replica, against same-run references.

    .venv/bin/python bench/held.py                                   # 100,000 Schedules, 60 s idle
    .venv/bin/python bench/held.py --schedules 10000,100000 --idle-seconds 20   # both sizes
    .venv/bin/python bench/held.py --runs-per-schedule 0             # no Run history at all

Why this exists: ``max_active_schedules`` (docs/configuration.md) must be what a replica
provably holds. A replica that holds N Schedules keeps one table entry and one ticker entry per
Schedule and loads them all at start, so the figures that bound N are: how fast N can be
applied, how long a replica takes to start with N stored, its resident memory, and the CPU it
burns while nothing is due.

What it does, on one nats-server started here:

1. Reference (a): the raw rate of gathered acknowledged publishes (64 concurrent callers) of
   Schedule-sized messages to the same server: an apply is at least one conditional publish
   (and a leader read when this process's copy of the Schedule is stale), so it cannot beat
   this. Beside it, the NATS maintainers' ``nats bench js pub`` (sync with 64 clients, async,
   atomic batches) of messages of the same size on the same server (bench/natsbench.py).
2. Applies N enabled ``M H * * *`` Schedules (minutes and hours varied, several time zones)
   through the provider's public ``apply`` with 64 concurrent callers, from a loader whose
   ManualClock never moves (it never fires), then ``reconcile`` of the same N (unchanged,
   as at an AstraBox restart; three times, for a median), then ``reconcile`` of the same N
   with every one changed (a new version and prompt) against the ``apply`` rate. Then
   stores ``--runs-per-schedule`` finished Runs per Schedule over the last day (raw, in
   the provider's order), so a replica starts, warms up and applies retention as it does in
   production, where every deployment has a history (with none, start-up skips each
   deployment's newest Run and a retention pass skips its purges: the figures would
   flatter both). Every Schedule's next due time is at least
   ``QUIET`` after the bench started, so the idle windows below have no due time in them.
3. Reference (b): the raw replay of the N Schedule subjects (an ordered consumer, last message
   per subject, nothing decoded): the floor of what a replica's start-up reads.
4. Starts replica processes (a child mode of this script, real clock, admin service on, as in
   production) and measures each from outside: ``start()`` time (measured inside the child),
   resident memory (VmRSS) after the idle window and VmHWM (the peak, retention pass
   included), and its CPU over an idle window (``/proc/<pid>/stat`` utime+stime deltas over
   wall time). Then one history-retention pass as the replica runs it every
   ``retention_interval`` (the next slice of the deployments, every one of them at least
   once an hour; one live replica runs it), with its CPU amortized over that interval:
   idle CPU is the window's plus that share. First a replica of an empty prefix (the
   reference: what a replica costs with no Schedule), then one holding the N. The
   nats-server's own CPU over the same spans is printed beside them. ``start()`` returns
   before the Schedules are loaded (docs/architecture.md, "Start-up and readiness"), so
   each replica also says when it was ready, against reference (b).
5. Memory, per structure: after the idle window each replica measures its own Schedule
   table, ticker, metrics and Run ledger (a walk of the objects each holds, every object
   counted once, in that order) beside its resident memory.
6. An hour's worth of firing: one more replica, on a ManualClock set past the quiet span,
   moves its clock a minute at a time through an hour and fires what falls due (about N/24
   Runs, dispatched to an instant handler), then measures the same.

Nothing is asserted; figures and ratios are printed.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import random
import resource
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
import nats
from nats.js.api import ConsumerConfig, DeliverPolicy, StreamConfig
from natsbench import nats_bench

from nats_scheduler import ManualClock, NatsSchedulerProvider, NatsSettings
from nats_scheduler.core import calendar, runcore
from nats_scheduler.core.events import ScheduleApplied, ScheduleRecord, encode
from nats_scheduler.jetstream.history import IndexEntry
from nats_scheduler.names import HDR_MSG_ID, Names, index_msg_id, scheduled_run_id
from nats_scheduler.natsserver.process import NatsServer
from nats_scheduler.seam import RunInvocation, RunPayload, Schedule, Trigger
from nats_scheduler.testing.handler import RecordingRunHandler

RECONCILE_REPEATS = 3
"""Unchanged reconciles timed per size (the median is printed)."""

CALLERS = 64
"""Concurrent callers of ``apply`` and of the gathered-publish reference."""

QUIET = timedelta(hours=2)
"""No Schedule is due this soon after the bench starts: the idle windows fall inside it."""

ZONES = ("UTC", "Europe/Paris", "America/New_York", "Asia/Tokyo", "Australia/Sydney",
         "Asia/Kolkata", "America/Los_Angeles")
"""Time zones the Schedules are spread over (whole, half-hour and DST-observing offsets)."""

REFERENCE_PUBLISHES = 20_000
"""At most this many messages in reference (a): its rate does not depend on the count."""

SETTLE_SECONDS = 5.0
"""Wait after a replica is ready before its idle window (its background warm-up ends)."""

START_TIMEOUT = 900.0
"""Seconds a replica may take to start before the bench gives up on it."""

PREFIX = "HELD"
EMPTY_PREFIX = "HELDEMPTY"
PAYLOAD = RunPayload("agent:bench", "summarise the night's incidents")
CHANGED_PAYLOAD = RunPayload("agent:bench", "summarise the night's incidents, then page")
SCRIPT = Path(__file__).resolve()
TICKS = os.sysconf("SC_CLK_TCK")


# ----------------------------------------------------------------------------- Schedules


def quiet_schedules(count: int, now: datetime, seed: int = 1) -> list[Schedule]:
    """``count`` daily Schedules spread over the day, none due within ``QUIET`` of ``now``."""
    rng = random.Random(seed)
    schedules = []
    for i in range(count):
        zone = ZONES[i % len(ZONES)]
        while True:
            cron = f"{rng.randrange(60)} {rng.randrange(24)} * * *"
            due = calendar.next_due(cron, zone, now)
            if due is not None and due >= now + QUIET:
                break
        dep = f"held-{i:06d}"
        schedules.append(Schedule(dep, dep, cron, zone, True, PAYLOAD, 1))
    return schedules


def settings_for(url: str, prefix: str, count: int, **extra: Any) -> NatsSettings:
    return NatsSettings(url=url, prefix=prefix, max_active_schedules=max(count, 1), **extra)


@dataclass
class Writes:
    """How fast the Schedules went in, and how fast an AstraBox restart's reconcile is."""

    apply_rate: float
    reconcile_unchanged_s: list[float]
    reconcile_changed_rate: float


async def apply_all(url: str, schedules: list[Schedule]) -> Writes:
    """Apply through a loader provider that never fires, then reconcile the same Schedules
    unchanged (``RECONCILE_REPEATS`` times), then reconcile them all changed.

    ``apply`` rate: ``CALLERS`` concurrent callers. ``reconcile`` is one call; unchanged
    Schedules write nothing, changed ones are written pipelined (docs/architecture.md).
    The changed set keeps every calendar, so it stays quiet.
    """
    provider = NatsSchedulerProvider(
        settings_for(url, PREFIX, len(schedules), admin_service=False),
        clock=ManualClock(datetime.now(UTC)))
    provider.configure()
    await provider.start(RecordingRunHandler())
    await provider.until_ready()
    limit = asyncio.Semaphore(CALLERS)

    async def one(schedule: Schedule) -> None:
        async with limit:
            await provider.apply(schedule)

    try:
        began = time.perf_counter()
        await asyncio.gather(*(one(s) for s in schedules))
        applied = len(schedules) / max(time.perf_counter() - began, 1e-9)
        unchanged = []
        for _ in range(RECONCILE_REPEATS):
            began = time.perf_counter()
            await provider.reconcile(schedules)
            unchanged.append(time.perf_counter() - began)
        changed = [msgspec.structs.replace(s, payload=CHANGED_PAYLOAD, version=s.version + 1)
                   for s in schedules]
        began = time.perf_counter()
        await provider.reconcile(changed)
        changed_rate = len(schedules) / max(time.perf_counter() - began, 1e-9)
        return Writes(applied, unchanged, changed_rate)
    finally:
        await provider.stop()


async def fill_history(url: str, schedules: list[Schedule], runs_each: int,
                       chunk: int = 5_000) -> float:
    """Store ``runs_each`` finished scheduled Runs per Schedule over the last day, as the
    provider writes them (the index entry acknowledged before the Run's events); returns
    seconds. Written raw: firing 100,000 due times through a provider is bench/firing.py's
    subject, not this one's."""
    names = Names(PREFIX)
    nc = await nats.connect(url)
    js = nc.jetstream(timeout=30)
    first = datetime.now(UTC) - timedelta(days=1)
    pairs = [(s.deployment_id, k) for k in range(runs_each) for s in schedules]
    step = timedelta(hours=23) / max(len(pairs), 1)
    began = time.perf_counter()
    try:
        for start in range(0, len(pairs), chunk):
            await _fill_chunk(js, names, pairs[start:start + chunk], first + step * start, step)
    finally:
        await nc.close()
    return time.perf_counter() - began


async def _fill_chunk(js: Any, names: Names, pairs: list[tuple[str, int]], at: datetime,
                      step: timedelta) -> None:
    acked = []
    for i, (dep, _) in enumerate(pairs):
        due = (at + step * i).replace(second=0, microsecond=0)
        run_id = scheduled_run_id(dep, due)
        entry = msgspec.json.encode(IndexEntry(run_id=run_id, created_at=due))
        acked.append((dep, run_id, due, await js.publish_async(
            names.index_subject(dep), entry, headers={HDR_MSG_ID: index_msg_id(run_id)})))
    await js.publish_async_completed()
    for dep, run_id, due, ack in acked:
        created = runcore.indexed(runcore.create(
            run_id=run_id, deployment_id=dep, trigger=Trigger.SCHEDULE, due_at=due,
            payload=PAYLOAD, now=due, actor="bench"), (await ack).seq)
        claimed = runcore.claim(created.run, holder="bench", now=due)
        done = runcore.dispatched(claimed.run, turn_id="t", now=due, actor="bench")
        subject = names.run_subject(dep, run_id)
        for event in (created, claimed, done):
            await js.publish_async(subject, encode(event))
    await js.publish_async_completed()


# ----------------------------------------------------------------------------- references


def schedule_sized_payload(schedule: Schedule) -> bytes:
    """A ``schedule.applied`` as the provider encodes it: reference (a) publishes these."""
    now = datetime.now(UTC)
    record = ScheduleRecord.of(schedule, updated_at=now, hold=None)
    return encode(ScheduleApplied(at=now, actor="bench-host-12345-abcdef", schedule=record))


async def gathered_publish_rate(url: str, count: int, payload: bytes) -> float:
    """Reference (a): acknowledged publishes/s, ``CALLERS`` callers awaiting ``js.publish``."""
    nc = await nats.connect(url)
    js = nc.jetstream(timeout=30)
    try:
        await js.add_stream(StreamConfig(name="HELD_REF", subjects=["heldref.>"]))

        async def caller(worker: int) -> None:
            for i in range(worker, count, CALLERS):
                await js.publish(f"heldref.{i}", payload)

        began = time.perf_counter()
        await asyncio.gather(*(caller(w) for w in range(CALLERS)))
        rate = count / (time.perf_counter() - began)
        await js.delete_stream("HELD_REF")
        return rate
    finally:
        await nc.close()


async def raw_replay_seconds(url: str, prefix: str, count: int) -> float:
    """Reference (b): an ordered consumer receiving the last event of every Schedule."""
    names = Names(prefix)
    nc = await nats.connect(url)
    js = nc.jetstream(timeout=30)
    received = 0
    done = asyncio.Event()

    async def on_msg(_msg: Any) -> None:
        nonlocal received
        received += 1
        if received >= count:
            done.set()

    try:
        began = time.perf_counter()
        sub = await js.subscribe(
            names.schedules_filter, stream=names.schedules_stream, cb=on_msg, ordered_consumer=True,
            config=ConsumerConfig(deliver_policy=DeliverPolicy.LAST_PER_SUBJECT))
        await asyncio.wait_for(done.wait(), START_TIMEOUT)
        elapsed = time.perf_counter() - began
        await sub.unsubscribe()
        return elapsed
    finally:
        await nc.close()


# ----------------------------------------------------------------------------- child replica


def _status_kb(pid: int | str, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (fields 14 and 15 of ``/proc/<pid>/stat``), in seconds."""
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text[text.rindex(")") + 2:].split()  # the command name may hold spaces
    return (int(fields[11]) + int(fields[12])) / TICKS


def own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def deep_size(root: object, seen: set[int]) -> int:
    """Bytes of ``root`` and of every object it holds not already in ``seen`` (sys.getsizeof
    of each: containers, msgspec Structs, slotted and plain objects; strings, numbers and
    datetimes as leaves). Shared objects count once, where they are first reached."""
    total = 0
    stack = [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or obj is None or isinstance(obj, (bool, type)):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        if isinstance(obj, (str, bytes, int, float, datetime, timedelta)):
            continue
        if isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)):
            stack.extend(obj)
        elif hasattr(type(obj), "__struct_fields__"):
            stack.extend(getattr(obj, f) for f in type(obj).__struct_fields__)
        elif hasattr(obj, "__dict__"):
            stack.append(vars(obj))
        else:
            stack.extend(getattr(obj, slot) for slot in getattr(type(obj), "__slots__", ())
                         if hasattr(obj, slot))
    return total


def breakdown(provider: NatsSchedulerProvider) -> dict[str, int]:
    """Bytes held per structure (the walk of :func:`deep_size`, in this order)."""
    gc.collect()
    running = provider.runtime
    assert running is not None and running.ticker is not None
    table, ticker, ledger = provider.schedules, running.ticker, provider.ledger
    parts = {
        "Schedule table": [table._entries, table._texts, table._payloads, table._instants],
        "ticker (due times, plans)": [ticker._instants, ticker._buckets, ticker._current],
        "ledger: summary per deployment": ledger._summaries,
        "ledger: recent and unfinished Runs": [ledger._recent, ledger._unfinished],
    }
    seen: set[int] = set()
    return {name: deep_size(root, seen) for name, root in parts.items()}


def _rss_kb() -> int:
    return _status_kb("self", "VmRSS")


async def child_main(url: str, prefix: str, count: int) -> None:
    """One replica: start, say how long it took and when it was ready, hold the Schedules
    until stdin closes.

    A ``retention`` line on stdin runs one history-retention pass now (the slice the
    replica's loop visits every ``retention_interval``) and answers its wall time and this
    process's CPU time; a ``breakdown`` line answers its memory per structure.
    """
    provider = NatsSchedulerProvider(settings_for(url, prefix, count))
    provider.configure()
    began = time.perf_counter()
    await provider.start(RecordingRunHandler())
    started, rss_started = time.perf_counter() - began, _rss_kb()
    await provider.until_ready()
    ready, rss_ready = time.perf_counter() - began, _rss_kb()
    assert provider.runtime is not None
    await asyncio.wait_for(provider.runtime.warmed.wait(), START_TIMEOUT)
    warmed = time.perf_counter() - began
    ticker = provider.ticker
    assert ticker is not None
    print(json.dumps({"start_s": started, "ready_s": ready, "warmed_s": warmed,
                      "planned": ticker.planned, "rss_start_kb": rss_started,
                      "rss_kb": rss_ready}), flush=True)
    while (line := (await asyncio.to_thread(sys.stdin.readline)).strip()) in (
            "retention", "breakdown"):
        if line == "breakdown":
            # resident memory and its peak BEFORE the walk: the walk's own bookkeeping is
            # the bench's, not the replica's
            rss, peak = _rss_kb(), _status_kb("self", "VmHWM")
            print(json.dumps({"breakdown": breakdown(provider), "rss_kb": rss,
                              "peak_kb": peak}), flush=True)
            continue
        began, cpu = time.perf_counter(), own_cpu()
        assert provider.runtime is not None
        await provider.runtime.retention.run_pass()
        print(json.dumps({"retention_s": time.perf_counter() - began,
                          "retention_cpu_s": own_cpu() - cpu}), flush=True)
    print(json.dumps({"fired": ticker.fired}), flush=True)
    await provider.stop()


class InstantHandler:
    """AstraBox's side answering at once, keeping only a count (its memory is not the
    replica's); ``reached`` is set once ``target`` turns were admitted."""

    def __init__(self) -> None:
        self.admitted = 0
        self.target = 0
        self.reached = asyncio.Event()

    def expect(self, target: int) -> None:
        self.target = target
        if self.admitted >= target:
            self.reached.set()
        else:
            self.reached.clear()

    async def start_session(self, invocation: RunInvocation) -> str:
        return f"sess-{invocation.run_id}"

    async def admit_turn(self, invocation: RunInvocation) -> str:
        self.admitted += 1
        if self.admitted >= self.target:
            self.reached.set()
        return f"turn-{invocation.run_id}"


async def firing_child_main(url: str, prefix: str, count: int, at: str) -> None:
    """A replica on a ManualClock set to ``at`` (past the quiet span): moves it a minute at
    a time through an hour, waiting each minute until the due times in it are fired and
    dispatched, then answers its memory, per structure, as after start-up."""
    clock = ManualClock(datetime.fromisoformat(at))
    provider = NatsSchedulerProvider(settings_for(url, prefix, count), clock=clock)
    provider.configure()
    handler = InstantHandler()
    await provider.start(handler)
    await provider.until_ready()
    assert provider.runtime is not None
    await asyncio.wait_for(provider.runtime.warmed.wait(), START_TIMEOUT)
    ticker = provider.ticker
    assert ticker is not None
    rss_ready = _rss_kb()
    start = clock.now()
    records = provider.schedules.live()
    expected = 0
    began = time.perf_counter()
    for minute in range(1, 61):
        end = start + timedelta(minutes=minute)
        expected += sum(len(calendar.due_times(r.cron, r.timezone, end - timedelta(minutes=1),
                                               end)) for r in records)
        handler.expect(expected)
        clock.set(end)
        await asyncio.wait_for(handler.reached.wait(), START_TIMEOUT)
        # Every Run ended before the clock moves on (a minute's jump would expire a lease).
        await provider.wait_idle(timeout=START_TIMEOUT)
    await provider.wait_idle(timeout=START_TIMEOUT)
    hour_s, rss, peak = time.perf_counter() - began, _rss_kb(), _status_kb("self", "VmHWM")
    print(json.dumps({"fired": handler.admitted, "expected": expected, "rss_ready_kb": rss_ready,
                      "hour_s": hour_s, "rss_kb": rss, "peak_kb": peak,
                      "breakdown": breakdown(provider)}), flush=True)
    await provider.stop()


@dataclass
class Replica:
    """What one replica process measured."""

    label: str
    start_s: float
    loaded_s: float
    """From ``start()`` to the Schedules loaded (the readiness gate open)."""
    warmed_s: float
    """From ``start()`` to the warm-up's end (each deployment's newest Run, the last day's
    Runs: the views' summaries); the idle window starts after it."""
    spawn_to_warmed_s: float
    """From spawning the process to it printing its first line, which it does once the
    warm-up has ended (imports, connecting, loading and the warm-up included)."""
    planned: int
    rss_start_mb: float
    rss_ready_mb: float
    rss_mb: float
    peak_mb: float
    idle_cpu: float
    """CPU share of one core over the idle window, percent."""
    server_cpu: float
    """The nats-server's CPU share over the same window, percent."""
    fired: int
    retention_s: float
    """Wall time of one history-retention pass."""
    retention_cpu: float
    """The replica's CPU seconds in that pass."""
    retention_server_cpu: float
    """The nats-server's CPU seconds during that pass."""
    retention_interval: float
    parts: dict[str, int]
    """Bytes per structure after the idle window (:func:`breakdown`)."""


async def measure_replica(server: NatsServer, label: str, prefix: str, count: int,
                          idle_seconds: float) -> Replica:
    """Spawn a replica, wait until it started, then watch its CPU over an idle window."""
    spawned = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(SCRIPT), "--child", "--url", server.url, "--prefix", prefix,
        "--schedules", str(count), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None and server.pid is not None
    try:
        ready = json.loads(await asyncio.wait_for(proc.stdout.readline(), START_TIMEOUT))
        spawn_to_warmed_s = time.perf_counter() - spawned
        await asyncio.sleep(SETTLE_SECONDS)
        wall, cpu, server_cpu = time.monotonic(), cpu_seconds(proc.pid), cpu_seconds(server.pid)
        await asyncio.sleep(idle_seconds)
        window = time.monotonic() - wall
        idle = (cpu_seconds(proc.pid) - cpu) / window * 100
        served = (cpu_seconds(server.pid) - server_cpu) / window * 100
        proc.stdin.write(b"breakdown\n")
        await proc.stdin.drain()
        measured = json.loads(await asyncio.wait_for(proc.stdout.readline(), START_TIMEOUT))
        rss = measured["rss_kb"] / 1024
        server_cpu = cpu_seconds(server.pid)
        proc.stdin.write(b"retention\n")
        await proc.stdin.drain()
        pass_ = json.loads(await asyncio.wait_for(proc.stdout.readline(), START_TIMEOUT))
        pass_server = cpu_seconds(server.pid) - server_cpu
        peak = measured["peak_kb"] / 1024  # before the walk and the retention pass
        proc.stdin.close()
        fired = json.loads(await asyncio.wait_for(proc.stdout.readline(), 60))["fired"]
        await asyncio.wait_for(proc.wait(), 60)
    except BaseException:
        if proc.returncode is None:
            proc.kill()  # our own child, by its handle
            await proc.wait()
        raise
    return Replica(label, ready["start_s"], ready["ready_s"], ready["warmed_s"],
                   spawn_to_warmed_s,
                   ready["planned"],
                   ready["rss_start_kb"] / 1024, ready["rss_kb"] / 1024, rss, peak, idle,
                   served, fired, pass_["retention_s"], pass_["retention_cpu_s"],
                   pass_server, settings_for(server.url, prefix, count).retention_interval,
                   measured["breakdown"])


async def measure_firing_hour(server: NatsServer, prefix: str, count: int,
                              at: datetime) -> dict[str, Any]:
    """Spawn the firing replica (:func:`firing_child_main`) and read what it measured."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(SCRIPT), "--child-firing", at.isoformat(), "--url", server.url,
        "--prefix", prefix, "--schedules", str(count), stdout=asyncio.subprocess.PIPE)
    assert proc.stdout is not None
    try:
        measured: dict[str, Any] = json.loads(
            await asyncio.wait_for(proc.stdout.readline(), 4 * START_TIMEOUT))
        await asyncio.wait_for(proc.wait(), 60)
    except BaseException:
        if proc.returncode is None:
            proc.kill()  # our own child, by its handle
            await proc.wait()
        raise
    return measured


# ----------------------------------------------------------------------------- main


async def run(server: NatsServer, count: int, idle_seconds: float, runs_each: int) -> None:
    began = datetime.now(UTC)
    schedules = quiet_schedules(count, began)
    reference_count = min(count, REFERENCE_PUBLISHES)
    payload = schedule_sized_payload(schedules[0])
    publish_rate = await gathered_publish_rate(server.url, reference_count, payload)
    bench = await nats_bench(server.url, messages=reference_count, size=len(payload),
                             clients=CALLERS, atomic_batch=100)
    print(f"\n=== {count:,} Schedules ===", flush=True)
    print(f"reference (a): {reference_count:,} gathered acknowledged publishes of "
          f"{len(payload)} B ({CALLERS} callers): {publish_rate:,.0f}/s", flush=True)
    if bench is not None:
        print(f"reference (nats bench): {bench.line()}", flush=True)

    writes = await apply_all(server.url, schedules)
    print(f"apply: {count:,} enabled Schedules ({CALLERS} callers): {writes.apply_rate:,.0f}/s "
          f"= {writes.apply_rate / publish_rate:.3f}x reference (a)"
          f"{'' if bench is None else ', ' + bench.ratios(writes.apply_rate)}", flush=True)
    unchanged = statistics.median(writes.reconcile_unchanged_s)
    print(f"reconcile: the same {count:,} again, unchanged (one call, nothing written): "
          f"median {unchanged:.2f} s of {len(writes.reconcile_unchanged_s)} "
          f"({', '.join(f'{t:.2f}' for t in writes.reconcile_unchanged_s)})", flush=True)
    print(f"reconcile: the same {count:,}, every one changed (one call, pipelined): "
          f"{writes.reconcile_changed_rate:,.0f}/s = "
          f"{writes.reconcile_changed_rate / writes.apply_rate:.2f}x the apply rate", flush=True)

    if runs_each:
        filled = await fill_history(server.url, schedules, runs_each)
        print(f"history: {runs_each} finished scheduled Run(s) per Schedule stored raw in "
              f"{filled:.1f} s (index entry, created, claimed, dispatched)", flush=True)

    replay = await raw_replay_seconds(server.url, PREFIX, count)
    print(f"reference (b): raw replay of the {count:,} Schedule subjects (ordered consumer, "
          f"last per subject, not decoded): {replay:.2f} s", flush=True)

    empty = await measure_replica(server, "empty prefix (reference)", EMPTY_PREFIX, 1,
                                  idle_seconds)
    held = await measure_replica(server, f"{count:,} held", PREFIX, count, idle_seconds)
    hour = await measure_firing_hour(server, PREFIX, count, began + QUIET)
    ended = datetime.now(UTC)
    report([empty, held], count, idle_seconds, replay, began, ended)
    report_memory(empty, held, hour, count)


def report_memory(empty: Replica, held: Replica, hour: dict[str, Any], count: int) -> None:
    print(f"\nmemory of the {count:,} held replica (resident; structures walked, see "
          "deep_size):")
    print(f"  after start() {held.rss_start_mb:.1f} MB, when ready {held.rss_ready_mb:.1f} MB,"
          f" after the warm-up ({held.warmed_s:.1f} s after start()) and the idle window "
          f"{held.rss_mb:.1f} MB (peak {held.peak_mb:.1f} MB); empty replica "
          f"{empty.rss_mb:.1f} MB")
    print(f"  after an hour's worth of firing ({hour['fired']:,} Runs fired of "
          f"{hour['expected']:,} due, in {hour['hour_s']:.1f} s on a ManualClock): "
          f"{hour['rss_kb'] / 1024:.1f} MB (ready {hour['rss_ready_kb'] / 1024:.1f} MB, "
          f"peak {hour['peak_kb'] / 1024:.1f} MB)")
    print(f"  {'structure':<36} {'idle MB':>8} {'B/Schedule':>10} {'after hour MB':>13} "
          f"{'B/Schedule':>10}")
    for name, size in held.parts.items():
        after = hour["breakdown"].get(name, 0)
        print(f"  {name:<36} {size / 2**20:>8.1f} {size / max(count, 1):>10,.0f} "
              f"{after / 2**20:>13.1f} {after / max(count, 1):>10,.0f}")
    walked = sum(held.parts.values())
    print(f"  {'walked in all':<36} {walked / 2**20:>8.1f} {walked / max(count, 1):>10,.0f}")
    rest = held.rss_mb - empty.rss_mb - walked / 2**20
    print(f"  the rest of RSS above the empty replica (allocator, buffers): {rest:.1f} MB")


def report(rows: list[Replica], count: int, idle_seconds: float, replay: float,
           began: datetime, ended: datetime) -> None:
    print(f"\nreplicas ({os.cpu_count()} cores, {began:%Y-%m-%d}); idle window "
          f"{idle_seconds:.0f} s after {SETTLE_SECONDS:.0f} s settling, no due time in it")
    print(f"{'replica':<26} {'planned':>8} {'start() s':>9} {'ready s':>8} "
          f"{'spawn->warmed s':>15} {'RSS MB':>7} {'peak MB':>8} {'idle CPU %':>10} "
          f"{'server CPU %':>12} {'fired':>6}")
    for r in rows:
        print(f"{r.label:<26} {r.planned:>8,} {r.start_s:>9.2f} {r.loaded_s:>8.2f} "
              f"{r.spawn_to_warmed_s:>15.2f} {r.rss_mb:>7.1f} {r.peak_mb:>8.1f} "
              f"{r.idle_cpu:>10.2f} {r.server_cpu:>12.2f} {r.fired:>6}")
    empty, held = rows
    per_schedule = (held.rss_mb - empty.rss_mb) * 1024 * 1024 / max(count, 1)
    print(f"held vs empty: RSS +{held.rss_mb - empty.rss_mb:.1f} MB ({per_schedule:,.0f} B per "
          f"Schedule), idle CPU {held.idle_cpu - empty.idle_cpu:+.2f} points")
    print(f"start() vs reference (b), the raw replay: {held.start_s / replay:.2f}x; "
          f"ready (Schedules loaded) vs reference (b): {held.loaded_s / replay:.2f}x")
    print(f"\n{'history retention pass':<26} {'wall s':>8} {'replica CPU s':>13} "
          f"{'server CPU s':>12} {'every s':>8} {'replica CPU %, amortized':>25}")
    for r in rows:
        share = r.retention_cpu / r.retention_interval * 100
        print(f"{r.label:<26} {r.retention_s:>8.2f} {r.retention_cpu:>13.2f} "
              f"{r.retention_server_cpu:>12.2f} {r.retention_interval:>8.0f} {share:>25.2f}")
    total = held.idle_cpu + held.retention_cpu / held.retention_interval * 100
    print(f"idle CPU of the held replica, retention included: {total:.2f} % of one core")
    if ended >= began + QUIET:
        print("warning: the bench outlasted its quiet span; a due time may have fallen in a "
              "window (see 'fired')")


async def main(args: argparse.Namespace) -> None:
    for count in [int(n) for n in str(args.schedules).split(",")]:
        with tempfile.TemporaryDirectory() as tmp, NatsServer(tmp).start() as server:
            await run(server, count, args.idle_seconds, args.runs_per_schedule)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--schedules", default="100000",
                        help="Schedules held, or several sizes separated by commas")
    parser.add_argument("--idle-seconds", type=float, default=60.0)
    parser.add_argument("--runs-per-schedule", type=int, default=1,
                        help="finished Runs stored per Schedule before the replicas start")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child-firing", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--prefix", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


if __name__ == "__main__":
    arguments = parse()
    if arguments.child:
        asyncio.run(child_main(arguments.url, arguments.prefix, int(arguments.schedules)))
    elif arguments.child_firing:
        asyncio.run(firing_child_main(arguments.url, arguments.prefix,
                                      int(arguments.schedules), arguments.child_firing))
    else:
        asyncio.run(main(arguments))
