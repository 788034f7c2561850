"""Firing at scale: N Schedules due in the same minute, against same-run references.

    .venv/bin/python bench/firing.py                      # 10,000 Schedules, 1 replica, real clock
    .venv/bin/python bench/firing.py --replicas 3         # three provider processes, one server
    .venv/bin/python bench/firing.py --manual             # in-process ManualClock, no waiting
    .venv/bin/python bench/firing.py --enqueue            # Run now: 64 callers for 10 s
    .venv/bin/python bench/firing.py --schedules 500 --boundaries 1 --skip-references
    .venv/bin/python bench/firing.py --sync always        # only the shipped fsync setting
    .venv/bin/python bench/firing.py --replicas 1,2       # 1 vs 2 replicas, same server
    .venv/bin/python bench/firing.py --cluster            # the 3-node R3 cluster of cluster/
    .venv/bin/python bench/firing.py --uvloop --enqueue   # a host on uvloop
    .venv/bin/python bench/firing.py --herd --schedules 100000 --sync always --skip-references

Which server (issue 19, points 6 and 7): ``--sync`` picks the fsync setting of the server the
bench starts: ``default`` (the server's own, fsync every 2 minutes), ``always``
(``sync_interval: always``, what ``nats-server.conf`` and ``cluster/`` ship), or ``both``
(the default: each mode runs twice, each on a fresh server with its own references).
``--cluster`` starts three nodes (``tests/harness/cluster.py``) and runs every stream R3, the
references' streams too. ``--replicas 1,2`` fires with one, then two provider processes on
the same server (fresh Schedules each). ``--uvloop`` runs this script's event loops, the
child replicas' too, on uvloop (the ``bench`` extra): AstraBox's process owns the loop, so
this is a figure, not a dependency.

Why this exists: before the firing path is changed to scale (10,000 Schedules due in one minute
started within 2 s on one replica, replicas sharing the work), the same run must say where
the time goes and how far the provider is from what the server itself can do.

Firing (default): N ``* * * * *`` Schedules are applied by a loader whose ManualClock never
moves (so it never fires), then ``--replicas`` provider processes (a child mode of this
script, real clock, an instant handler that notes when ``start_session`` is called) fire them
at two consecutive real minute boundaries. Printed per boundary: Runs stored, duplicates (must
be 0), the lateness of ``start_session`` after the due time (p50/p99/max; the server's
timestamps of ``run.created`` and ``run.dispatched`` too), stale Schedule reads, and the
messages stored per Run (stream sequences and message counts before/after), plus the
client-to-server messages and JetStream API requests per Run from the server's monitoring
endpoint. ``--manual`` runs one provider in this process with a ManualClock moved to each
boundary: lateness is then counted from the instant the clock was moved, and a frozen clock
never makes a Schedule read stale (the real clock does).

The herd (``--herd``): the N Schedules are due once, at one minute a few minutes ahead (a
daily ``M H * * *`` in UTC, as every hourly job at the top of the hour is), so no next
boundary cuts the measurement: the bench waits until every Run is started and dispatched
(up to ``HERD_TIMEOUT``) and prints the lateness of all of them, the last one included.

References, same run, same server: (a) the raw acknowledged publish rate of N Run-sized
messages with ``asyncio.gather`` (64 concurrent callers), with ``publish_async``, and in
atomic batches (ADR-50, stream option ``allow_atomic``: 100 messages per batch, the first a
request, the rest plain publishes, the last the commit request; one batch after another;
under ``sync_interval: always`` the server syncs once per batch); (b) the
server's own message scheduler (ADR-51: stream option ``allow_msg_schedules``, one
``Nats-Schedule: @at <UTC RFC3339>`` message per Schedule with its ``Nats-Schedule-Target``,
all due at one instant), with the delivery lateness of the N fired messages; (c) the NATS
maintainers' own benchmark, ``nats bench js pub`` of the official CLI (bench/natsbench.py:
``sync`` with ``CALLERS`` clients, ``async``, ``atomic`` batches of ``ATOMIC_BATCH``), N
Run-sized messages on the same server, whose ratios are printed beside the others (without
the CLI, and with ``--skip-references``, it is left out, saying so).

``--enqueue``: 64 concurrent callers of ``enqueue`` (Run now) for 10 s, then the dispatch of
those Runs (stored -> DISPATCHED, instant handler), each rate with its ratio to the gathered
publish rate of the same run.

Nothing is asserted; figures and ratios are printed. ``bench/dbos_compare.py`` imports the
functions here to print the provider's figures beside DBOS's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import resource
import shutil
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nats
import nats.js.errors
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy, StreamConfig
from natsbench import NatsBench, nats_bench

from nats_scheduler import ManualClock, NatsSchedulerProvider, NatsSettings
from nats_scheduler.core import runcore
from nats_scheduler.core.events import RunCreated, RunDispatched, decode_run_event, encode
from nats_scheduler.names import Names
from nats_scheduler.natsserver.process import NatsServer
from nats_scheduler.runtime.ticker import DueTime
from nats_scheduler.seam import EnqueueRequest, RunInvocation, RunPayload, Schedule, Trigger

CALLERS = 64
"""Concurrent callers of the gathered-publish reference and of ``enqueue``."""

BOUNDARY_TIMEOUT = 55.0
"""Seconds a boundary's Runs may take to be dispatched before the next boundary is due."""

HERD_TIMEOUT = 600.0
"""Seconds ``--herd`` waits for its one minute's Runs: nothing else falls due meanwhile."""

HERD_LEAD = 45.0
"""Seconds ``--herd`` adds to the expected load time when it picks its minute."""

HERD_APPLY_RATE = 1_500.0
"""Applies per second ``--herd`` counts on when it picks its minute (a floor measured with
``sync_interval: always``: the minute must not pass before the replicas are ready)."""

SCRIPT = Path(__file__).resolve()
"""This file: the child replicas run it with ``--child``."""

ATOMIC_BATCH = 100
"""Messages per atomic batch in reference (a)."""


@dataclass
class Target:
    """The server(s) a run measures: one node, or the nodes of a cluster."""

    url: str
    """Client URL(s), comma-separated (the ``ASTRABOX_NATS_URL`` form)."""
    http_urls: list[str]
    pids: list[int]
    stream_replicas: int = 1
    sync_always: bool = False

    @property
    def label(self) -> str:
        shape = (f"{len(self.pids)}-node cluster, streams R{self.stream_replicas}"
                 if len(self.pids) > 1 else "one server, R1")
        return f"{shape}, {'sync_interval: always' if self.sync_always else 'default fsync'}"


def target_of(server: NatsServer | Target) -> Target:
    """A single started server as a :class:`Target` (callers such as dbos_compare pass one)."""
    if isinstance(server, Target):
        return server
    return Target(server.url, [server.http_url], [server.pid or 0],
                  sync_always=server.sync_always)

