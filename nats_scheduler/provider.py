"""``NatsSchedulerProvider``: the AstraBox scheduler provider ``nats``.

This module is the seam's glue and nothing else. Each method checks its input
(:mod:`core.validation`), asks a functional core (:mod:`core.schedulecore`,
:mod:`core.runcore`) what to write, has a log (:mod:`jetstream.schedulelog`,
:mod:`jetstream.runlog`) append it conditionally, and answers reads from the history on the
server merged with what this process knows (:mod:`projections.reads`). The running parts are
wired in :meth:`NatsSchedulerProvider.start`: the ticker (:mod:`runtime.ticker`) fires due
times through the firing protocol (:mod:`runtime.firing`), the dispatcher
(:mod:`runtime.dispatcher`) calls the handler, and every process serves the operators' admin
service (:mod:`admin.service`) unless ``ASTRABOX_NATS_ADMIN_SERVICE=0``.
docs/architecture.md follows one Run through these files.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import ClassVar, Unpack, cast

from opentelemetry.metrics import MeterProvider

from .admin.service import AdminService
from .clock import Clock, SystemClock
from .core import calendar, schedulecore, validation
from .core.events import (
    RunRecord,
    ScheduleEventType,
    ScheduleRecord,
)
from .core.serving import Serving
from .jetstream.ports import JetStreamPorts
from .jetstream.store import Store
from .ports.runs import RunJournal
from .projections.ledger import Ledger
from .projections.schedule_table import ScheduleTable
from .runtime.dispatcher import Dispatcher
from .runtime.firing import PAUSE_VISIBILITY_SECONDS, Firing
from .runtime.schedule_changes import ScheduleChanges
from .runtime.ticker import FireObserver, Ticker
from .runtime.wiring import PortsFactory, Runtime
from .seam import (
    SEAMS_API_VERSION,
    EnqueueRequest,
    RepositoryBackend,
    Run,
    RunHandler,
    RunNotFound,
    Schedule,
    ScheduleNotFound,
    SchedulerConfigurationError,
    SchedulerProperties,
    SchedulerUnavailable,
    Trigger,
)
from .settings import NatsSettings

log = logging.getLogger(__name__)


def _identity() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class NatsSchedulerProvider:
    """Scheduled Deployments with all state in NATS JetStream, event-sourced.

    ``settings`` default to the ``ASTRABOX_NATS_*`` environment, read at ``configure()``.
    ``clock`` is injectable so tests drive due times and retries without waiting.
    ``meter_provider`` receives the metrics (:mod:`runtime.metrics`); None means the global
    OpenTelemetry one, a no-op unless the host installed an SDK. ``fire_observer`` is told
    of the due times this replica's ticker fires (the harness and benches count with it).
    ``ports`` builds the store's ports instead of a JetStream connection (the simulation's).
    """

    name: ClassVar[str] = "nats"
    seams_api_version: ClassVar[int] = SEAMS_API_VERSION

    def __init__(self, settings: NatsSettings | None = None, *, clock: Clock | None = None,
                 meter_provider: MeterProvider | None = None,
                 fire_observer: FireObserver | None = None,
                 ports: PortsFactory | None = None) -> None:
        self._given_settings = settings
        self._ports = ports
        self._meter_provider = meter_provider
        self._fire_observer = fire_observer
        self._settings: NatsSettings | None = None
        self._clock: Clock = clock or SystemClock()
        self._identity = ""
        self._embedded: object | None = None
        self._table = ScheduleTable()
        self._ledger = Ledger(shared_id=self._table.shared_id)
        self._running: Runtime | None = None
        self._started = False
        self._stopped = False

    # ------------------------------------------------------------------ properties

    @property
    def properties(self) -> SchedulerProperties:
        cap = (self._settings or self._given_settings or NatsSettings()).max_active_schedules
        return SchedulerProperties(recovery_scope="cluster", max_active_schedules=cap,
                                   pause_visibility_seconds=PAUSE_VISIBILITY_SECONDS)

    def describe(self) -> str:
        """One line for AstraBox's startup log."""
        return f"scheduler provider nats: {self.properties}"

    @property
    def identity(self) -> str:
        return self._identity

    @property
    def settings(self) -> NatsSettings:
        if self._settings is None:
            raise SchedulerConfigurationError("the nats scheduler was not configured")
        return self._settings

    @property
    def ledger(self) -> Ledger:
        return self._ledger

    @property
    def schedules(self) -> ScheduleTable:
        return self._table

    @property
    def runtime(self) -> Runtime | None:
        """The running parts (store, logs, loops) between ``start`` and ``stop``."""
        return self._running

    def _now(self) -> datetime:
        """The store's clock while running (a host clock minutes off must not move a Schedule's
        ``updated_at``, from which due times count), the injected clock before."""
        running = self._running
        return (running.clock if running is not None else self._clock).now()

    @property
    def ticker(self) -> Ticker | None:
        return self._running.ticker if self._running else None

    @property
    def dispatcher(self) -> Dispatcher | None:
        return self._running.dispatcher if self._running else None

    @property
    def firing(self) -> Firing | None:
        return self._running.firing if self._running else None

    @property
    def runlog(self) -> RunJournal:
        """The Run events' log (writes and leader reads), while started."""
        return self._require_started().runs

    @property
    def store(self) -> Store:  # the JetStream store behind the ports (the admin service's)
        return cast(JetStreamPorts, self._require_started().ports).store

    async def enforce_retention(self) -> int:
        """Apply the history retention now (it also runs every ``retention_interval``)."""
        return await self._require_started().retention.enforce()

    @property
    def stale_fires(self) -> int:
        """Firings whose Schedule read aged before the create and was done again."""
        return self._running.firing.stale_fires if self._running else 0

    # ------------------------------------------------------------------ lifecycle

    def configure(self, *, repository_backend: RepositoryBackend | None = None) -> None:
        """Read and check settings. No I/O. Any repository backend works beside NATS."""
        settings = self._given_settings or NatsSettings.from_env()
        self._settings = settings.validated()
        self._identity = self._settings.identity or _identity()

    async def start(self, handler: RunHandler) -> None:
        """Connect, prepare the store, resume leftovers, start loading the Schedules.

        Then serve the admin service (console and CLI actions), unless the settings turn it
        off for a host that runs it elsewhere. It returns before the Schedules are loaded:
        Schedule changes, firing and the admin service's answers wait for them
        (:meth:`until_ready`), and the first due times count from this call.
        """
        if self._settings is None:
            self.configure()
        if self._started:
            return
        settings = self.settings
        url_settings = settings
        if settings.embedded and not settings.url:
            url_settings = await asyncio.to_thread(self._start_embedded)
        self._running = await Runtime.connect(
            url_settings, ledger=self._ledger, table=self._table, clock=self._clock,
            identity=self._identity, handler=handler, meter_provider=self._meter_provider,
            fire_observer=self._fire_observer, ports=self._ports)
        self._started = True
        if settings.admin_service:
            await self._serve_admin(self._running)
        else:
            self._running.not_serving(Serving.OFF)
        self._running.start_loops()  # last: the Schedules' load must not delay the above
        log.info("%s (identity %s)", self.describe(), self._identity)

    async def _serve_admin(self, running: Runtime) -> None:
        """Start the admin service; a failure is logged, never fatal.

        It is the operators' way in, not part of scheduling: a process that cannot serve it
        still fires and dispatches, and other replicas (or a later restart) answer actions.
        """
        try:
            await running.serve(AdminService(self, clock=running.clock))
        except Exception:
            log.exception("the admin service could not start; console and command-line "
                          "actions are answered by other scheduler processes only")

    def _start_embedded(self) -> NatsSettings:
        from .natsserver.process import NatsServer

        server = NatsServer(store_dir=self.settings.store_dir)
        server.start()
        self._embedded = server
        return self.settings.with_(url=server.url)

    async def stop(self) -> None:
        """Stop the admin service, stop firing, drain handler calls (bounded), release
        what is unfinished."""
        running, already = self._running, self._stopped
        self._stopped = True
        if running is not None and not already:
            await running.stop(self.settings.drain_seconds)
        server, self._embedded = self._embedded, None
        if server is not None:
            await asyncio.to_thread(server.stop)  # type: ignore[attr-defined]

    def _require_started(self) -> Runtime:
        if not self._started or self._stopped or self._running is None:
            raise SchedulerUnavailable("the scheduler is not running")
        return self._running

    async def _require_ready(self) -> Runtime:
        """The running parts once the Schedule table is loaded (see :meth:`until_ready`)."""
        running = self._require_started()
        await running.until_ready()
        return running

    async def _require_table(self) -> Runtime:
        """The running parts once the Schedule table holds every Schedule: what Schedule
        changes decide on (the rest of the start-up, for firing, may still be going on)."""
        running = self._require_started()
        await running.until_table_loaded()
        return running

    async def until_ready(self) -> None:
        """Wait until this process has loaded every Schedule (``start`` returns before).

        Schedule changes and firing wait for it by themselves, and so does the admin
        service; SchedulerUnavailable if the load stops making progress."""
        await self._require_ready()

    @property
    def ready(self) -> bool:
        """Whether the Schedule table is loaded (start-up done)."""
        return self._running is not None and self._running.ready

    # ------------------------------------------------------------------ Schedules

    async def reconcile(self, schedules: Sequence[Schedule]) -> None:
        """Apply every Schedule given that can be; delete every stored one not given.

        As one ``apply`` per Schedule and one ``delete`` per Schedule missing, but decided
        in one pass on the Schedule table once one leader read proves it current
        (:mod:`runtime.freshness`): unchanged Schedules cost no write and no read, the
        changes are stored pipelined. A Schedule ``apply`` would refuse (definition, size,
        capacity, or a deployment given twice) is refused alone and never raised: it keeps
        its stored Schedule, is not deleted, and is logged, counted and listed
        (``runtime/refusals.py``), so one bad record never stops AstraBox's start or the
        other Schedules (docs/contract.md). Store failures raise. A Schedule equal to its
        stored definition is not checked again (it was when it was stored).

        It waits for the Schedule table only, not for the rest of the start-up (joining the
        replicas, planning every Schedule): AstraBox's restart is not kept waiting for
        what only firing needs (:meth:`Runtime.until_table_loaded`).
        """
        running = await self._require_table()
        await self._changes(running).reconcile(running, list(schedules))

    def _changes(self, running: Runtime) -> ScheduleChanges:
        return ScheduleChanges(self._table, cap=self.settings.max_active_schedules,
                               identity=self._identity, now=self._now,
                               refusals=running.refusals)

    async def apply(self, schedule: Schedule) -> None:
        """Create or replace a Schedule; durable (and visible to every replica) on return."""
        running = await self._require_table()
        await self._changes(running).apply(running, schedule)

    async def delete(self, deployment_id: str) -> None:
        """No further scheduled Runs; Runs already started continue; history stays."""
        running = await self._require_table()
        await self._changes(running).delete(running, deployment_id)

    async def hold(self, deployment_id: str,
                   **notes: Unpack[schedulecore.OperatorNotes]) -> ScheduleRecord:
        """Operator hold: stops firing until released; survives apply (docs/contract.md);
        ``notes``: who and why, with the proven ``caller`` the admin service knows."""
        return await self._operator_change(deployment_id, schedulecore.decide_hold, notes)

    async def release(self, deployment_id: str,
                      **notes: Unpack[schedulecore.OperatorNotes]) -> ScheduleRecord:
        """Lift an operator hold (``notes`` as for :meth:`hold`)."""
        return await self._operator_change(deployment_id, schedulecore.decide_release, notes)

    async def _operator_change(self, deployment_id: str, decide_fn: schedulecore.OperatorDecision,
                               notes: schedulecore.OperatorNotes) -> ScheduleRecord:
        running = await self._require_table()
        validation.check_operator_action(notes["by"], notes["reason"], notes.get(
            "on_behalf_of"), until=notes.get("until"), now=self._now())

        def decide(current: ScheduleRecord | None) -> ScheduleEventType | None:
            if current is None or current.deleted:
                raise ScheduleNotFound(f"deployment {deployment_id!r} has no schedule")
            return decide_fn(current, now=self._now(), actor=self._identity, **notes)

        record = await running.schedules.write(deployment_id, decide)
        assert record is not None
        return record

    # ------------------------------------------------------------------ Runs

    async def fire_due(self, deployment_id: str, due_at: datetime) -> Run | None:
        """Store the Run of one due time: the ticker's single code path (:mod:`runtime.firing`)."""
        running = await self._require_ready()
        record = await running.firing.fire_due(deployment_id, due_at)
        return None if record is None else record.to_run()

    async def fire_many(self, due_times: list[tuple[str, datetime]]) -> int:
        """Store the Runs of many due times at once: the ticker's path for a busy minute."""
        return await (await self._require_ready()).firing.fire_many(due_times)

    async def enqueue(self, request: EnqueueRequest, *, reason: str | None = None,
                      on_behalf_of: str | None = None) -> Run:
        """Run now or Replay: stored (PENDING) on return; the calendar does not move. ``reason``,
        ``on_behalf_of`` (not the seam's): why an operator asked, for whom (the audit trail)."""
        running = self._require_started()
        validation.check_enqueue(request, reason, on_behalf_of)
        deployment_id = request.deployment_id
        schedule = (await running.current_schedule(deployment_id)
                    if validation.usable_id(deployment_id) else None)
        if schedule is None or schedule.deleted:
            raise ScheduleNotFound(f"deployment {deployment_id!r} has no schedule")
        payload = schedule.payload
        if request.trigger == Trigger.REPLAY:
            assert request.replay_of is not None
            original = await self._find_run(request.replay_of)
            if original is None or original.deployment_id != deployment_id:
                raise RunNotFound(
                    f"run {request.replay_of!r} is not a run of deployment {deployment_id!r}"
                )
            payload = original.payload
        stored = await running.firing.store_requested(request, payload, reason=reason,
                                                      on_behalf_of=on_behalf_of)
        return stored.to_run()

    async def _find_run(self, run_id: str) -> RunRecord | None:
        return await self._require_started().reads.find(run_id)

    async def runs_page(
        self, deployment_id: str, *, limit: int = 50, before: str | None = None
    ) -> list[RunRecord]:
        """``list_runs`` with each Run's whole record (who asked, why): for the admin views."""
        running = self._require_started()
        validation.check_limit(limit)
        try:
            return await running.reads.page(deployment_id, limit, before)
        except KeyError:
            raise RunNotFound(
                f"run {before!r} is not a run of deployment {deployment_id!r}"
            ) from None

    async def list_runs(
        self, deployment_id: str, *, limit: int = 50, before: str | None = None
    ) -> list[Run]:
        """Newest first by created_at (ties: run_id descending); ``before`` pages."""
        page = await self.runs_page(deployment_id, limit=limit, before=before)
        return [record.to_run() for record in page]

    async def get_run(self, run_id: str) -> Run:
        """One Run by ID."""
        record = await self._find_run(run_id)
        if record is None:
            raise RunNotFound(f"run {run_id!r} does not exist")
        return record.to_run()

    # ------------------------------------------------------------------ helpers for tools

    async def wait_idle(self, timeout: float = 10.0) -> None:
        """Wait until this process holds no Run (tests and the demo use it)."""
        deadline = asyncio.get_running_loop().time() + timeout
        while self.dispatcher is not None and self.dispatcher.in_flight:
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError("runs still in flight")
            await asyncio.sleep(0.01)

    def next_due(self, deployment_id: str, after: datetime | None = None) -> datetime | None:
        record = self._table.get(deployment_id)
        if record is None or not record.active:
            return None
        return calendar.next_due(record.cron, record.timezone, after or self._now())
