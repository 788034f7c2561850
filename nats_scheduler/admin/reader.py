"""Read-only admin answers straight from the store, for when no scheduler process runs.

Every event carries its aggregate's state after it (events.py), so the last event of each
subject is the whole truth: Schedules are the last message per subject of the Schedule
events, a deployment's Runs the last message per subject of ``<P>.run.<deployment>.*``, one
Run the last message of ``<P>.run.*.<run>``. The answers are built by the same functions as
the admin service's (views.py, health.py), so they look the same.

The admin service also uses this module for what no single process knows: the live replicas
(a scatter-gather request every replica answers), the leases and the store's health.

Reading everything (``list_schedules`` with last-Run columns, ``health``) costs one message
per Run of the whole history; that is acceptable for a fallback and for a console refresh
while no process runs, and the service answers from memory otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

import msgspec
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import DeliverPolicy, StreamConfig
from nats.js.client import JetStreamContext

from ..clock import Clock, SystemClock
from ..core.events import RunRecord, ScheduleRecord, decode_schedule_event
from ..jetstream.connection import server_version
from ..jetstream.history_reads import PagedHistory
from ..jetstream.leases import LeaseValue
from ..jetstream.runlog import RunLog
from ..jetstream.store import Store
from ..names import HDR_KV_OPERATION, HDR_STATUS, Names, token
from ..projections.ledger import Ledger
from ..projections.reads import RunReads, load_ledger, load_recent
from ..projections.schedule_table import ScheduleTable
from ..seam import SchedulerError
from ..settings import NatsSettings
from .api import (
    AdminError,
    ClusterStatus,
    ErrorCode,
    Health,
    LeaseView,
    ReplicaView,
    RunList,
    RunView,
    ScheduleDetail,
    ScheduleView,
    StoreHealth,
)
from .bounded import bounded_health
from .health import HealthPolicy, build_health
from .views import probe_limit, run_list, schedule_detail, schedule_views

T = TypeVar("T")

REPLICA_STATUS_ENDPOINT = "replica.status"
"""Under ``<P>.admin.``: every replica answers (each has its own queue group)."""


@dataclass(frozen=True)
class Stored:
    """One message read back: its stream sequence, subject, body and headers."""

    seq: int
    subject: str
    data: bytes
    headers: dict[str, str]


def _unreadable(what: str) -> AdminError:
    return AdminError(
        ErrorCode.UNAVAILABLE,
        f"the scheduler store could not be read ({what}); check the connection and that "
        "the connected user may read the scheduler's data",
    )


async def guarded(what: str, op: Callable[[], Awaitable[T]]) -> T:
    """Run ``op``; engine and connection failures become a clean UNAVAILABLE AdminError."""
    try:
        return await op()
    except AdminError:
        raise
    except (nats.errors.Error, nats.js.errors.Error, TimeoutError, OSError,
            SchedulerError) as exc:
        raise _unreadable(what) from exc


async def last_per_subject(
    nc: Client, stream: str, subject_filter: str, *, timeout: float = 5.0
) -> list[Stored]:
    """The last message of every subject matching ``subject_filter`` (empty if no stream).

    An ordered consumer with ``DeliverPolicy.LAST_PER_SUBJECT``: the server sends one
    message per subject, and a delivered message's ``num_pending`` of 0 says it was the
    last one. The consumer pushes at once, so its info may already show nothing pending:
    it is empty only if nothing was delivered either.
    """
    js = nc.jetstream(timeout=timeout)
    try:
        sub = await js.subscribe(subject_filter, stream=stream, ordered_consumer=True,
                                 deliver_policy=DeliverPolicy.LAST_PER_SUBJECT)
    except nats.js.errors.NotFoundError:
        return []
    found: list[Stored] = []
    try:
        info = await sub.consumer_info()
        delivered = info.delivered.consumer_seq if info.delivered is not None else 0
        pending = (info.num_pending or 0) + (delivered or 0)
        while pending > 0:
            msg: Msg = await sub.next_msg(timeout)
            meta = msg.metadata
            found.append(Stored(meta.sequence.stream, msg.subject, msg.data,
                                dict(msg.headers or {})))
            pending = meta.num_pending
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
    return found


async def last_message(nc: Client, stream: str, subject: str, *, timeout: float = 5.0
                       ) -> Stored | None:
    """The last message of ``subject`` (wildcards allowed), or None."""
    js = nc.jetstream(timeout=timeout)
    try:
        msg = await js.get_last_msg(stream, subject)
    except nats.js.errors.NotFoundError:
        return None
    return Stored(int(msg.seq or 0), msg.subject or subject, msg.data or b"",
                  dict(msg.headers or {}))


async def gather(nc: Client, subject: str, payload: bytes = b"{}", *, timeout: float = 1.0,
                 settle: float = 0.15) -> list[bytes]:
    """Scatter-gather: publish once, collect every answer.

    Stops ``settle`` seconds after the last answer, at ``timeout``, or at once when the
    server reports that nobody listens (a 503 status message).
    """
    inbox = nc.new_inbox()
    queue: asyncio.Queue[Msg] = asyncio.Queue()

    async def collect(msg: Msg) -> None:
        await queue.put(msg)

    sub = await nc.subscribe(inbox, cb=collect)
    answers: list[bytes] = []
    try:
        await nc.publish(subject, payload, reply=inbox)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            wait = min(remaining, settle) if answers else remaining
            try:
                msg = await asyncio.wait_for(queue.get(), wait)
            except TimeoutError:
                break
            if (msg.headers or {}).get(HDR_STATUS) == "503":
                break
            answers.append(msg.data)
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
    return answers


@dataclass(frozen=True)
class Retention:
    """The history retention in force: the limits of the index stream ``<P>_RUNINDEX``.

    The server enforces them (docs/configuration.md, "History retention"), so they, not any
    process's settings, say what the history keeps. None: no such limit on the stream.
    """

    days: float | None
    """``max_age`` in days: no finished Run older than this is kept."""
    runs: int | None
    """``max_msgs_per_subject``: the newest Runs kept per deployment."""


def retention_of(config: StreamConfig) -> Retention:
    """The retention an index stream's configuration sets (0 / -1 in NATS: no limit)."""
    age = config.max_age or 0.0
    per_subject = config.max_msgs_per_subject
    return Retention(days=age / 86_400 if age > 0 else None,
                     runs=per_subject if per_subject and per_subject > 0 else None)