PAYLOAD = RunPayload("agent:bench", "summarise the night's incidents")


# ----------------------------------------------------------------------------- figures


def pct(values: list[float], q: float) -> float:
    """The q-th percentile (nearest rank); NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


def spread(values: list[float]) -> str:
    """p50/p99/max of seconds, printed in milliseconds."""
    if not values:
        return "no values"
    return (f"p50 {pct(values, 50) * 1000:,.0f} ms, p99 {pct(values, 99) * 1000:,.0f} ms, "
            f"max {max(values) * 1000:,.0f} ms (n={len(values)})")


async def poll(check: Callable[[], bool], timeout: float, interval: float = 0.05) -> bool:
    """Wait until ``check()`` holds; False when ``timeout`` passed first (never raises)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(interval)
    return True


async def sleep_until_wall(epoch: float) -> None:
    """Sleep until the wall clock reads ``epoch`` (the loop's clock is monotonic, not wall)."""
    await asyncio.sleep(max(0.0, epoch - time.time()) + 0.001)


def run_sized_payload() -> bytes:
    """A ``run.created`` as the provider encodes it: the references publish messages this big."""
    now = datetime.now(UTC)
    event = runcore.create(run_id="dep-00001@" + now.isoformat(), deployment_id="dep-00001",
                           trigger=Trigger.SCHEDULE, due_at=now, payload=PAYLOAD, now=now,
                           actor="bench-host-12345-abcdef")
    return encode(runcore.indexed(event, 12345))


# ----------------------------------------------------------------------------- server counters


class CallTally:
    """What one provider's connection sends, by kind: its round trips to the server.

    Wraps the connection's ``publish``, through which every publish, request and KV
    operation of nats-py leaves, so the figures say which calls a Run costs.
    """

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.subjects: list[str] = []
        """The subjects published to since the last read (appending is all a publish pays)."""
        self._counts: Counter[str] = Counter()

    @property
    def counts(self) -> Counter[str]:
        """Calls by kind so far. Each subject is classified once, at the first read after it
        was sent: the child replica reports four times a second, and classifying the whole
        history at each report (700,000 subjects in a 100,000 herd) took 43 % of the
        replica's CPU, on the event loop it measures."""
        fresh, self.subjects = self.subjects, []
        self._counts.update(self.kind(subject) for subject in fresh)
        return Counter(self._counts)

    def install(self, nc: Client) -> None:
        original = nc.publish

        async def publish(subject: str, *args: Any, **kwargs: Any) -> None:
            self.subjects.append(subject)
            await original(subject, *args, **kwargs)

        nc.publish = publish  # type: ignore[method-assign]

    def kind(self, subject: str) -> str:
        parts = subject.split(".")
        if subject.startswith("$JS.API.DIRECT.GET."):
            return "direct get (" + ("lease" if "_LEASES" in parts[4] else "history") + ")"
        if subject.startswith("$JS.API."):
            return "$JS.API." + ".".join(p for p in parts[2:5] if p.isupper() and "_" not in p)
        if subject.startswith("$KV."):
            return "lease bucket write ($KV)"
        if subject.startswith(f"{self.prefix}.run."):
            return "run event publish"
        if subject.startswith(f"{self.prefix}.runidx."):
            return "history index publish"
        if subject.startswith(f"{self.prefix}.sched."):
            return "schedule event publish"
        return "other (acks, flow control, admin)"


@dataclass
class Counters:
    """What the server holds and has received at one instant."""

    streams: dict[str, tuple[int, int]]
    """stream -> (messages, last sequence)"""
    in_msgs: int
    """Messages clients sent to the server (publishes and requests of every kind)."""
    calls: Counter[str] = field(default_factory=Counter)
    """What the provider processes sent, by kind (:class:`CallTally`), summed."""
    replica_cpu: list[float] = field(default_factory=list)
    """Each replica process's CPU seconds so far (user + system, its own accounting)."""
    server_cpu: float = 0.0
    """The nats-server process(es)' CPU seconds so far."""


def _varz_in_msgs(http_url: str | list[str]) -> int:
    """Messages clients sent, summed over the nodes (on a cluster: routed ones too)."""
    total = 0
    for url in [http_url] if isinstance(http_url, str) else http_url:
        with urllib.request.urlopen(f"{url}/varz", timeout=5) as answer:
            total += int(json.loads(answer.read())["in_msgs"])
    return total


async def counters(js: JetStreamContext, http_url: str | list[str], names: Names,
                   calls: Counter[str] | None = None, *, replica_cpu: list[float] | None = None,
                   server_cpu_s: float = 0.0) -> Counters:
    """Message counts of the provider's streams and the server's traffic counter, with the
    CPU the replicas and the server have used so far."""
    streams: dict[str, tuple[int, int]] = {}
    for stream in (names.schedules_stream, names.runs_stream, names.index_stream,
                   f"KV_{names.leases_bucket}"):
        info = await js.stream_info(stream)
        streams[stream] = (info.state.messages, info.state.last_seq)
    in_msgs = await asyncio.to_thread(_varz_in_msgs, http_url)
    return Counters(streams, in_msgs, Counter(calls or {}), list(replica_cpu or []),
                    server_cpu_s)


def own_cpu() -> float:
    """This process's CPU seconds so far, user + system, from its own accounting."""
    times = os.times()
    return times.user + times.system


def cpu_lines(before: Counters, after: Counters, runs: int) -> list[str]:
    """CPU seconds each replica used between two instants, and per Run summed over all."""
    if not after.replica_cpu or runs <= 0:
        return []
    used = [a - b for a, b in zip(after.replica_cpu, before.replica_cpu, strict=True)]
    per_run = sum(used) / runs * 1e6
    sent = sum((after.calls - before.calls).values()) / runs
    server = after.server_cpu - before.server_cpu
    return ["  CPU (user + system, each process's own accounting): "
            + ", ".join(f"replica {i} {cpu:.2f} s" for i, cpu in enumerate(used, 1))
            + f"; all replicas {sum(used):.2f} s = {per_run:,.0f} us per Run "
            f"(beside {sent:.2f} messages sent per Run); nats-server {server:.2f} s "
            f"= {server / runs * 1e6:,.0f} us per Run"]


def cpu_per_run(boundary: Boundary) -> float | None:
    """CPU seconds of all the replicas per Run over one boundary (None: not measured)."""
    before, after = boundary.before, boundary.after
    if not after.replica_cpu or boundary.created <= 0:
        return None
    return (sum(after.replica_cpu) - sum(before.replica_cpu)) / boundary.created


