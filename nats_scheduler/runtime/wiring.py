"""The parts of one provider process between ``start`` and ``stop``, and their order.

:class:`Runtime` connects the store, loads the projections, then starts the loops that
depend on them (the ticker fires through the firing protocol; the dispatcher and its
recovery sweep call the handler; the retention loop trims the history), then the operators'
admin service (:mod:`nats_scheduler.admin.service`, which the provider hands it), and stops
them in the reverse order: the admin service first (no operator action lands in a process
going away), then firing, then a bounded drain of handler calls, then the projections and
the connection. The provider (:mod:`nats_scheduler.provider`) owns one while it runs and
answers the seam's calls with its logs, reads and projections. Its
:class:`~.metrics.Metrics` are fed by every part.

Start-up reads never depend on the history's length (docs/architecture.md, "History and
retention"): the Schedules (one event per Schedule), the open Runs (one key per unfinished
Run), each deployment's newest Run, and from then on the new Run events only.

Only the open Runs are read before ``start`` returns (the recovery sweep resumes them at
once). The Schedule table loads in the background behind a readiness gate
(:meth:`Runtime.until_ready`; docs/architecture.md, "Start-up and readiness"): Schedule
changes wait for the table only (:meth:`Runtime.until_table_loaded`), firing and the admin
service for the whole start-up; the ticker plans every Schedule from the
instant this process started (so a due time that passed while it loaded fires, once), and
the replica joins the live ones only then, so the others own every due time meanwhile.
Each deployment's newest Run loads after that, for the views.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Protocol

from opentelemetry.metrics import MeterProvider

from ..clock import Clock, ServerClock
from ..core.events import ScheduleRecord
from ..core.runcore import RetryPolicy
from ..core.serving import Serving
from ..jetstream.outages import OutageLog
from ..jetstream.ports import JetStreamPorts, open_store
from ..jetstream.store import Store
from ..names import scheduled_run_id
from ..ports import StorePorts
from ..ports.feeds import Feed
from ..ports.replicas import Members
from ..projections.ledger import Ledger
from ..projections.reads import RunReads, load_ledger
from ..projections.schedule_table import ScheduleTable
from ..seam import RunHandler
from ..settings import NatsSettings
from ..tasks import cancel_and_wait
from .auto_hold import AutoHold
from .checkpointing import Checkpointing
from .dispatcher import Dispatcher
from .due_watch import DueWatch
from .firing import Firing
from .freshness import Freshness
from .gate import PauseGate
from .hold_ends import HoldEnds
from .membership import Membership
from .metrics import Metrics
from .outage_watch import OutageWatch
from .readiness import Readiness, subscribe_patiently, until_caught_up
from .refusals import Refusals
from .retention import Retention
from .ticker import Dues, FireObserver, Ticker
from .warm_up import warm_up

log = logging.getLogger(__name__)

ADMIN_STOP_SECONDS = 2.0
"""How long ``stop`` waits for the admin service to unsubscribe before going on."""

PLAN_CHUNK = 5_000
"""Schedules planned per event-loop turn when the table is ready (100,000 take about a
second of CPU: in chunks, the loop keeps answering meanwhile)."""

LOOPS_STOP_SECONDS = 5.0
"""How long ``stop`` waits for the ticker, sweep, retention and warm-up loops to end."""


PortsFactory = Callable[[Ledger, ScheduleTable, Clock, str], Awaitable[StorePorts]]
"""Builds the ports of one process: ``(ledger, table, clock, identity) -> ports``."""


class Service(Protocol):
    """A service the runtime runs beside its loops (the admin service)."""

    serving: Serving
    """After ``start``: whether it serves, or why not (the server refused it, say)."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class Runtime:
    """The store, the logs, the reads, the projections' followers and the loops of one process."""

    def __init__(
        self, ports: StorePorts, settings: NatsSettings, *, ledger: Ledger,
        table: ScheduleTable, clock: Clock, identity: str, handler: RunHandler,
        metrics: Metrics | None = None, fire_observer: FireObserver | None = None,
        outages: OutageWatch | None = None,
    ) -> None:
        clock = ServerClock.wrap(clock)  # fire by the store's clock (docs/architecture.md)
        self.ports = ports
        self.metrics = metrics or Metrics.disabled()
        self.ledger = ledger
        self.table = table
        self.settings = settings
        self.claim_grace = min(1.0, settings.lease_seconds)
        self.history = ports.history
        self.leases = ports.leases
        self.schedules = ports.schedules
        self.runs = ports.runs
        self.reads = RunReads(self.history, self.runs, ledger, clock)
        self._clock = clock
        self._identity = identity
        self.freshness = Freshness(self.schedules, self._schedules_position, clock)
        self.membership = Membership(ports.replicas, identity, clock, self.metrics,
                                     serving=self.serving)
        self._no_admin = Serving.STARTING  # why no admin service runs here, while none does
        self.outages = outages
        """The outage this start ends, recorded once the replica joined (at most one write);
        None where the store records no outages (the in-memory store of the simulation)."""
        # One Run's path, in order: the ticker plans and fires its due time, the firing
        # stores it (fresh read, announce, create) and hands it to the dispatcher, which
        # asks the pause gate once and calls the handler.
        self.gate = PauseGate(runs=self.runs, schedules=self.schedules)
        self.dispatcher = Dispatcher(
            runlog=self.runs, ledger=ledger, leases=self.leases, handler=handler, clock=clock,
            policy=RetryPolicy(settings.retry_attempts, settings.retry_initial,
                               settings.retry_cap, settings.retry_total),
            call_timeout=settings.call_timeout, max_concurrent=settings.max_concurrent_dispatch,
            claim_grace=self.claim_grace, gate=self.gate,
            metrics=self.metrics)
        self.firing = Firing(store=ports, schedules=self.schedules, runs=self.runs, clock=clock,
                             identity=identity, dispatcher=self.dispatcher, leases=self.leases,
                             table=table, freshness=self.freshness, metrics=self.metrics)
        self.ticker = Ticker(clock, self.firing.fire_due, fire_many=self.firing.fire_many,
                             owns=self.membership.owns_due, exists=self._exists,
                             observer=fire_observer)  # planned once ready
        self.admin: Service | None = None
        self.followers: list[Feed] = []
        self._background: list[asyncio.Task[None]] = []
        self.retention = Retention(self.history, table, ledger, clock,
                                   interval=settings.retention_interval,
                                   owns=self.membership.owns)
        self.checkpointing = Checkpointing(
            ports.checkpoints, table, position=self._schedules_position,
            ready=lambda: self.ready, owns=self.membership.owns, clock=clock,
            identity=identity)
        self.refusals = Refusals(table, self.metrics, identity)
        """The Schedules this process's reconciles refused (``replica.status``, explain)."""
        self.due_watch = DueWatch(table, ledger, self.history, clock, self.metrics,
                                  owns=self.membership.owns_due)
        """The due times that passed without a Run, counted once a minute (metrics)."""
        self.hold_ends = HoldEnds(self.schedules, clock, identity,
                                  owns=self.membership.owns_due, metrics=self.metrics)
        self.auto_hold = (AutoHold(settings.auto_hold_after_failures, self.schedules, clock,
                                   identity, metrics=self.metrics)
                          if settings.auto_hold_after_failures else None)
        self.began = clock.now()
        """When this process started, by the store's clock once it is known (the ticker's
        first due times count from here)."""
        self._began_mark: float | None = None
        self._gates = Readiness(self._schedules_position)
        self.warmed = asyncio.Event()
        """Set once the warm-up after readiness (newest and recent Runs) has ended."""

    @classmethod
    async def connect(
        cls, settings: NatsSettings, *, ledger: Ledger, table: ScheduleTable, clock: Clock,
        identity: str, handler: RunHandler, meter_provider: MeterProvider | None = None,
        fire_observer: FireObserver | None = None, ports: PortsFactory | None = None,
    ) -> Runtime:
        """Open the store's ports (JetStream unless ``ports`` builds others: the in-memory
        store of the simulation) and load the projections.

        ``meter_provider``: where the metrics go; None is the global one (no-op unless the
        host installed an OpenTelemetry SDK).
        """
        clock = ServerClock.wrap(clock)
        began = clock.now()
        # read again once the store's clock is known (_become_ready): a host clock minutes
        # off would otherwise skip (ahead) or backfill (behind) that many minutes of due times
        began_mark = clock.mark() if isinstance(clock, ServerClock) else None
        metrics = Metrics(meter_provider)
        opened: StorePorts
        outages: OutageWatch | None = None
        if ports is not None:
            opened = await ports(ledger, table, clock, identity)
        else:
            watch: list[OutageWatch] = []

            async def note_last_writes(store: Store) -> None:
                """Before this process stores anything: the newest sign of life of another."""
                watch.append(OutageWatch(OutageLog(store), store.names, identity=identity,
                                         clock=clock, table=table, metrics=metrics))
                await watch[0].before_start()

            store = await open_store(settings, identity, count_error=metrics.store_error,
                                     count_foreign=metrics.foreign_message,
                                     before_ensure=note_last_writes)
            outages = watch[0]
            opened = JetStreamPorts(store, ledger=ledger, table=table, clock=clock,
                                    identity=identity, on_stale=metrics.stale_schedule_copy)
        try:
            runtime = cls(opened, settings, ledger=ledger, table=table, clock=clock,
                          identity=identity, handler=handler, metrics=metrics,
                          fire_observer=fire_observer, outages=outages)
            runtime.began = began
            runtime._began_mark = began_mark
            await runtime.load_projections()
        except BaseException:
            await opened.close()
            raise
        return runtime

    async def load_projections(self) -> None:
        """Schedules from their last events (in the background: :meth:`_become_ready`);
        Runs from the open keys, then new events only.

        The Run events' last sequence is read BEFORE the open keys: a Run created after that
        point is delivered by the follower, one created before it had its key opened before
        it was stored, so the key read finds it. Nothing falls between the two.
        """
        runs_from = await self.runs.end() + 1
        self.followers = [
            self.schedules.feed(self.table.apply, on_skip=self._skipped("schedules")),
            self.runs.feed(from_seq=runs_from, on_skip=self._skipped("runs")),
        ]
        await self.followers[1].subscribe()  # the Run feed: nothing to replay
        open_runs = await self.ports.retrying("could not read the open runs",
                                              self.leases.open_runs)
        # Keys of Runs not (yet) stored are left to their time to live, never closed here:
        # "expired" by this process's clock before it has an estimate of the store's (a
        # stepped host clock) closed the fresh key of a Run its creator was storing at that
        # moment, and another replica then took the Run from its live holder (seed 307).
        await load_ledger(self.ledger, self.history, open_runs, [])
        # The Schedule follower subscribes once the loops start (_become_ready): its replay
        # (one message per Schedule) goes on in the background, and neither the reads above
        # nor the rest of start() must queue behind a million of them.

    def _skipped(self, stream: str) -> Callable[[], None]:
        return lambda: self.metrics.event_skipped(stream)

    @property
    def ready(self) -> bool:
        """Whether the start-up has ended (the table loaded, joined, every Schedule planned)."""
        return self._gates.ready.is_set()

    async def until_ready(self) -> None:
        """Wait for the start-up to end (what firing and the admin service need); at once
        when it has (:mod:`.readiness`: SchedulerUnavailable when the load fails or stalls)."""
        await self._gates.until(self._gates.ready)

    async def until_table_loaded(self) -> None:
        """Wait for the Schedule table to hold every stored Schedule (what a Schedule change
        decides on), not for joining and planning (:mod:`.readiness`)."""
        await self._gates.until(self._gates.table_loaded)

    async def _become_ready(self, ticker: Ticker) -> None:
        """Wait for the Schedule table, join the live replicas, plan every Schedule from the
        instant this process started, open the gate; then load each deployment's newest Run
        and the last day's Runs (the views' summaries)."""
        try:
            end = await self.ports.retrying("could not read the schedules",
                                            self.schedules.end_once)
            after = await self.checkpointing.load(end)
            if after is not None:  # the table holds every event up to it: the rest only
                self.followers[0] = self.schedules.feed(
                    self.table.apply, after=after, on_skip=self._skipped("schedules"))
            follower = self.followers[0]
            await subscribe_patiently(follower)
            await until_caught_up(follower)
            await self.schedules.settled()  # Schedules whose last message was foreign
            self._gates.table_loaded.set()
            await self.membership.join()
            self._correct_began()
            if self.membership.presence is not None and self.outages is not None:
                self._background.append(asyncio.create_task(
                    self.outages.after_join(self._began_mark), name="outage record"))
            self.due_watch.start_at(self.began)
            records = self.table.all()
            self.table.subscribe(ticker.update)  # changes from now on plan themselves
            self.metrics.watch_schedules(records, self.table.subscribe_changes)
            self._watch_holds(records)
            dues: Dues = {}
            for start in range(0, len(records), PLAN_CHUNK):
                ticker.plan_loaded((self.table.get(r.deployment_id) or r
                                    for r in records[start:start + PLAN_CHUNK]), self.began,
                                   dues)
                await asyncio.sleep(0)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            self._gates.failed = exc
            log.exception("the schedules could not be loaded; this replica does not fire")
            raise
        self._gates.ready.set()
        log.info("schedules loaded: %d (%d planned)", len(records), ticker.planned)
        await self._warm_up()

    def _watch_holds(self, records: list[ScheduleRecord]) -> None:
        """Holds that end (their releases) and, when on, holds after repeated failures."""
        for record in records:
            self.hold_ends.update(record)
        self.table.subscribe(self.hold_ends.update)
        if self.auto_hold is not None:
            self.table.subscribe(self.auto_hold.schedule_changed)
            self.ledger.subscribe(self.auto_hold.run_changed)

    def _correct_began(self) -> None:
        """``began`` on the store's clock: the first sample came with joining the replicas."""
        clock, mark = self._clock, self._began_mark
        if isinstance(clock, ServerClock) and mark is not None and clock.estimate() is not None:
            self.began = clock.at(mark)

    @property
    def clock(self) -> Clock:
        """The clock this process decides by: the store's, as this replica measures it
        (``ServerClock``), when the injected clock follows the host's wall clock."""
        return self._clock

    def server_offset(self) -> tuple[float, float] | None:
        """This host's clock minus the store's and its error bound (seconds); None unknown."""
        return self.membership.server_offset()

    def live_replicas(self) -> int:
        """How many replicas this one counts live, itself included (1 when alone)."""
        return self.membership.live_replicas()

    @property
    def presence(self) -> Members | None:
        """The replicas bucket as this replica watches it (None until it joined, or alone)."""
        return self.membership.presence

    def _exists(self, deployment_id: str, due: datetime) -> bool:
        return self.ledger.get(scheduled_run_id(deployment_id, due)) is not None

    def start_loops(self) -> None:
        """Start the dispatcher's recovery sweep, the ticker (planned once the Schedule table
        is ready), the retention loop, the releases of holds that end (fed once ready) and
        the warm-up of the last day's Runs."""
        interval = max(0.2, self.settings.lease_seconds / 5)
        self._background = [
            asyncio.create_task(self.ticker.run(), name="ticker"),
            asyncio.create_task(self.dispatcher.sweep_forever(interval), name="recovery sweep"),
            asyncio.create_task(self._become_ready(self.ticker),
                                name="schedule load and warm-up"),
            asyncio.create_task(self.retention.forever(), name="retention"),
            asyncio.create_task(self.checkpointing.forever(), name="checkpoints"),
            asyncio.create_task(self.hold_ends.run(), name="hold ends"),
        ]
        if isinstance(self._clock, ServerClock):  # counted by the store's clock only
            self._background.append(asyncio.create_task(self.due_watch.forever(),
                                                        name="due times counted"))

    async def _warm_up(self) -> None:
        """Load the Runs stored before this start into the views (:mod:`.warm_up`)."""
        await warm_up(self.ledger, self.history, self.table, self._clock)
        self.warmed.set()

    async def current_schedule(self, deployment_id: str) -> ScheduleRecord | None:
        """The Schedule as stored when this call began, every change before it included.

        From the Schedule table when a confirmation started after this call proves it
        current (:mod:`.freshness`; concurrent callers share one), else from the leader."""
        proven = await self.freshness.confirm(since=asyncio.get_running_loop().time())
        if proven is not None:
            return self.table.get(deployment_id)
        return await self.schedules.read(deployment_id)

    def _schedules_position(self) -> int:
        """The Schedule stream sequence the Schedule table has applied up to."""
        return self.followers[0].applied_seq if self.followers else 0

    async def serve(self, service: Service) -> None:
        """Run ``service`` as this process's admin service, replacing the one running.

        One per process: a second one would answer ``replica.status`` twice and count this
        process as two replicas. The one replaced is stopped before the new one starts.
        """
        previous, self.admin = self.admin, None
        if previous is not None:
            self._no_admin = Serving.STOPPED
            await previous.stop()
        self._no_admin = Serving.FAILED  # unless it starts
        try:
            await service.start()
            self.admin = service
        finally:  # its key says so now, not a beat later (a replacement said "stopped")
            await self.membership.announce()

    def not_serving(self, why: Serving) -> None:
        """Say in this replica's key why it runs no admin service (``status`` shows it)."""
        self._no_admin = why

    def serving(self) -> Serving:
        """Whether this replica serves the admin service now, or why not (its key says it)."""
        return self.admin.serving if self.admin is not None else self._no_admin

    async def stop(self, drain_seconds: float) -> None:
        """Stop the admin service, stop firing, drain handler calls (bounded), close the rest."""
        admin, self.admin = self.admin, None
        self._no_admin = Serving.STOPPED
        if admin is not None:
            # Unsubscribing waits for the server; with the server gone it would hold the
            # whole stop, and closing the connection below ends the subscriptions anyway.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(admin.stop(), ADMIN_STOP_SECONDS)
        await self.membership.leave()  # first: the others own our due times at once
        stuck = await cancel_and_wait(self._background, timeout=LOOPS_STOP_SECONDS)
        if stuck:
            log.warning("%d background task(s) did not stop: %s", len(stuck),
                        ", ".join(sorted(task.get_name() for task in stuck)))
        await self.ticker.wait_fires(timeout=5.0)
        await self.dispatcher.drain(drain_seconds)
        for follower in self.followers:
            await follower.stop()
        self.metrics.stop()
        await self.ports.close()