async def index_retention(js: JetStreamContext, names: Names) -> Retention | None:
    """The retention in force, or None when the index stream does not exist (no provider of
    this version has started with this prefix yet). Other failures propagate.

    One reading for every place that shows it: the store health of the admin service and of
    the store fallback (both :meth:`StoreReader.store_health`), and ``doctor``.
    """
    try:
        info = await js.stream_info(names.index_stream)
    except nats.js.errors.NotFoundError:
        return None
    return retention_of(info.config)


def _lease_value(stored: Stored) -> LeaseValue | None:
    if stored.headers.get(HDR_KV_OPERATION) in ("DEL", "PURGE") or not stored.data:
        return None
    try:
        return msgspec.json.decode(stored.data, type=LeaseValue)
    except msgspec.DecodeError:
        return None


class StoreReader:
    """Read-only admin queries answered from the store (no scheduler process needed)."""

    def __init__(
        self,
        nc: Client,
        prefix: str = "SCHED",
        *,
        timeout: float = 5.0,
        policy: HealthPolicy | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.nc = nc
        self.names = Names(prefix)
        self.timeout = timeout
        self.policy = policy or HealthPolicy()
        self.clock = clock or SystemClock()

    # ------------------------------------------------------------------ loading

    async def schedule_table(self) -> ScheduleTable:
        stored = await guarded("schedules", lambda: last_per_subject(
            self.nc, self.names.schedules_stream, self.names.schedules_filter,
            timeout=self.timeout))
        table = ScheduleTable()
        for item in stored:
            table.apply(item.seq, decode_schedule_event(item.data).schedule)
        return table

    def store(self) -> Store:
        """The provider's store reads over this connection (no process needed)."""
        return Store(self.nc, NatsSettings(prefix=self.names.prefix,
                                           store_retry_seconds=self.timeout))

    def reads(self) -> tuple[PagedHistory, RunReads]:
        """History reads over this connection (the provider's own code, no process needed)."""
        store = self.store()
        history = PagedHistory(store)
        return history, RunReads(history, RunLog(store, Ledger()), Ledger(), self.clock)

    async def ledger(self, deployments: list[str]) -> Ledger:
        """Every open Run, each deployment's newest Run and the last day's Runs."""
        history, _ = self.reads()
        ledger = Ledger()
        now = self.clock.now()
        open_runs = await self.leases()
        await guarded("runs", lambda: load_ledger(ledger, history, open_runs, deployments))
        await guarded("runs", lambda: load_recent(ledger, history, now))
        return ledger

    async def schedule_record(self, deployment_id: str) -> ScheduleRecord | None:
        subject = self.names.schedule_subject(checked(deployment_id, "deployment ID"))
        stored = await guarded("a schedule", lambda: last_message(
            self.nc, self.names.schedules_stream, subject, timeout=self.timeout))
        return None if stored is None else decode_schedule_event(stored.data).schedule

    async def run_record(self, run_id: str) -> RunRecord | None:
        """A retained Run by ID, or None."""
        _, reads = self.reads()
        return await guarded("a run", lambda: reads.find(checked(run_id, "run ID")))

    async def leases(self) -> dict[str, LeaseValue]:
        """run_id -> lease of every lease currently stored (expired ones included)."""
        stored = await guarded("leases", lambda: last_per_subject(
            self.nc, self.names.leases_stream, self.names.leases_filter, timeout=self.timeout))
        found = {}
        for item in stored:
            value = _lease_value(item)
            if value is not None:
                found[value.run_id] = value
        return found

    # ------------------------------------------------------------------ answers

    async def list_schedules(self, filter: str | None = None, *,
                             include_deleted: bool = False) -> list[ScheduleView]:
        table = await self.schedule_table()
        ledger = await self.ledger([r.deployment_id for r in table.all()])
        return schedule_views(table.all(), ledger, self.clock.now(), filter=filter,
                              include_deleted=include_deleted)

    async def get_schedule(self, deployment_id: str) -> ScheduleDetail:
        record = await self.schedule_record(deployment_id)
        if record is None:
            raise AdminError(ErrorCode.NOT_FOUND, f"deployment {deployment_id!r} has no schedule")
        ledger = await self.ledger([deployment_id])
        return schedule_detail(record, ledger, self.clock.now())

    async def list_runs(self, deployment_id: str, *, limit: int = 50,
                        before: str | None = None) -> RunList:
        probe = probe_limit(limit)
        checked(deployment_id, "deployment ID")
        _, reads = self.reads()
        try:
            page = await guarded("runs", lambda: reads.page(deployment_id, probe, before))
        except KeyError:
            raise AdminError(
                ErrorCode.NOT_FOUND,
                f"run {before!r} is not a run of deployment {deployment_id!r}") from None
        return run_list(page, limit)

    async def get_run(self, run_id: str) -> RunView:
        record = await self.run_record(run_id)
        if record is None:
            raise AdminError(ErrorCode.NOT_FOUND, f"run {run_id!r} does not exist")
        return record

    async def lease_views(self) -> list[LeaseView]:
        now = self.clock.now()
        views = [LeaseView(run_id=v.run_id, holder=v.holder, expires_at=v.expires_at)
                 for v in (await self.leases()).values() if v.expires_at > now]
        return sorted(views, key=lambda v: v.run_id)

    async def replicas(self, timeout: float = 1.0) -> list[ReplicaView]:
        """Every live replica's own view (identity, clock, in-flight Runs)."""
        subject = self.names.admin_subject(REPLICA_STATUS_ENDPOINT)
        answers = await guarded("replicas", lambda: gather(self.nc, subject, timeout=timeout))
        found = []
        for data in answers:
            with contextlib.suppress(msgspec.DecodeError):
                found.append(msgspec.json.decode(data, type=ReplicaView))
        return sorted(found, key=lambda r: r.identity)

    async def store_health(self) -> StoreHealth:
        """Reachability, server version, replicas and leader of the Run events, and the
        history retention in force (the index stream's limits)."""
        version = server_version(self.nc)
        base = dict(reachable=self.nc.is_connected, server_version=version or None)
        js = self.nc.jetstream(timeout=self.timeout)
        try:
            runs = await js.stream_info(self.names.runs_stream)
            schedules = await js.stream_info(self.names.schedules_stream)
        except nats.js.errors.NotFoundError:
            return StoreHealth(**base, detail=(  # type: ignore[arg-type]
                f"not prepared: no scheduler process has started with prefix "
                f"{self.names.prefix!r} yet"))
        except (nats.errors.Error, nats.js.errors.Error, TimeoutError, OSError):
            return StoreHealth(**base, detail="the scheduler's data could not be read")  # type: ignore[arg-type]
        leader = runs.cluster.leader if runs.cluster is not None else None
        detail = (f"{schedules.state.messages} schedule events, "
                  f"{runs.state.messages} run events")
        try:
            retention = await index_retention(js, self.names)
        except (nats.errors.Error, nats.js.errors.Error, TimeoutError, OSError):
            retention = None  # unknown; the rest of the answer still holds (doctor says why)
        return StoreHealth(**base, replicas=runs.config.num_replicas,  # type: ignore[arg-type]
                           leader=leader, detail=detail,
                           retention_days=retention.days if retention else None,
                           retention_runs=retention.runs if retention else None)

    async def cluster_status(self, replica_timeout: float = 1.0) -> ClusterStatus:
        replicas = await self.replicas(replica_timeout)
        in_flight = sorted({run for r in replicas for run in r.in_flight})
        leases = await self.lease_views()
        return ClusterStatus(replicas=replicas, leases=leases, in_flight=in_flight,
                             store=await self.store_health(), leases_total=len(leases),
                             in_flight_total=len(in_flight))

    async def health(self) -> Health:
        table = await self.schedule_table()
        ledger = await self.ledger([r.deployment_id for r in table.all()])
        leases = lease_expiries(await self.leases())
        # Read here, not sent: nothing to cut, the counts as the service gives them.
        return bounded_health(
            build_health(table.live(), ledger, leases, self.clock.now(), self.policy),
            budget=sys.maxsize)


def checked(value: str, what: str) -> str:
    """An ID usable in a lookup, or an INVALID_REQUEST error naming the problem."""
    try:
        token(value)
    except (ValueError, TypeError) as exc:
        raise AdminError(ErrorCode.INVALID_REQUEST, f"{what} is not usable: {exc}") from None
    return value


def lease_expiries(leases: dict[str, LeaseValue]) -> dict[str, datetime]:
    """run_id -> expiry, the shape health.py takes."""
    return {run_id: v.expires_at for run_id, v in leases.items()}