def per_run_lines(before: Counters, after: Counters, runs: int) -> list[str]:
    """Writes and retained messages per Run, per stream; then what was sent per Run."""
    if runs <= 0:
        return ["  no Runs: nothing per Run"]
    lines = []
    for stream, (messages, last) in after.streams.items():
        was_messages, was_last = before.streams[stream]
        lines.append(f"  {stream:<22} stored {(last - was_last) / runs:5.2f}/Run "
                     f"(retained {(messages - was_messages) / runs:5.2f}/Run)")
    writes = sum(a[1] - before.streams[s][1] for s, a in after.streams.items())
    lines.append(f"  all streams            stored {writes / runs:5.2f}/Run")
    lines.append(f"  client->server messages (server's count): "
                 f"{(after.in_msgs - before.in_msgs) / runs:5.2f}/Run")
    sent = after.calls - before.calls
    if sent:
        kinds = ", ".join(f"{kind} {n / runs:.2f}" for kind, n in sent.most_common())
        lines.append(f"  sent by the provider(s): {sum(sent.values()) / runs:5.2f}/Run: {kinds}")
    return lines


# ----------------------------------------------------------------------------- references


@dataclass
class PublishRates:
    gathered: float
    """Acknowledged publishes/s, ``CALLERS`` concurrent callers awaiting ``js.publish``."""
    publish_async: float
    """Acknowledged publishes/s with ``publish_async`` then ``publish_async_completed``."""
    payload_bytes: int
    atomic: float = math.nan
    """Messages/s stored in atomic batches of ``ATOMIC_BATCH`` (ADR-50), one after another."""


async def atomic_rate(nc: Client, count: int, payload: bytes, replicas: int = 1) -> float:
    """Messages/s stored in atomic batches of ``ATOMIC_BATCH``, one batch after another.

    ADR-50: every message carries ``Nats-Batch-Id`` and ``Nats-Batch-Sequence``; the first
    is a request (the server answers once it accepted the batch), the others plain
    publishes, the last one carries ``Nats-Batch-Commit: 1`` and is a request answered by
    the batch's acknowledgement. nats-py has no call for it; these are ordinary messages.
    """
    js = nc.jetstream(timeout=30)
    await js.add_stream(StreamConfig(name="REF_ATOMIC", subjects=["refatom.>"],
                                     num_replicas=replicas, allow_atomic=True))
    run = os.urandom(4).hex()
    began = time.perf_counter()
    try:
        for start in range(0, count, ATOMIC_BATCH):
            size = min(ATOMIC_BATCH, count - start)
            batch_id = f"ref-{run}-{start}"
            for k in range(size):
                headers = {"Nats-Batch-Id": batch_id, "Nats-Batch-Sequence": str(k + 1)}
                if k == size - 1:
                    headers["Nats-Batch-Commit"] = "1"
                subject = f"refatom.{start + k}"
                if k in (0, size - 1):
                    answer = await nc.request(subject, payload, timeout=30, headers=headers)
                    if answer.data and b'"error"' in answer.data:
                        raise RuntimeError(f"atomic batch refused: {answer.data[:200]!r}")
                else:
                    await nc.publish(subject, payload, headers=headers)
        elapsed = time.perf_counter() - began
        stored = (await js.stream_info("REF_ATOMIC")).state.messages
        if stored != count:
            print(f"  atomic batches: {stored} of {count} messages stored")
    finally:
        await js.delete_stream("REF_ATOMIC")
    return count / elapsed


async def publish_rates(nc: Client, count: int, replicas: int = 1) -> PublishRates:
    """The server's raw acknowledged-publish rate for Run-sized messages, three ways."""
    js = nc.jetstream(timeout=30)
    payload = run_sized_payload()
    await js.add_stream(StreamConfig(name="REF_PUB", subjects=["refpub.>"],
                                     num_replicas=replicas))

    async def caller(worker: int) -> None:
        for i in range(worker, count, CALLERS):
            await js.publish(f"refpub.g.{i}", payload)

    began = time.perf_counter()
    await asyncio.gather(*(caller(w) for w in range(CALLERS)))
    gathered = count / (time.perf_counter() - began)

    began = time.perf_counter()
    acks = [await js.publish_async(f"refpub.a.{i}", payload) for i in range(count)]
    await js.publish_async_completed()
    elapsed = time.perf_counter() - began
    failed = sum(1 for ack in acks if ack.exception() is not None)
    if failed:
        print(f"  publish_async: {failed} of {count} publishes failed")
    await js.delete_stream("REF_PUB")
    try:
        atomic = await atomic_rate(nc, count, payload, replicas)
    except (nats.errors.Error, nats.js.errors.Error, RuntimeError) as exc:
        print(f"  atomic batches: not measured ({exc})")
        atomic = math.nan
    return PublishRates(gathered, count / elapsed, len(payload), atomic)


@dataclass
class ServerSchedules:
    """The server's own message scheduler firing N one-shot schedules due at one instant."""

    stored_rate: float
    """Schedule messages stored per second (``publish_async``)."""
    fired: int
    received_late: list[float] = field(default_factory=list)
    """Seconds from the due instant to this client receiving each fired message."""
    stored_late: list[float] = field(default_factory=list)
    """Seconds from the due instant to the server's timestamp of each fired message."""
    left_in_stream: int = 0


