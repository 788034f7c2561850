"""``NatsSchedulerProvider``: the AstraBox scheduler provider ``nats``.

This module is glue: it validates what AstraBox passes in, asks the functional cores
(:mod:`schedulecore`, :mod:`runcore`) what to write, has
:class:`~nats_scheduler.jetstream.store.Store`
append it conditionally, and answers reads from the projections. The pieces:

- :mod:`store` - connection, streams, conditional appends (uniqueness, single writer)
- :mod:`follower`, :mod:`ledger`, :mod:`schedule_table` - projections for reads and planning
- :mod:`ticker` - fires due times; :mod:`dispatcher` + :mod:`leases` - calls the handler
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import ClassVar

from .clock import Clock, SystemClock
from .core import calendar, runcore, schedulecore
from .core.events import (
    RunRecord,
    ScheduleEvent,
    ScheduleRecord,
    decode_run_event,
    decode_schedule_event,
    encode,
)
from .core.runcore import RetryPolicy
from .jetstream.connection import connect
from .jetstream.errors import Conflict
from .jetstream.follower import Follower
from .jetstream.leases import Leases
from .jetstream.runlog import RunLog
from .jetstream.store import Store
from .names import random_run_id, requested_run_id, scheduled_run_id, token
from .projections.ledger import Ledger
from .projections.schedule_table import ScheduleTable
from .runtime.dispatcher import Dispatcher
from .runtime.ticker import Ticker
from .seam import (
    SEAMS_API_VERSION,
    EnqueueRequest,
    InvalidSchedule,
    RepositoryBackend,
    Run,
    RunHandler,
    RunNotFound,
    Schedule,
    ScheduleCapacityExceeded,
    ScheduleNotFound,
    SchedulerConfigurationError,
    SchedulerProperties,
    SchedulerUnavailable,
    Trigger,
)
from .settings import NatsSettings

log = logging.getLogger(__name__)

PAUSE_VISIBILITY_SECONDS = 0.5
"""No scheduled Run stored later than this after ``apply(enabled=False)`` returned is started.

``fire_due`` reads the Schedule from the stream leader and sends the create only while that
read is younger than ``FIRE_READ_MAX_AGE``; a create that still reaches the store late (a
frozen process, a stalled connection) is refused by the dispatcher before its first claim.
The derivation is in docs/architecture.md ("Firing and pause visibility"); the tests are
tests/test_pause_visibility.py, the figures bench/pause_visibility.py."""

FIRE_READ_MAX_AGE = 0.2
"""Seconds a Schedule read may age before the Run create it allows is sent (else: read again).

Part of the pause-visibility bound: a create decided on a read older than this never leaves."""


class _StaleRead(Exception):
    """The Schedule read behind a firing aged past ``FIRE_READ_MAX_AGE`` before the create."""


MAX_EVENT_BYTES = 512 * 1024
"""Refuse Schedules whose events would not fit comfortably in the server's max payload."""

EVENT_HEADROOM_BYTES = 32 * 1024
"""What a Schedule's later events (hold with who and why) and its Runs' events (IDs, times,
holder, requested_by, reason, error) may add to the Schedule's own event. A Schedule is
refused unless its event plus this room fits the server's max payload, so every event it
leads to can be stored (tests/test_hostile_input.py)."""

MAX_NOTE_CHARS = 1000
"""Longest ``by``/``reason``/``requested_by`` text an operator action or enqueue may carry."""


def _identity() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def _utc(value: datetime, what: str) -> datetime:
    if value.tzinfo is None:
        raise ValueError(f"{what} must be a timezone-aware datetime")
    return value.astimezone(UTC)


