"""Read-only admin answers straight from the store, for when no scheduler process runs.

Every event carries its aggregate's state after it (events.py), so the last event of each
subject is the whole truth: Schedules are the last message per subject of the Schedule
events, a deployment's Runs the last message per subject of ``<P>.run.<deployment>.*``, one
Run the last message of ``<P>.run.*.<run>``. The answers are built by the same functions as
the admin service's (views.py, health.py), so they look the same.

The admin service also uses this module for what no single process knows: the live replicas
(every key of the replicas bucket, with what each replica that serves the admin service
answers to a scatter-gather request), the leases and the store's health. The bucket counts
the replicas the server refuses the admin service: they fire, and answer nothing.

Reading everything (``list_schedules`` with last-Run columns, ``health``) costs one message
per Run of the whole history; that is acceptable for a fallback and for a console refresh
while no process runs, and the service answers from memory otherwise.

The reads themselves (consumers, stream info, the scatter-gather) are the adapter
``jetstream/store_reads.py``; this module decides what they answer.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TypeVar

import msgspec

from ..clock import Clock, SystemClock
from ..core.events import RunRecord, ScheduleRecord
from ..core.serving import Serving
from ..jetstream.connection import Connection, server_version
from ..jetstream.errors import is_engine_failure
from ..jetstream.foreign import ForeignMessage, lease_value_on, schedule_event_on
from ..jetstream.history_reads import PagedHistory
from ..jetstream.leases import LeaseValue
from ..jetstream.replica_reads import LiveReplica, read_live_replicas
from ..jetstream.runlog import RunLog
from ..jetstream.store import Store
from ..jetstream.store_reads import (
    Stored,
    event_streams,
    gather,
    index_retention,
    last_message,
    last_per_subject,
)
from ..names import HDR_KV_OPERATION, Names, token
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
    except Exception as exc:
        if isinstance(exc, SchedulerError) or is_engine_failure(exc):
            raise _unreadable(what) from exc
        raise


def _lease_value(stored: Stored) -> LeaseValue | None:
    """A stored lease, or None: closed, or not a lease of ours (foreign: skipped)."""
    if stored.headers.get(HDR_KV_OPERATION) in ("DEL", "PURGE") or not stored.data:
        return None
    try:
        return lease_value_on(stored.subject, stored.data)
    except ForeignMessage:
        return None


class StoreReader:
    """Read-only admin queries answered from the store (no scheduler process needed)."""

    def __init__(
        self,
        nc: Connection,
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
            record = await self._schedule_of(item.subject, item.data)
            if record is not None:
                table.apply(item.seq, record)
        return table

    async def _schedule_of(self, subject: str, data: bytes) -> ScheduleRecord | None:
        """The Schedule a subject's last message holds; when it is foreign (not an event of
        ours: jetstream/foreign.py), the subject's last event of ours, read on its own."""
        try:
            return schedule_event_on(subject, data).schedule
        except ForeignMessage:
            pass
        store = self.store()
        tail = await guarded("a schedule", lambda: store.tail(subject, schedule_event_on))
        return None if tail.ours is None else schedule_event_on(subject, tail.ours.data).schedule

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
        return None if stored is None else await self._schedule_of(subject, stored.data)

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
        """Every live replica: those the replicas bucket lists, and each one's own view
        (clock, in-flight Runs, figures) when it answered ``replica.status``."""
        subject = self.names.admin_subject(REPLICA_STATUS_ENDPOINT)
        answers = await guarded("replicas", lambda: gather(self.nc, subject, timeout=timeout))
        found = []
        for data in answers:
            with contextlib.suppress(msgspec.DecodeError):
                found.append(msgspec.json.decode(data, type=ReplicaView))
        return with_live(found, await self.live_replicas())

    async def live_replicas(self) -> list[LiveReplica] | None:
        """Every live replica as the replicas bucket says, answering or not; None when this
        user may not read it (or the store did not answer): then only answers count."""
        try:
            return await read_live_replicas(self.nc, self.names,
                                            timeout=min(self.timeout, 2.0))
        except Exception as exc:
            if isinstance(exc, SchedulerError) or is_engine_failure(exc):
                return None
            raise

    async def store_health(self) -> StoreHealth:
        """Reachability, server version, replicas and leader of the Run events, and the
        history retention in force (the index stream's limits)."""
        version = server_version(self.nc)
        base = dict(reachable=self.nc.is_connected, server_version=version or None)
        try:
            streams = await event_streams(self.nc, self.names, timeout=self.timeout)
        except Exception as exc:
            if not is_engine_failure(exc):
                raise
            return StoreHealth(**base, detail="the scheduler's data could not be read")  # type: ignore[arg-type]
        if streams is None:
            return StoreHealth(**base, detail=(  # type: ignore[arg-type]
                f"not prepared: no scheduler process has started with prefix "
                f"{self.names.prefix!r} yet"))
        detail = f"{streams.schedule_events} schedule events, {streams.run_events} run events"
        try:
            retention = await index_retention(self.nc, self.names, timeout=self.timeout)
        except Exception as exc:
            if not is_engine_failure(exc):
                raise
            retention = None  # unknown; the rest of the answer still holds (doctor says why)
        return StoreHealth(**base, replicas=streams.replicas,  # type: ignore[arg-type]
                           leader=streams.leader, detail=detail,
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


def with_live(answered: list[ReplicaView], live: list[LiveReplica] | None
              ) -> list[ReplicaView]:
    """The replicas that answered (they serve) and the live ones that did not (their key
    says why not), sorted by identity; ``live`` None: the answers alone."""
    views = {r.identity: msgspec.structs.replace(r, admin_service=Serving.YES.value)
             for r in answered}
    for replica in live or []:
        views.setdefault(replica.identity, ReplicaView(
            identity=replica.identity, started_at=replica.started_at,
            admin_service=replica.admin_service, answered=False))
    return sorted(views.values(), key=lambda r: r.identity)


def lease_expiries(leases: dict[str, LeaseValue]) -> dict[str, datetime]:
    """run_id -> expiry, the shape health.py takes."""
    return {run_id: v.expires_at for run_id, v in leases.items()}