async def server_schedules(nc: Client, count: int, lead: float,
                           replicas: int = 1) -> ServerSchedules:
    """ADR-51 reference: N ``@at`` schedules due together, delivery lateness of what fires.

    Each schedule is its own subject (``refsched.<i>``) targeting ``reffired.<i>`` in the same
    stream: the server refuses a schedule without a target, or whose target is its own
    subject or outside the stream (error 10190, "message schedules target is invalid").
    ``lead`` seconds are left for storing the N schedules before they are due.
    """
    js = nc.jetstream(timeout=30)
    await js.add_stream(StreamConfig(name="REF_SCHED", subjects=["refsched.>", "reffired.>"],
                                     allow_msg_schedules=True, num_replicas=replicas))
    due = math.ceil(time.time() + lead)
    at = datetime.fromtimestamp(due, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    got: list[tuple[float, float]] = []

    async def on_fired(msg: Any) -> None:
        got.append((time.time(), msg.metadata.timestamp.timestamp()))

    sub = await js.subscribe("reffired.>", stream="REF_SCHED", cb=on_fired,
                             ordered_consumer=True, deliver_policy=DeliverPolicy.NEW)
    began = time.perf_counter()
    acks = [await js.publish_async(f"refsched.{i}", b"tick", headers={
        "Nats-Schedule": f"@at {at}", "Nats-Schedule-Target": f"reffired.{i}"})
        for i in range(count)]
    await js.publish_async_completed()
    stored_rate = count / (time.perf_counter() - began)
    refused = [ack.exception() for ack in acks if ack.exception() is not None]
    if refused:
        print(f"  server schedules: {len(refused)} refused, e.g. {refused[0]}")
    if time.time() > due:
        print("  server schedules: storing them took longer than the lead; lateness is inflated")
    await poll(lambda: len(got) >= count - len(refused), timeout=max(30.0, due - time.time() + 30))
    await sub.unsubscribe()
    left = (await js.stream_info("REF_SCHED")).state.messages
    await js.delete_stream("REF_SCHED")
    return ServerSchedules(stored_rate, len(got), [r - due for r, _ in got],
                           [s - due for _, s in got], left)


@dataclass
class References:
    rates: PublishRates
    schedules: ServerSchedules | None
    nats_bench: NatsBench | None = None
    """Reference (c), ``nats bench js pub``; None without the CLI."""

    def nats_ratios(self, rate: float) -> str:
        """``rate`` against reference (c), for the lines that print ratios."""
        return "" if self.nats_bench is None else f", {self.nats_bench.ratios(rate)}"


async def references(url: str, count: int, *, with_schedules: bool = True,
                     replicas: int = 1) -> References:
    nc = await nats.connect(url.split(","))
    try:
        rates = await publish_rates(nc, count, replicas)
        sched = None
        if with_schedules:
            lead = 2.0 + 2 * count / rates.publish_async
            sched = await server_schedules(nc, count, lead, replicas)
        bench = await nats_bench(url, messages=count, size=rates.payload_bytes,
                                 clients=CALLERS, atomic_batch=ATOMIC_BATCH,
                                 replicas=replicas)
        return References(rates, sched, bench)
    finally:
        await nc.close()


def print_references(refs: References, count: int) -> None:
    rates = refs.rates
    print(f"reference (a): {count:,} acknowledged publishes of {rates.payload_bytes} B: "
          f"gathered ({CALLERS} callers) {rates.gathered:,.0f}/s, "
          f"publish_async {rates.publish_async:,.0f}/s, "
          f"atomic batches of {ATOMIC_BATCH} {rates.atomic:,.0f} messages/s")
    if refs.nats_bench is not None:
        print(f"reference (c): {refs.nats_bench.line()}")
    sched = refs.schedules
    if sched is None:
        return
    print(f"reference (b): server message scheduler (ADR-51 '@at'), {count:,} one-shot "
          f"schedules due at one instant: stored at {sched.stored_rate:,.0f}/s; "
          f"{sched.fired:,} fired; {sched.left_in_stream:,} messages left in the stream "
          "(the fired ones: a one-shot schedule is removed when it fires)")
    print(f"  delivery lateness after the due instant: {spread(sched.received_late)}")
    print(f"  server timestamp of the fired message:   {spread(sched.stored_late)}")


# ----------------------------------------------------------------------------- the handler


class InstantHandler:
    """AstraBox's side, answering at once; notes the wall time of each first ``start_session``.

    Idempotent on the Run ID like AstraBox. ``extra_starts`` counts repeated ``start_session``
    calls of one Run in this process (a retry or a duplicate dispatch).
    """

    def __init__(self) -> None:
        self.starts: dict[str, tuple[float | None, float]] = {}
        """run_id -> (due time as epoch seconds or None, wall time of the first call)"""
        self.per_due: Counter[str] = Counter()
        """due time (ISO) -> Runs started, kept as they start (progress reports read it)"""
        self.extra_starts = 0
        self.admitted = 0

    async def start_session(self, invocation: RunInvocation) -> str:
        if invocation.run_id in self.starts:
            self.extra_starts += 1
        else:
            due_at = invocation.due_at
            self.starts[invocation.run_id] = (due_at.timestamp() if due_at else None,
                                              time.time())
            if due_at is not None:
                self.per_due[due_at.isoformat()] += 1
        return f"sess-{invocation.run_id}"

    async def admit_turn(self, invocation: RunInvocation) -> str:
        self.admitted += 1
        return f"turn-{invocation.run_id}"


def settings_for(url: str, prefix: str, count: int, **extra: Any) -> NatsSettings:
    return NatsSettings(url=url, prefix=prefix, max_active_schedules=max(count, 1), **extra)


def minute_schedule(i: int, *, enabled: bool = True, cron: str = "* * * * *") -> Schedule:
    dep = f"dep-{i:05d}"
    return Schedule(dep, dep, cron, "UTC", enabled, PAYLOAD, 1)


async def apply_all(provider: NatsSchedulerProvider, schedules: list[Schedule]) -> float:
    """Apply the Schedules with ``CALLERS`` concurrent callers; returns applies per second."""
    limit = asyncio.Semaphore(CALLERS)

    async def one(schedule: Schedule) -> None:
        async with limit:
            await provider.apply(schedule)

    began = time.perf_counter()
    await asyncio.gather(*(one(s) for s in schedules))
    return len(schedules) / max(time.perf_counter() - began, 1e-9)


async def load_schedules(url: str, prefix: str, schedules: list[Schedule],
                         stream_replicas: int = 1) -> float:
    """Store Schedules with a provider whose ManualClock never moves, so it never fires them."""
    provider = NatsSchedulerProvider(
        settings_for(url, prefix, len(schedules), admin_service=False,
                     replicas=stream_replicas),
        clock=ManualClock(datetime.now(UTC)))
    provider.configure()
    await provider.start(InstantHandler())
    try:
        return await apply_all(provider, schedules)
    finally:
        await provider.stop()


# ----------------------------------------------------------------------------- child replica


class CountingProvider(NatsSchedulerProvider):
    """The provider, counting the due times its ticker fired (the owner's, and any another
    replica fired once the owner left or ran out of patience)."""

    def __init__(self, settings: NatsSettings) -> None:
        self.fired: Counter[str] = Counter()
        super().__init__(settings, fire_observer=self._count)

    def _count(self, due_times: Sequence[DueTime]) -> None:
        for _, due_at in due_times:
            self.fired[due_at.isoformat()] += 1


def pending_tasks(provider: NatsSchedulerProvider) -> int:
    """Dispatch tasks still alive, lease release included."""
    dispatcher = provider.dispatcher
    return 0 if dispatcher is None else dispatcher.tasks


async def started(provider: NatsSchedulerProvider,
                  prefix: str) -> tuple[InstantHandler, CallTally]:
    """Start ``provider`` with an instant handler; count its calls to the server."""
    handler = InstantHandler()
    provider.configure()
    await provider.start(handler)
    tally = CallTally(prefix)
    tally.install(provider.store.nc)
    return handler, tally


async def child_main(url: str, prefix: str, count: int, out: Path,
                     stream_replicas: int = 1, sync_always: bool = False,
                     lease_seconds: float | None = None) -> None:
    """One replica: fire and dispatch until stdin closes, printing progress as JSON lines.
    ``sync_always``: the server syncs every write, and the replica is told so, as the docs
    tell operators (``ASTRABOX_NATS_SERVER_SYNC_ALWAYS``). ``lease_seconds``: the lease
    length (``ASTRABOX_NATS_LEASE_SECONDS``), when not the default."""
    lease = {} if lease_seconds is None else {"lease_seconds": lease_seconds}
    provider = CountingProvider(settings_for(url, prefix, count, replicas=stream_replicas,
                                             server_sync_always=sync_always, **lease))
    handler, tally = await started(provider, prefix)
    print(json.dumps({"ready": provider.identity}), flush=True)

    async def report() -> None:
        while True:
            print(json.dumps({"fired": provider.fired, "started": handler.per_due,
                              "calls": tally.counts, "cpu": own_cpu(),
                              "unfinished": provider.ledger.unfinished_count(),
                              "tasks": pending_tasks(provider)}), flush=True)
            await asyncio.sleep(0.25)

    reporter = asyncio.create_task(report())
    await asyncio.to_thread(sys.stdin.read)  # until the parent closes our stdin
    reporter.cancel()
    stale = provider.stale_fires
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # before the stop
    await provider.stop()
    record = json.dumps({"identity": provider.identity, "stale_fires": stale,
                         "extra_starts": handler.extra_starts, "peak_rss_mb": peak_mb,
                         "starts": list(handler.starts.items())})
    await asyncio.to_thread(out.write_text, record)
    print(json.dumps({"stopped": True}), flush=True)


class Child:
    """A child replica process and the last progress line it printed."""

    def __init__(self, proc: asyncio.subprocess.Process, out: Path) -> None:
        self.proc = proc
        self.out = out
        self.progress: dict[str, Any] = {}
        self.ready = asyncio.Event()
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def spawn(cls, url: str, prefix: str, count: int, out: Path,
                    stream_replicas: int = 1, sync_always: bool = False) -> Child:
        extra = ["--uvloop"] if USE_UVLOOP else []
        if sync_always:
            extra.append("--server-sync-always")
        if LEASE_SECONDS is not None:
            extra += ["--lease-seconds", str(LEASE_SECONDS)]
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(SCRIPT), "--child", "--url", url,
            "--prefix", prefix, "--schedules", str(count), "--out", str(out),
            "--stream-replicas", str(stream_replicas), *extra,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
        return cls(proc, out)

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        async for line in self.proc.stdout:
            data = json.loads(line)
            if "ready" in data:
                self.ready.set()
            elif "fired" in data:
                self.progress = data

    def fired(self, due: str) -> int:
        return int(self.progress.get("fired", {}).get(due, 0))

    def started(self, due: str) -> int:
        return int(self.progress.get("started", {}).get(due, 0))

    def calls(self) -> Counter[str]:
        return Counter(self.progress.get("calls", {}))

    def cpu(self) -> float:
        """The CPU seconds the child reported last (it reports four times a second)."""
        return float(self.progress.get("cpu", 0.0))

    def idle(self) -> bool:
        return self.progress.get("unfinished") == 0 and self.progress.get("tasks") == 0

    async def stop(self) -> dict[str, Any]:
        """Close stdin (the child stops its provider), wait, return what it recorded."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            await asyncio.wait_for(self.proc.wait(), 60)
        except TimeoutError:
            self.proc.kill()  # our own child, by its handle
            await self.proc.wait()
        await self._reader
        return await asyncio.to_thread(self._recorded)

    def _recorded(self) -> dict[str, Any]:
        if not self.out.exists():  # the child died before writing it
            return {"identity": "?", "stale_fires": 0, "extra_starts": 0, "starts": []}
        data: dict[str, Any] = json.loads(self.out.read_text())
        return data


# ----------------------------------------------------------------------------- firing runs


@dataclass
class Boundary:
    """One due time: what the store and the handler saw of it."""

    due: float
    """The due instant (real mode), or the wall time the ManualClock was moved to it."""
    due_iso: str
    before: Counters
    after: Counters
    done_in: float | None
    """Seconds from the due instant until every Run was dispatched (None: not in time)."""
    starts: list[float] = field(default_factory=list)
    """Lateness of each Run's first ``start_session``, seconds."""
    created: int = 0
    duplicate_runs: int = 0
    created_late: list[float] = field(default_factory=list)
    dispatched_late: list[float] = field(default_factory=list)
    cpu: tuple[float, float] | None = None
    """CPU seconds used by (the provider process, the server) over ``done_in`` (--manual)."""


@dataclass
class FiringRun:
    count: int
    replicas: int
    manual: bool
    apply_rate: float
    boundaries: list[Boundary]
    extra_starts: int = 0
    stale_fires: int = 0
    cron: str = "* * * * *"
    peak_rss_mb: list[float] = field(default_factory=list)
    """Each replica process's peak resident memory (real clock only)."""
    check: dict[str, Any] | None = None
    """``nats-scheduler check --json`` over the prefix's whole store after the boundaries."""


async def store_check(target: Target, prefix: str, *, alive: tuple[datetime, datetime] | None,
                      manual: bool) -> dict[str, Any]:
    """``nats-scheduler check`` over everything the run stored, as an operator would run it
    after the benchmark: every due time inside ``alive`` must have exactly one Run, none
    invented, doubled, started twice or (real clock) stored before its due time."""
    command = [sys.executable, "-m", "nats_scheduler.cli.main", "check", "--url", target.url,
               "--prefix", prefix, "--json", "--timeout", "60"]
    if alive is not None:
        command += ["--alive", f"{alive[0].isoformat()}/{alive[1].isoformat()}"]
    if manual:
        command += ["--early-tolerance", "off"]  # due times of a hand-moved clock
    proc = await asyncio.create_subprocess_exec(*command, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 1800)
    try:
        report: dict[str, Any] = json.loads(out)
    except ValueError:
        return {"error": (err or out).decode(errors="replace").strip()[-300:]}
    return report


def check_line(report: dict[str, Any] | None) -> str:
    if report is None:
        return "nats-scheduler check: not run"
    if "error" in report:
        return f"nats-scheduler check: failed to run: {report['error']}"
    violations = report.get("violations", [])
    kinds = Counter(v.get("check") for v in violations)
    listed = ", ".join(f"{k} {n}" for k, n in kinds.items())
    return (f"nats-scheduler check: {report.get('runs', 0):,} Runs, {len(violations)} "
            f"violations{f' ({listed})' if listed else ''}")


def server_cpu(server: NatsServer | Target) -> float:
    """CPU seconds the server process(es) used so far (user + system, from /proc)."""
    total = 0.0
    for pid in target_of(server).pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def next_boundary(after: float) -> float:
    return (math.floor(after / 60) + 1) * 60.0


def herd_minute(count: int) -> float:
    """The one minute ``--herd`` fires: far enough ahead for ``count`` Schedules to be
    applied and loaded by the replicas first."""
    return next_boundary(time.time() + count / HERD_APPLY_RATE + HERD_LEAD)


async def fire_real(server: NatsServer | Target, count: int, *, replicas: int = 1,
                    boundaries: int = 2, prefix: str = "FIRE", herd: bool = False) -> FiringRun:
    """N Schedules fired by ``replicas`` processes at real minute boundaries.

    ``herd``: the N are due once, at one minute (a daily cron, ``M H * * *`` in UTC), as a
    platform's hourly jobs all due at the top of the hour are: nothing else falls due after
    it, so the bench waits for every Run however long they take (``HERD_TIMEOUT``) and the
    lateness of the last one is measured, not cut at the next minute."""
    target = target_of(server)
    names = Names(prefix)
    herd_at = herd_minute(count) if herd else None
    cron = "* * * * *"
    if herd_at is not None:
        at = datetime.fromtimestamp(herd_at, UTC)
        cron, boundaries = f"{at.minute} {at.hour} * * *", 1
    apply_rate = await load_schedules(target.url, prefix,
                                      [minute_schedule(i, cron=cron) for i in range(count)],
                                      target.stream_replicas)
    workdir = Path(tempfile.mkdtemp(prefix="firing-"))
    children = [await Child.spawn(target.url, prefix, count, workdir / f"child{r}.json",
                                  target.stream_replicas, target.sync_always)
                for r in range(replicas)]
    nc = await nats.connect(target.url.split(","))
    js = nc.jetstream(timeout=30)
    measured: list[Boundary] = []
    try:
        await asyncio.wait_for(asyncio.gather(*(c.ready.wait() for c in children)), 60)
        alive_from = datetime.now(UTC)
        first = next_boundary(time.time() + 2.0) if herd_at is None else herd_at
        if first - time.time() < 2.0:
            raise SystemExit(f"the replicas were ready {time.time() - first + 2.0:.0f} s too "
                             "late for the herd's minute; lower HERD_APPLY_RATE")
        timeout = BOUNDARY_TIMEOUT if herd_at is None else HERD_TIMEOUT
        for k in range(boundaries):
            due = first + 60 * k
            due_iso = datetime.fromtimestamp(due, UTC).isoformat()
            await sleep_until_wall(due - 1.5)
            before = await counters(js, target.http_urls, names, _calls(children),
                                    replica_cpu=[c.cpu() for c in children],
                                    server_cpu_s=server_cpu(target))
            await sleep_until_wall(due)
            done = await poll(lambda d=due_iso: _children_done(children, d, count),
                              timeout, interval=0.1)
            done_in = time.time() - due if done else None
            await asyncio.sleep(0.3)  # one more progress line: the children's final tallies
            after = await counters(js, target.http_urls, names, _calls(children),
                                   replica_cpu=[c.cpu() for c in children],
                                   server_cpu_s=server_cpu(target))
            measured.append(Boundary(due, due_iso, before, after, done_in))
    finally:
        alive_to = datetime.now(UTC)
        records = [await c.stop() for c in children]
        shutil.rmtree(workdir, ignore_errors=True)
    result = FiringRun(count, replicas, False, apply_rate, measured, cron=cron,
                       extra_starts=sum(r["extra_starts"] for r in records),
                       stale_fires=sum(r["stale_fires"] for r in records),
                       peak_rss_mb=[r.get("peak_rss_mb", 0.0) for r in records])
    _attribute_starts(result, records)
    await _scan_runs(js, names, result)
    await nc.close()
    result.check = await store_check(target, prefix, alive=(alive_from, alive_to),
                                     manual=False)
    return result


def _calls(children: list[Child]) -> Counter[str]:
    return sum((c.calls() for c in children), Counter())


def _children_done(children: list[Child], due_iso: str, count: int) -> bool:
    # Owners split a minute among the replicas: together they fire every due time.
    return (sum(c.fired(due_iso) for c in children) >= count
            and sum(c.started(due_iso) for c in children) >= count
            and all(c.idle() for c in children))


def _attribute_starts(result: FiringRun, records: list[dict[str, Any]]) -> None:
    """Each boundary's start_session lateness; a Run started in two processes is a duplicate."""
    seen: Counter[str] = Counter()
    by_due = {b.due: b for b in result.boundaries}
    for record in records:
        for run_id, (due, wall) in record["starts"]:
            seen[run_id] += 1
            boundary = by_due.get(due)
            if boundary is not None and seen[run_id] == 1:
                boundary.starts.append(wall - due)
    result.extra_starts += sum(n - 1 for n in seen.values() if n > 1)


async def fire_manual(server: NatsServer | Target, count: int, *, boundaries: int = 2,
                      prefix: str = "FIREM") -> FiringRun:
    """One in-process provider whose ManualClock is moved to each boundary.

    Lateness is counted from the instant the clock was moved; with the clock frozen there,
    a Schedule read never ages, so no fire is ever retried as stale.
    """
    target = target_of(server)
    names = Names(prefix)
    clock = ManualClock(datetime(2030, 6, 1, 12, 0, 30, tzinfo=UTC))
    provider = NatsSchedulerProvider(
        settings_for(target.url, prefix, count, replicas=target.stream_replicas,
                     server_sync_always=target.sync_always), clock=clock)
    handler, tally = await started(provider, prefix)
    nc = await nats.connect(target.url.split(","))
    js = nc.jetstream(timeout=30)
    measured: list[Boundary] = []
    try:
        apply_rate = await apply_all(provider, [minute_schedule(i) for i in range(count)])
        ticker = provider.ticker
        assert ticker is not None
        for k in range(boundaries):
            due_at = datetime(2030, 6, 1, 12, 1 + k, tzinfo=UTC)
            before = await counters(js, target.http_urls, names, tally.counts)
            fired_before, origin = ticker.fired, time.time()
            cpu_before = (time.process_time(), server_cpu(target))
            clock.set(due_at)
            done = await poll(lambda f=fired_before: ticker.fired >= f + count
                              and provider.ledger.unfinished_count() == 0
                              and pending_tasks(provider) == 0,
                              BOUNDARY_TIMEOUT, interval=0.05)
            done_in = time.time() - origin if done else None
            after = await counters(js, target.http_urls, names, tally.counts)
            boundary = Boundary(origin, due_at.isoformat(), before, after, done_in)
            boundary.cpu = (time.process_time() - cpu_before[0],
                            server_cpu(target) - cpu_before[1])
            boundary.starts = [wall - origin for due, wall in handler.starts.values()
                               if due == due_at.timestamp()]
            measured.append(boundary)
        result = FiringRun(count, 1, True, apply_rate, measured,
                           extra_starts=handler.extra_starts, stale_fires=provider.stale_fires)
    finally:
        await provider.stop()
    await _scan_runs(js, names, result)
    await nc.close()
    result.check = await store_check(target, prefix, alive=None, manual=True)
    return result


async def _scan_runs(js: JetStreamContext, names: Names, result: FiringRun) -> None:
    """Read the Run events stored from the first boundary on: counts, duplicates, timestamps.

    Read after the boundaries, so the reading costs the provider nothing while it fires.
    """
    if not result.boundaries:
        return
    first_seq = result.boundaries[0].before.streams[names.runs_stream][1] + 1
    last_seq = result.boundaries[-1].after.streams[names.runs_stream][1]
    by_iso = {b.due_iso: b for b in result.boundaries}
    per_due_time: Counter[tuple[str, str]] = Counter()
    seen = 0

    async def on_msg(msg: Any) -> None:
        nonlocal seen
        seen += 1
        event = decode_run_event(msg.data)
        run = event.run
        boundary = by_iso.get(run.due_at.isoformat()) if run.due_at else None
        if boundary is None:
            return
        stored = msg.metadata.timestamp.timestamp()
        if isinstance(event, RunCreated):
            boundary.created += 1
            per_due_time[(run.deployment_id, boundary.due_iso)] += 1
            boundary.created_late.append(stored - boundary.due)
        elif isinstance(event, RunDispatched):
            boundary.dispatched_late.append(stored - boundary.due)

    if last_seq >= first_seq:
        sub = await js.subscribe(names.runs_filter, stream=names.runs_stream, cb=on_msg,
                                 ordered_consumer=True,
                                 deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
                                 config=ConsumerConfig(opt_start_seq=first_seq))
        await poll(lambda: seen >= last_seq - first_seq + 1, timeout=120)
        await sub.unsubscribe()
    for (_, due_iso), n in per_due_time.items():
        if n > 1:
            by_iso[due_iso].duplicate_runs += n - 1


def print_firing(result: FiringRun, refs: References | None) -> None:
    mode = "ManualClock, in-process" if result.manual else "real clock"
    print(f"\nfiring: {result.count:,} '{result.cron}' Schedules, {result.replicas} replica(s), "
          f"{mode}; applied at {result.apply_rate:,.0f}/s")
    for n, b in enumerate(result.boundaries, 1):
        print(f" boundary {n} ({b.due_iso}): Runs stored {b.created:,} of {result.count:,}; "
              f"duplicate Runs {b.duplicate_runs}; first start_session calls {len(b.starts):,}")
        done = "not within the bound" if b.done_in is None else f"{b.done_in:.2f} s"
        print(f"  all dispatched (and leases released) after the due time: {done}")
        if b.cpu is not None and b.done_in:
            print(f"  CPU over that time: provider process {b.cpu[0]:.2f} s "
                  f"({b.cpu[0] / b.done_in:.0%} of one core, "
                  f"{b.cpu[0] / max(b.created, 1) * 1e6:,.0f} us per Run), "
                  f"nats-server {b.cpu[1]:.2f} s ({b.cpu[1] / b.done_in:.0%})")
        print(f"  start_session lateness:        {spread(b.starts)}")
        print(f"  run.created stored lateness:   {spread(b.created_late)}")
        print(f"  run.dispatched stored lateness: {spread(b.dispatched_late)}")
        if b.starts and refs is not None:
            runs_per_s = len(b.starts) / max(max(b.starts), 1e-9)
            print(f"  Runs started per second up to the last: {runs_per_s:,.0f}/s = "
                  f"{runs_per_s / refs.rates.gathered:.3f}x the gathered publish rate, "
                  f"{runs_per_s / refs.rates.atomic:.3f}x atomic batches"
                  f"{refs.nats_ratios(runs_per_s)}")
        print("\n".join(per_run_lines(b.before, b.after, b.created)
                        + cpu_lines(b.before, b.after, b.created)))
    print(f" repeated start_session calls (duplicates, must be 0): {result.extra_starts}; "
          f"stale Schedule reads redone: {result.stale_fires}")
    if result.peak_rss_mb:
        print(" peak resident memory per replica: "
              + ", ".join(f"{mb:,.0f} MB" for mb in result.peak_rss_mb))
    print(f" {check_line(result.check)}")


# ----------------------------------------------------------------------------- Run now


@dataclass
class EnqueueRun:
    seconds: float
    enqueued: int
    errors: int
    dispatched_in: float | None
    """Seconds from the first enqueue until every Run was dispatched (None: not in time)."""
    to_start: list[float]
    """Seconds from ``enqueue`` returning to the Run's ``start_session``."""
    before: Counters
    after: Counters

    @property
    def enqueue_rate(self) -> float:
        return self.enqueued / self.seconds

    @property
    def dispatch_rate(self) -> float | None:
        return None if self.dispatched_in is None else self.enqueued / self.dispatched_in


async def enqueue_run(server: NatsServer | Target, *, seconds: float = 10.0,
                      prefix: str = "ENQ") -> EnqueueRun:
    """``CALLERS`` concurrent callers of ``enqueue`` (Run now) for ``seconds``, then the drain."""
    target = target_of(server)
    names = Names(prefix)
    provider = NatsSchedulerProvider(
        settings_for(target.url, prefix, CALLERS, replicas=target.stream_replicas,
                     server_sync_always=target.sync_always))
    handler, tally = await started(provider, prefix)
    nc = await nats.connect(target.url.split(","))
    js = nc.jetstream(timeout=30)
    try:
        await apply_all(provider, [minute_schedule(i, enabled=False) for i in range(CALLERS)])
        before = await counters(js, target.http_urls, names, tally.counts)
        returned: dict[str, float] = {}
        errors = 0
        began, wall = time.perf_counter(), time.time()

        async def caller(i: int) -> None:
            nonlocal errors
            request = EnqueueRequest(f"dep-{i:05d}", Trigger.RUN_NOW)
            while time.perf_counter() - began < seconds:
                try:
                    run = await provider.enqueue(request)
                    returned[run.run_id] = time.time()
                except Exception:
                    errors += 1

        await asyncio.gather(*(caller(i) for i in range(CALLERS)))
        elapsed = time.perf_counter() - began
        done = await poll(lambda: handler.admitted >= len(returned)
                          and provider.ledger.unfinished_count() == 0
                          and pending_tasks(provider) == 0, timeout=120)
        dispatched_in = time.time() - wall if done else None
        after = await counters(js, target.http_urls, names, tally.counts)
        to_start = [handler.starts[r][1] - t for r, t in returned.items() if r in handler.starts]
        return EnqueueRun(elapsed, len(returned), errors, dispatched_in, to_start, before, after)
    finally:
        await provider.stop()
        await nc.close()


def print_enqueue(result: EnqueueRun, refs: References) -> None:
    gathered = refs.rates.gathered
    print(f"\nRun now: {CALLERS} concurrent callers of enqueue for {result.seconds:.1f} s: "
          f"{result.enqueued:,} Runs ({result.errors} errors)")
    print(f"  enqueue: {result.enqueue_rate:,.0f} Runs/s = "
          f"{result.enqueue_rate / gathered:.3f}x the gathered publish rate ({gathered:,.0f}/s), "
          f"{result.enqueue_rate / refs.rates.publish_async:.3f}x publish_async, "
          f"{result.enqueue_rate / refs.rates.atomic:.3f}x atomic batches"
          f"{refs.nats_ratios(result.enqueue_rate)}")
    rate = result.dispatch_rate
    if rate is None:
        print("  dispatch: not every Run was dispatched within 120 s")
    else:
        print(f"  dispatch (stored -> DISPATCHED, from the first enqueue to the last dispatched): "
              f"{rate:,.0f} Runs/s = {rate / gathered:.3f}x the gathered publish rate, "
              f"{rate / refs.rates.publish_async:.3f}x publish_async, "
              f"{rate / refs.rates.atomic:.3f}x atomic batches{refs.nats_ratios(rate)}")
    print(f"  enqueue returned -> start_session: {spread(result.to_start)}")
    print("\n".join(per_run_lines(result.before, result.after, result.enqueued)))


# ----------------------------------------------------------------------------- main

USE_UVLOOP = False
"""Whether this process (and the child replicas it spawns) run on uvloop (``--uvloop``)."""


async def with_server(body: Callable[[NatsServer], Awaitable[None]]) -> None:
    with tempfile.TemporaryDirectory() as tmp, NatsServer(tmp).start() as server:
        await body(server)


@contextlib.contextmanager
def started_target(tmp: Path, *, sync_always: bool, cluster: bool) -> Iterator[Target]:
    """A fresh server, or a fresh 3-node cluster, for one fsync setting; always stopped."""
    if not cluster:
        with NatsServer(tmp, sync_always=sync_always).start() as server:
            yield target_of(server)
        return
    sys.path.insert(0, str(SCRIPT.parents[1]))  # the repository root, for tests.harness
    from tests.harness.cluster import NatsCluster

    with NatsCluster(tmp, sync_always=sync_always).start() as nodes:
        yield Target(nodes.urls, [n.http_url for n in nodes.nodes],
                     [n.pid or 0 for n in nodes.nodes], stream_replicas=3,
                     sync_always=sync_always)


async def measure_on(target: Target, args: argparse.Namespace) -> None:
    """Every figure the arguments ask for, on one server (or cluster) with its references."""
    loop = "uvloop" if USE_UVLOOP else "asyncio"
    print(f"\n=== {target.label}; event loop {loop}; {os.cpu_count()} cores; "
          f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC ===")
    refs = None
    if not args.skip_references or args.enqueue:
        refs = await references(target.url, args.schedules,
                                with_schedules=not (args.enqueue or args.skip_references),
                                replicas=target.stream_replicas)
        print_references(refs, args.schedules)
    if args.enqueue:
        assert refs is not None
        print_enqueue(await enqueue_run(target, seconds=args.seconds), refs)
        return
    if args.manual:
        print_firing(await fire_manual(target, args.schedules, boundaries=args.boundaries), refs)
        return
    results = []
    for replicas in args.replicas:
        result = await fire_real(target, args.schedules, replicas=replicas,
                                 boundaries=args.boundaries, prefix=f"FIRE{replicas}",
                                 herd=args.herd)
        print_firing(result, refs)
        results.append(result)
    print_scale_out(results)


def print_scale_out(results: list[FiringRun]) -> None:
    """CPU per Run summed over the replicas, for each replica count, against one replica's:
    adding a replica should add its share of the work, not coordination."""
    if len(results) < 2:
        return
    print("\nscale-out in CPU (all replicas' CPU per Run, each boundary; vs one replica):")
    one = next((r for r in results if r.replicas == 1), None)
    reference = [cpu_per_run(b) for b in one.boundaries] if one is not None else []
    for result in results:
        figures = []
        for k, boundary in enumerate(result.boundaries):
            per_run = cpu_per_run(boundary)
            if per_run is None:
                figures.append("not measured")
                continue
            base = reference[k] if k < len(reference) else None
            ratio = f" ({per_run / base:.2f}x)" if base else ""
            figures.append(f"{per_run * 1e6:,.0f} us{ratio}")
        print(f"  {result.replicas} replica(s): " + ", ".join(figures))


async def main(args: argparse.Namespace) -> None:
    modes = {"default": [False], "always": [True], "both": [False, True]}[args.sync]
    for sync_always in modes:
        with tempfile.TemporaryDirectory() as tmp, started_target(
                Path(tmp), sync_always=sync_always, cluster=args.cluster) as target:
            await measure_on(target, args)


def replica_counts(text: str) -> list[int]:
    counts = [int(part) for part in text.split(",") if part.strip()]
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError("replica counts are positive integers, e.g. 1,2")
    return counts


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--schedules", type=int, default=10_000)
    parser.add_argument("--replicas", type=replica_counts, default=[1],
                        help="provider processes firing; a list (1,2) runs each in turn")
    parser.add_argument("--boundaries", type=int, default=2)
    parser.add_argument("--herd", action="store_true",
                        help="the Schedules are due once, at one minute a few minutes ahead; "
                             "wait for all of their Runs however late (implies one boundary)")
    parser.add_argument("--manual", action="store_true",
                        help="one in-process provider on a ManualClock (no waiting)")
    parser.add_argument("--enqueue", action="store_true",
                        help=f"{CALLERS} callers of enqueue (Run now) instead of firing")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of --enqueue")
    parser.add_argument("--sync", choices=("default", "always", "both"), default="both",
                        help="the server's fsync: its default interval, sync_interval: always "
                             "(the shipped nats-server.conf), or both in turn (default)")
    parser.add_argument("--cluster", action="store_true",
                        help="a 3-node cluster on loopback, every stream R3")
    parser.add_argument("--uvloop", action="store_true",
                        help="run the event loops (this one and the replicas') on uvloop")
    parser.add_argument("--skip-references", action="store_true")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--prefix", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--stream-replicas", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--server-sync-always", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--lease-seconds", type=float,
                        help="the replicas' lease length (default: the provider's, 5 s)")
    args = parser.parse_args(argv)
    if args.manual and args.replicas != [1]:
        parser.error("--manual runs one in-process provider: it cannot be combined with "
                     "--replicas (real processes cannot share a ManualClock)")
    return args


LEASE_SECONDS: float | None = None
"""The replicas' lease length (``--lease-seconds``); None: the provider's default."""


def run(coroutine: Awaitable[None], use_uvloop: bool) -> None:
    """Run ``coroutine`` on asyncio's loop, or on uvloop's."""
    global USE_UVLOOP
    USE_UVLOOP = use_uvloop
    if not use_uvloop:
        asyncio.run(coroutine)  # type: ignore[arg-type]
        return
    import uvloop  # the bench extra: pip install -e '.[bench]'

    uvloop.run(coroutine)  # type: ignore[arg-type]


if __name__ == "__main__":
    arguments = parse()
    LEASE_SECONDS = arguments.lease_seconds
    if arguments.child:
        run(child_main(arguments.url, arguments.prefix, arguments.schedules, arguments.out,
                       arguments.stream_replicas, arguments.server_sync_always,
                       arguments.lease_seconds),
            arguments.uvloop)
    else:
        run(main(arguments), arguments.uvloop)