def _text_problem(value: str, max_chars: int | None = None) -> str | None:
    """Why ``value`` cannot be stored as event text (lone surrogates, too long), or None."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid Unicode text"
    if max_chars is not None and len(value) > max_chars:
        return f"is longer than {max_chars} characters"
    return None


def _check_notes(**notes: str | None) -> None:
    """ValueError naming the first operator note (who, why) that cannot be stored."""
    for what, value in notes.items():
        problem = None if value is None else _text_problem(value, MAX_NOTE_CHARS)
        if problem is not None:
            raise ValueError(f"{what} {problem}")


def _check_id(value: str, what: str) -> str:
    try:
        token(value)
    except (ValueError, TypeError) as exc:
        raise InvalidSchedule(f"{what} is not usable: {exc}") from None
    return value


class NatsSchedulerProvider:
    """Scheduled Deployments with all state in NATS JetStream, event-sourced.

    ``settings`` default to the ``ASTRABOX_NATS_*`` environment, read at ``configure()``.
    ``clock`` is injectable so tests drive due times and retries without waiting.
    """

    name: ClassVar[str] = "nats"
    seams_api_version: ClassVar[int] = SEAMS_API_VERSION

    def __init__(self, settings: NatsSettings | None = None, *, clock: Clock | None = None) -> None:
        self._given_settings = settings
        self._settings: NatsSettings | None = None
        self._clock: Clock = clock or SystemClock()
        self._identity = ""
        self._store: Store | None = None
        self._embedded: object | None = None
        self._ledger = Ledger()
        self._table = ScheduleTable()
        self._runlog: RunLog | None = None
        self._dispatcher: Dispatcher | None = None
        self._ticker: Ticker | None = None
        self._followers: list[Follower] = []
        self._background: list[asyncio.Task[None]] = []
        self._started = False
        self._stopped = False
        self.stale_fires = 0
        """Firings whose Schedule read aged before the create and was done again."""

    # ------------------------------------------------------------------ properties

    @property
    def properties(self) -> SchedulerProperties:
        cap = (self._settings or self._given_settings or NatsSettings()).max_active_schedules
        return SchedulerProperties(
            recovery_scope="cluster",
            max_active_schedules=cap,
            pause_visibility_seconds=PAUSE_VISIBILITY_SECONDS,
        )

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
    def ticker(self) -> Ticker | None:
        return self._ticker

    @property
    def dispatcher(self) -> Dispatcher | None:
        return self._dispatcher

    @property
    def store(self) -> Store:
        if self._store is None:
            raise SchedulerUnavailable("the scheduler has not been started")
        return self._store

    # ------------------------------------------------------------------ lifecycle

    def configure(self, *, repository_backend: RepositoryBackend | None = None) -> None:
        """Read and check settings. No I/O. Any repository backend works beside NATS."""
        settings = self._given_settings or NatsSettings.from_env()
        self._settings = settings.validated()
        self._identity = self._settings.identity or _identity()

    async def start(self, handler: RunHandler) -> None:
        """Connect, prepare the store, load projections, resume leftovers, start firing."""
        if self._settings is None:
            self.configure()
        settings = self.settings
        if self._started:
            return
        url_settings = settings
        if settings.embedded and not settings.url:
            url_settings = await asyncio.to_thread(self._start_embedded)
        nc = await connect(url_settings, self._identity)
        store = Store(nc, url_settings)
        try:
            await store.check_server()
            await store.ensure()
            self._store = store
            self._runlog = RunLog(store, self._ledger)
            await self._start_projections(store)
        except BaseException:
            await store.close()
            self._store = None
            raise
        self._dispatcher = Dispatcher(
            runlog=self._runlog,
            ledger=self._ledger,
            leases=Leases(store.leases, self._clock, self._identity, settings.lease_seconds),
            handler=handler,
            clock=self._clock,
            policy=RetryPolicy(settings.retry_attempts, settings.retry_initial,
                               settings.retry_cap, settings.retry_total),
            call_timeout=settings.call_timeout,
            max_concurrent=settings.max_concurrent_dispatch,
            claim_grace=min(1.0, settings.lease_seconds),
            stored_after_pause=self._stored_after_pause,
        )
        self._ticker = Ticker(self._clock, self.fire_due)
        for record in self._table.all():
            self._ticker.update(record)
        self._table.subscribe(self._ticker.update)
        self._background = [
            asyncio.create_task(self._ticker.run(), name="ticker"),
            asyncio.create_task(
                self._dispatcher.sweep_forever(max(0.2, settings.lease_seconds / 5)),
                name="recovery sweep",
            ),
        ]
        self._started = True
        log.info("%s (identity %s)", self.describe(), self._identity)

    def _start_embedded(self) -> NatsSettings:
        from .natsserver.process import NatsServer

        server = NatsServer(store_dir=self.settings.store_dir)
        server.start()
        self._embedded = server
        return self.settings.with_(url=server.url)

    async def _start_projections(self, store: Store) -> None:
        names = store.names

        def on_schedule(seq: int, _subject: str, data: bytes) -> None:
            self._table.apply(seq, decode_schedule_event(data).schedule)

        def on_run(seq: int, _subject: str, data: bytes) -> None:
            self._ledger.apply(seq, decode_run_event(data).run)

        self._followers = [
            Follower(store.js, stream=names.schedules_stream,
                     filter_subject=names.schedules_filter, on_message=on_schedule),
            Follower(store.js, stream=names.runs_stream,
                     filter_subject=names.runs_filter, on_message=on_run),
        ]
        try:
            for follower in self._followers:
                await follower.start(timeout=max(30.0, self.settings.store_retry_seconds))
        except TimeoutError as exc:
            raise SchedulerUnavailable(
                "the scheduler store is unavailable: loading the Schedules and Runs timed out"
            ) from exc

    async def stop(self) -> None:
        """Stop firing, drain handler calls (bounded), release what is unfinished."""
        if self._stopped or not self._started:
            self._stopped = True
            await self._stop_embedded()
            return
        self._stopped = True
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        if self._ticker is not None:
            await self._ticker.wait_fires(timeout=5.0)
        if self._dispatcher is not None:
            await self._dispatcher.drain(self.settings.drain_seconds)
        for follower in self._followers:
            await follower.stop()
        if self._store is not None:
            await self._store.close()
        await self._stop_embedded()

    async def _stop_embedded(self) -> None:
        server, self._embedded = self._embedded, None
        if server is not None:
            await asyncio.to_thread(server.stop)  # type: ignore[attr-defined]

    def _require_started(self) -> tuple[Store, RunLog]:
        if not self._started or self._stopped or self._store is None or self._runlog is None:
            raise SchedulerUnavailable("the scheduler is not running")
        return self._store, self._runlog

    # ------------------------------------------------------------------ Schedules

    async def reconcile(self, schedules: Sequence[Schedule]) -> None:
        """Apply every Schedule given; delete every stored one not given."""
        self._require_started()
        wanted = {s.deployment_id: s for s in schedules}
        if len(wanted) != len(schedules):
            raise InvalidSchedule("reconcile was given the same deployment more than once")
        for schedule in schedules:
            self._validate(schedule)
        for schedule in schedules:
            await self.apply(schedule)
        for record in self._table.live():
            if record.deployment_id not in wanted:
                await self.delete(record.deployment_id)

    def _validate(self, schedule: Schedule) -> None:
        _check_id(schedule.deployment_id, f"deployment ID {schedule.deployment_id[:80]!r}")
        texts = {"name": schedule.name, "cron": schedule.cron, "timezone": schedule.timezone,
                 "target": schedule.payload.target, "prompt": schedule.payload.prompt}
        for what, value in texts.items():
            problem = _text_problem(value)
            if problem is not None:
                raise InvalidSchedule(
                    f"schedule of deployment {schedule.deployment_id!r} is invalid: "
                    f"its {what} {problem}"
                )
        try:
            calendar.validate(schedule.cron, schedule.timezone)
        except InvalidSchedule as exc:
            raise InvalidSchedule(
                f"schedule of deployment {schedule.deployment_id!r} is invalid: {exc}"
            ) from None

    async def apply(self, schedule: Schedule) -> None:
        """Create or replace a Schedule; durable (and visible to every replica) on return."""
        self._require_started()
        self._validate(schedule)
        now = self._clock.now()
        event = schedulecore.decide_apply(None, schedule, now=now, actor=self._identity)
        assert event is not None
        limit = self._max_event_bytes()
        if len(encode(event)) > limit:
            raise InvalidSchedule(
                f"schedule of deployment {schedule.deployment_id!r} is too large "
                f"(target and prompt must stay under {limit // 1024} KiB)"
            )

        def decide(current: ScheduleRecord | None) -> ScheduleEvent | None:
            decided = schedulecore.decide_apply(current, schedule, now=self._clock.now(),
                                                actor=self._identity)
            if decided is not None and schedule.enabled:
                self._check_capacity(schedule.deployment_id, current)
            return decided

        await self._write_schedule(schedule.deployment_id, decide)

    def _max_event_bytes(self) -> int:
        """The largest Schedule event whose later events all fit the server's max payload."""
        server_max = self.store.nc.max_payload or MAX_EVENT_BYTES
        return max(0, min(MAX_EVENT_BYTES, server_max - EVENT_HEADROOM_BYTES))

    def _check_capacity(self, deployment_id: str, current: ScheduleRecord | None) -> None:
        if current is not None and current.enabled and not current.deleted:
            return
        cap = self.settings.max_active_schedules
        if self._table.enabled_count(excluding=deployment_id) + 1 > cap:
            raise ScheduleCapacityExceeded(
                f"cannot enable deployment {deployment_id!r}: the scheduler supports at most "
                f"{cap} enabled schedules"
            )

    async def delete(self, deployment_id: str) -> None:
        """No further scheduled Runs; Runs already started continue; history stays."""
        self._require_started()
        try:
            token(deployment_id)
        except (ValueError, TypeError):
            return  # an ID we could never have stored: deleting it is a no-op
        await self._write_schedule(
            deployment_id,
            lambda current: schedulecore.decide_delete(current, now=self._clock.now(),
                                                       actor=self._identity),
        )

    async def hold(self, deployment_id: str, *, by: str, reason: str) -> ScheduleRecord:
        """Operator hold (DESIGN.md point 7): stops firing until released; survives apply."""
        return await self._operator_change(deployment_id, by, reason, schedulecore.decide_hold)

    async def release(self, deployment_id: str, *, by: str, reason: str) -> ScheduleRecord:
        """Lift an operator hold."""
        return await self._operator_change(deployment_id, by, reason, schedulecore.decide_release)

    async def _operator_change(self, deployment_id, by, reason, decide_fn) -> ScheduleRecord:  # type: ignore[no-untyped-def]
        self._require_started()
        if not by or not by.strip():
            raise ValueError("an operator action needs the name of who asks for it")
        if not reason or not reason.strip():
            raise ValueError("an operator hold or release needs a reason")
        _check_notes(by=by, reason=reason)

        def decide(current: ScheduleRecord | None) -> ScheduleEvent | None:
            if current is None or current.deleted:
                raise ScheduleNotFound(f"deployment {deployment_id!r} has no schedule")
            return decide_fn(current, by=by, reason=reason, now=self._clock.now(),
                             actor=self._identity)

        await self._write_schedule(deployment_id, decide)
        record = self._table.get(deployment_id)
        assert record is not None
        return record

    async def _write_schedule(self, deployment_id: str, decide) -> None:  # type: ignore[no-untyped-def]
        """Decide on the stored state and append conditionally; on a race, decide again."""
        store, _ = self._require_started()
        subject = store.names.schedule_subject(deployment_id)
        for _ in range(50):
            last = await store.last(subject)
            seq, current = (0, None)
            if last is not None:
                seq, current = last.seq, decode_schedule_event(last.data).schedule
                self._table.apply(seq, current)
            event = decide(current)
            if event is None:
                return
            msg_id = f"{token(deployment_id)}:{seq}:{uuid.uuid4().hex[:12]}"
            try:
                new_seq, _ = await store.append(subject, encode(event), expected_seq=seq,
                                                msg_id=msg_id)
            except Conflict:
                continue
            self._table.apply(new_seq, event.schedule)
            return
        raise SchedulerUnavailable(
            f"could not change the schedule of deployment {deployment_id!r}: "
            "too many concurrent changes"
        )

    async def _read_schedule(self, deployment_id: str) -> ScheduleRecord | None:
        store, _ = self._require_started()
        last = await store.last(store.names.schedule_subject(deployment_id))
        if last is None:
            return None
        record = decode_schedule_event(last.data).schedule
        self._table.apply(last.seq, record)
        return record

    # ------------------------------------------------------------------ Runs

    async def fire_due(self, deployment_id: str, due_at: datetime) -> Run | None:
        """Store the Run of one due time (the ticker's single code path).

        Returns the Run (also when another process stored it first), None when the Schedule
        is unknown, deleted, disabled or held; InvalidSchedule when ``due_at`` is not one of
        its due times. The Schedule is read from the stream leader right before the Run is
        stored, and the create is sent only while that read is younger than
        ``FIRE_READ_MAX_AGE``; an older read (a stalled loop or connection) is done again.
        That bounds pause visibility (docs/architecture.md, "Firing and pause visibility").
        """
        _, runlog = self._require_started()
        due = _utc(due_at, "due_at")
        try:
            token(deployment_id)
        except (ValueError, TypeError):
            return None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.store_retry_seconds
        delay = 0.05
        while True:
            read_at = self._clock.now()
            record = await self._read_schedule(deployment_id)
            if record is None or not record.active:
                return None
            if not calendar.is_due_time(record.cron, record.timezone, due):
                raise InvalidSchedule(
                    f"{due.isoformat()} is not a due time of deployment {deployment_id!r}"
                )
            # Past the deadline a busy process still fires (liveness): the create may then
            # leave on an older read, and the dispatcher checks such a Run against the
            # Schedule as it stood when the Run was stored (``_stored_after_pause``).
            fresh_only = loop.time() < deadline
            try:
                return await self._create_scheduled(runlog, record, due, read_at,
                                                     fresh_only=fresh_only)
            except _StaleRead:
                self.stale_fires += 1
                log.info("schedule read for %s aged before the create; reading again",
                         deployment_id)
            except SchedulerUnavailable:
                if loop.time() + delay > deadline:
                    raise
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)

    async def _create_scheduled(
        self, runlog: RunLog, record: ScheduleRecord, due: datetime, read_at: datetime,
        *, fresh_only: bool = True,
    ) -> Run:
        """Send the create of a scheduled Run once, if the Schedule read is still fresh.

        With ``fresh_only=False`` (the firing's retry time is used up) it is sent anyway and
        the Run is left for the dispatcher's pause check.

        Not while disconnected either: the client would buffer the create and send it after
        reconnecting, maybe long after a pause it could not see.
        """
        now = self._clock.now()
        if fresh_only and (now - read_at).total_seconds() > FIRE_READ_MAX_AGE:
            raise _StaleRead()
        if not self.store.nc.is_connected:
            raise SchedulerUnavailable("the scheduler store is unavailable: not connected")
        deployment_id = record.deployment_id
        run_id = scheduled_run_id(deployment_id, due)
        event = runcore.create(
            run_id=run_id, deployment_id=deployment_id, trigger=Trigger.SCHEDULE, due_at=due,
            payload=record.payload, now=now, actor=self._identity,
        )
        # DESIGN.md point 2: the create carries deployment + due time as its Msg-Id, and
        # is conditional on the Run's subject being empty. It is sent once (no store-level
        # retry): a retry re-reads the Schedule first, so no create leaves on a stale read.
        msg_id = f"{token(deployment_id)}@{due.strftime('%Y-%m-%dT%H:%MZ')}"
        _, stored, created = await runlog.create(event, msg_id=msg_id, retry_seconds=0)
        if created:
            # Acknowledged within the bound of the read: stored within it too, so the
            # dispatcher need not check it against a pause (see _stored_after_pause).
            age = (self._clock.now() - read_at).total_seconds()
            self._submit(stored, vetted=age <= PAUSE_VISIBILITY_SECONDS)
        return stored.to_run()

    async def _stored_after_pause(self, record: RunRecord) -> bool:
        """Whether a scheduled Run reached the store only after its Schedule stopped firing.

        Decided on the server's timestamps: the Run's first event against the Schedule as it
        stood at that instant. Runs stored within ``FIRE_READ_MAX_AGE`` of being decided
        (all of them, unless their replica froze or its connection stalled mid-send) need
        only one read.
        """
        store = self.store
        first = await store.next(store.names.run_subject(record.deployment_id, record.run_id))
        if first is None or first.stored_at is None:
            return False
        if (first.stored_at - record.created_at).total_seconds() <= FIRE_READ_MAX_AGE:
            return False
        schedule = await self._schedule_at(record.deployment_id, first.stored_at)
        return schedule is not None and not schedule.active

    async def _schedule_at(self, deployment_id: str, instant: datetime) -> ScheduleRecord | None:
        """The Schedule as its last event stored at or before ``instant`` left it.

        One read when nothing changed since (the usual case); otherwise a walk over the
        Schedule's own events, which are few (one per change, never one per firing).
        """
        store = self.store
        subject = store.names.schedule_subject(deployment_id)
        last = await store.last(subject)
        if last is None or (last.stored_at is not None and last.stored_at <= instant):
            return None if last is None else decode_schedule_event(last.data).schedule
        state: ScheduleRecord | None = None
        seq = 1
        while (msg := await store.next(subject, seq)) is not None:
            if msg.stored_at is not None and msg.stored_at > instant:
                break
            state = decode_schedule_event(msg.data).schedule
            seq = msg.seq + 1
        return state

    def _submit(self, record: RunRecord, *, vetted: bool = False) -> None:
        if self._dispatcher is not None and not record.finished:
            self._dispatcher.submit(record.run_id, vetted=vetted)

    async def enqueue(self, request: EnqueueRequest, *, reason: str | None = None) -> Run:
        """Run now or Replay: stored (PENDING) on return; the calendar does not move.

        ``reason`` (not part of the seam) records why an operator asked, for the audit trail.
        """
        _, runlog = self._require_started()
        if request.trigger not in (Trigger.RUN_NOW, Trigger.REPLAY):
            raise ValueError("enqueue takes run_now or replay")
        _check_notes(requested_by=request.requested_by, reason=reason)
        schedule = await self._read_schedule(request.deployment_id) if self._token_ok(
            request.deployment_id) else None
        if schedule is None or schedule.deleted:
            raise ScheduleNotFound(f"deployment {request.deployment_id!r} has no schedule")
        payload = schedule.payload
        if request.trigger == Trigger.REPLAY:
            assert request.replay_of is not None
            original = await self._find_run(request.replay_of)
            if original is None or original.deployment_id != request.deployment_id:
                raise RunNotFound(
                    f"run {request.replay_of!r} is not a run of deployment "
                    f"{request.deployment_id!r}"
                )
            payload = original.payload
        if request.request_id is not None:
            run_id = requested_run_id(request.deployment_id, request.request_id)
            msg_id = f"req:{run_id}"
        else:
            run_id = random_run_id()
            msg_id = f"{run_id}:0"
        event = runcore.create(
            run_id=run_id, deployment_id=request.deployment_id, trigger=request.trigger,
            due_at=None, payload=payload, now=self._clock.now(), actor=self._identity,
            replay_of=request.replay_of, requested_by=request.requested_by, reason=reason,
        )
        _, stored, created = await runlog.create(event, msg_id=msg_id)
        if created:
            self._submit(stored)
        return stored.to_run()

    @staticmethod
    def _token_ok(value: str) -> bool:
        try:
            token(value)
        except (ValueError, TypeError):
            return False
        return True

    async def _find_run(self, run_id: str) -> RunRecord | None:
        _, runlog = self._require_started()
        known = self._ledger.get(run_id)
        if known is not None:
            return known
        if not self._token_ok(run_id):
            return None
        found = await runlog.find(run_id)
        return found[1] if found else None

    async def list_runs(
        self, deployment_id: str, *, limit: int = 50, before: str | None = None
    ) -> list[Run]:
        """Newest first by created_at (ties: run_id descending); ``before`` pages."""
        self._require_started()
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 1000:
            raise ValueError("limit must be between 1 and 1000")
        try:
            page = self._ledger.page(deployment_id, limit, before)
        except KeyError:
            raise RunNotFound(
                f"run {before!r} is not a run of deployment {deployment_id!r}"
            ) from None
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
        while self._dispatcher is not None and self._dispatcher.in_flight:
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError("runs still in flight")
            await asyncio.sleep(0.01)

    def next_due(self, deployment_id: str, after: datetime | None = None) -> datetime | None:
        record = self._table.get(deployment_id)
        if record is None or not record.active:
            return None
        return calendar.next_due(record.cron, record.timezone, after or self._clock.now())
