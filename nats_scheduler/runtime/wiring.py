"""The parts of one provider process between ``start`` and ``stop``, and their order.

:class:`Runtime` connects the store, loads the projections, then starts the loops that
depend on them (the ticker fires through the firing protocol; the dispatcher and its
recovery sweep call the handler), and stops them in the reverse order: firing first, then a
bounded drain of handler calls, then the projections and the connection. The provider
(:mod:`nats_scheduler.provider`) owns one while it runs and answers the seam's calls with
its logs and projections.
"""

from __future__ import annotations

import asyncio

from ..clock import Clock
from ..core.events import RunRecord, decode_run_event, decode_schedule_event
from ..core.runcore import RetryPolicy
from ..jetstream.connection import connect
from ..jetstream.follower import Follower
from ..jetstream.leases import Leases
from ..jetstream.runlog import RunLog
from ..jetstream.schedulelog import ScheduleLog
from ..jetstream.store import Store
from ..projections.ledger import Ledger
from ..projections.schedule_table import ScheduleTable
from ..seam import RunHandler, SchedulerUnavailable
from ..settings import NatsSettings
from .dispatcher import Dispatcher
from .firing import Firing
from .ticker import Fire, Ticker


class Runtime:
    """The store, the logs, the projections' followers and the loops of one process."""

    def __init__(
        self, store: Store, *, ledger: Ledger, table: ScheduleTable, clock: Clock, identity: str
    ) -> None:
        self.store = store
        self.ledger = ledger
        self.table = table
        self.schedules = ScheduleLog(store, table)
        self.runs = RunLog(store, ledger)
        self._clock = clock
        self._identity = identity
        self.firing = Firing(store=store, schedules=self.schedules, runs=self.runs, clock=clock,
                             identity=identity, submit=self._submit)
        self.dispatcher: Dispatcher | None = None
        self.ticker: Ticker | None = None
        self.followers: list[Follower] = []
        self._background: list[asyncio.Task[None]] = []

    @classmethod
    async def connect(
        cls, settings: NatsSettings, *, ledger: Ledger, table: ScheduleTable, clock: Clock,
        identity: str,
    ) -> Runtime:
        """Connect and prepare the store (streams, lease bucket) and load the projections."""
        store = Store(await connect(settings, identity), settings)
        runtime = cls(store, ledger=ledger, table=table, clock=clock, identity=identity)
        try:
            await store.check_server()
            await store.ensure()
            await runtime._load_projections(settings)
        except BaseException:
            await store.close()
            raise
        return runtime

    async def _load_projections(self, settings: NatsSettings) -> None:
        names = self.store.names

        def on_schedule(seq: int, _subject: str, data: bytes) -> None:
            self.table.apply(seq, decode_schedule_event(data).schedule)

        def on_run(seq: int, subject: str, data: bytes) -> None:
            self.ledger.apply_event(seq, decode_run_event(data), names.run_ids_of_subject(subject))

        self.followers = [
            Follower(self.store, stream=names.schedules_stream,
                     filter_subject=names.schedules_filter, on_message=on_schedule),
            Follower(self.store, stream=names.runs_stream,
                     filter_subject=names.runs_filter, on_message=on_run),
        ]
        try:
            for follower in self.followers:
                await follower.start(timeout=max(30.0, settings.store_retry_seconds))
        except TimeoutError as exc:
            raise SchedulerUnavailable(
                "the scheduler store is unavailable: loading the Schedules and Runs timed out"
            ) from exc

    def start_loops(self, handler: RunHandler, settings: NatsSettings, fire: Fire) -> None:
        """Start the dispatcher's recovery sweep and the ticker, which fires through ``fire``.

        ``fire`` is the provider's ``fire_due``: one code path for every due time, whether the
        ticker or a test fires it.
        """
        dispatcher = Dispatcher(
            runlog=self.runs,
            ledger=self.ledger,
            leases=Leases(self.store, self._clock, self._identity, settings.lease_seconds),
            handler=handler,
            clock=self._clock,
            policy=RetryPolicy(settings.retry_attempts, settings.retry_initial,
                               settings.retry_cap, settings.retry_total),
            call_timeout=settings.call_timeout,
            max_concurrent=settings.max_concurrent_dispatch,
            claim_grace=min(1.0, settings.lease_seconds),
            gate=self.firing,
        )
        ticker = Ticker(self._clock, fire)
        for record in self.table.all():
            ticker.update(record)
        self.table.subscribe(ticker.update)
        self.dispatcher, self.ticker = dispatcher, ticker
        self._background = [
            asyncio.create_task(ticker.run(), name="ticker"),
            asyncio.create_task(
                dispatcher.sweep_forever(max(0.2, settings.lease_seconds / 5)),
                name="recovery sweep",
            ),
        ]

    def submit(self, record: RunRecord) -> None:
        """Dispatch a Run this process just stored (Run now, Replay)."""
        self._submit(record, False)

    def _submit(self, record: RunRecord, vetted: bool) -> None:
        if self.dispatcher is not None and not record.finished:
            self.dispatcher.submit(record.run_id, vetted=vetted)

    async def stop(self, drain_seconds: float) -> None:
        """Stop firing, drain handler calls (bounded), close the projections and store."""
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        if self.ticker is not None:
            await self.ticker.wait_fires(timeout=5.0)
        if self.dispatcher is not None:
            await self.dispatcher.drain(drain_seconds)
        for follower in self.followers:
            await follower.stop()
        await self.store.close()
