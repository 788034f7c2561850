"""An in-memory reference provider: the contract suite's honest second binding.

Not a product. It exists so the provider-neutral contract suite can be run against
something other than the NATS provider, which proves the suite encodes the seam and not
one engine's behaviour. Everything lives in dicts of one process, on one asyncio loop:

* uniqueness of scheduled Runs: a dict keyed by ``(deployment_id, due_at)``;
* dispatch: one task per Run, bounded exponential backoff with jitter, per-call timeout;
* firing: a ticker on the real clock, plus :meth:`fire_window` for the suite, both going
  through :meth:`_fire_due`;
* due times and validation: :mod:`nats_scheduler.core.calendar`.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Awaitable, Sequence
from datetime import UTC, datetime
from typing import ClassVar

import msgspec

from nats_scheduler.core import calendar
from nats_scheduler.seam import (
    SEAMS_API_VERSION,
    EnqueueRequest,
    InvalidSchedule,
    RepositoryBackend,
    Run,
    RunHandler,
    RunInvocation,
    RunNotFound,
    RunPayload,
    RunPermanentError,
    RunState,
    Schedule,
    ScheduleCapacityExceeded,
    ScheduleNotFound,
    SchedulerProperties,
    SchedulerUnavailable,
    Trigger,
)


def _now() -> datetime:
    return datetime.now(UTC)


class InMemorySchedulerProvider:
    """A single-process provider keeping Schedules and Runs in memory."""

    name: ClassVar[str] = "inmemory"
    seams_api_version: ClassVar[int] = SEAMS_API_VERSION

    def __init__(
        self,
        *,
        max_attempts: int = 5,
        backoff_initial: float = 0.5,
        backoff_cap: float = 30.0,
        call_timeout: float = 30.0,
        drain_seconds: float = 10.0,
        tick_seconds: float = 1.0,
        max_active_schedules: int | None = None,
    ) -> None:
        self._max_attempts = max_attempts
        self._backoff_initial = backoff_initial
        self._backoff_cap = backoff_cap
        self._call_timeout = call_timeout
        self._drain_seconds = drain_seconds
        self._tick_seconds = tick_seconds
        self._max_active = max_active_schedules
        self._schedules: dict[str, Schedule] = {}
        self._runs: dict[str, Run] = {}
        self._by_due: dict[tuple[str, datetime], str] = {}
        self._by_request: dict[tuple[str, str], str] = {}
        self._ids = itertools.count(1)
        self._handler: RunHandler | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._ticker: asyncio.Task[None] | None = None
        self._stopping = False

    # ------------------------------------------------------------------ lifecycle

    @property
    def properties(self) -> SchedulerProperties:
        return SchedulerProperties(
            recovery_scope="executor",
            max_active_schedules=self._max_active,
            pause_visibility_seconds=0.0,
        )

    def configure(self, *, repository_backend: RepositoryBackend) -> None:
        """Needs nothing from the repository: every backend will do."""

    async def start(self, handler: RunHandler) -> None:
        self._handler = handler
        self._stopping = False
        self._ticker = asyncio.create_task(self._tick())

    async def stop(self) -> None:
        self._stopping = True
        if self._ticker is not None:
            self._ticker.cancel()
            self._ticker = None
        if self._tasks:
            _, late = await asyncio.wait(set(self._tasks), timeout=self._drain_seconds)
            for task in late:
                task.cancel()
            if late:
                await asyncio.wait(late, timeout=self._drain_seconds)

    # ------------------------------------------------------------------ schedules

    async def reconcile(self, schedules: Sequence[Schedule]) -> None:
        wanted = {s.deployment_id for s in schedules}
        for deployment_id in set(self._schedules) - wanted:
            await self.delete(deployment_id)
        for schedule in schedules:
            await self.apply(schedule)

    async def apply(self, schedule: Schedule) -> None:
        dep = schedule.deployment_id
        try:
            calendar.validate(schedule.cron, schedule.timezone)
        except InvalidSchedule as exc:
            raise InvalidSchedule(f"Schedule of deployment {dep!r}: {exc}") from exc
        current = self._schedules.get(dep)
        if current is not None and schedule.version and schedule.version <= current.version:
            return  # stale or equal version: ignored
        if schedule.enabled and not (current and current.enabled) and self._max_active:
            active = sum(1 for s in self._schedules.values() if s.enabled)
            if active >= self._max_active:
                raise ScheduleCapacityExceeded(
                    f"cannot enable the Schedule of deployment {dep!r}: "
                    f"{self._max_active} Schedules are already enabled"
                )
        self._schedules[dep] = schedule

    async def delete(self, deployment_id: str) -> None:
        self._schedules.pop(deployment_id, None)

    # ------------------------------------------------------------------ firing

    async def fire_window(self, deployment_id: str, start: datetime, end: datetime) -> None:
        """Fire every due time in ``(start, end)``: the ticker's own path, for the suite."""
        schedule = self._schedules.get(deployment_id)
        if schedule is None or not schedule.enabled:
            return
        for due_at in calendar.due_times(schedule.cron, schedule.timezone, start, end):
            self._fire_due(schedule, due_at)

    async def _tick(self) -> None:
        last = _now()
        while True:
            await asyncio.sleep(self._tick_seconds)
            now = _now()
            for deployment_id in list(self._schedules):
                await self.fire_window(deployment_id, last, now)
            last = now

    def _fire_due(self, schedule: Schedule, due_at: datetime) -> None:
        key = (schedule.deployment_id, due_at)
        if key not in self._by_due:  # the uniqueness constraint: one Run per due time
            run = self._new_run(key[0], Trigger.SCHEDULE, schedule.payload, due_at=due_at)
            self._by_due[key] = run.run_id

    # ------------------------------------------------------------------ enqueue

    async def enqueue(self, request: EnqueueRequest) -> Run:
        dep = request.deployment_id
        if self._stopping:
            raise SchedulerUnavailable(f"cannot store a Run for deployment {dep!r}: stopping")
        schedule = self._schedules.get(dep)
        if schedule is None:
            raise ScheduleNotFound(f"no Schedule for deployment {dep!r}")
        if request.request_id is not None and (dep, request.request_id) in self._by_request:
            return self._runs[self._by_request[(dep, request.request_id)]]
        payload = schedule.payload
        if request.trigger == Trigger.REPLAY:
            assert request.replay_of is not None
            original = self._runs.get(request.replay_of)
            if original is None or original.deployment_id != dep:
                raise RunNotFound(f"no Run {request.replay_of!r} in deployment {dep!r}")
            payload = original.payload
        run = self._new_run(
            dep,
            request.trigger,
            payload,
            replay_of=request.replay_of,
            requested_by=request.requested_by,
        )
        if request.request_id is not None:
            self._by_request[(dep, request.request_id)] = run.run_id
        return run

    def _new_run(
        self,
        deployment_id: str,
        trigger: Trigger,
        payload: RunPayload,
        *,
        due_at: datetime | None = None,
        replay_of: str | None = None,
        requested_by: str | None = None,
    ) -> Run:
        now = _now()
        run = Run(
            run_id=f"run-{next(self._ids):08d}",
            deployment_id=deployment_id,
            trigger=trigger,
            due_at=due_at,
            created_at=now,
            updated_at=now,
            state=RunState.PENDING,
            payload=payload,
            session_id=None,
            turn_id=None,
            attempts=0,
            error=None,
            replay_of=replay_of,
            requested_by=requested_by,
        )
        self._runs[run.run_id] = run
        task = asyncio.create_task(self._dispatch(run.run_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return run

    # ------------------------------------------------------------------ reads

    async def list_runs(
        self, deployment_id: str, *, limit: int = 50, before: str | None = None
    ) -> list[Run]:
        if not 1 <= limit <= 1000:
            raise ValueError(f"limit must be between 1 and 1000, got {limit}")
        runs = sorted(
            (r for r in self._runs.values() if r.deployment_id == deployment_id),
            key=lambda r: (r.created_at, r.run_id),
            reverse=True,
        )
        if before is not None:
            cursor = self._runs.get(before)
            if cursor is None or cursor.deployment_id != deployment_id:
                raise RunNotFound(f"no Run {before!r} in deployment {deployment_id!r}")
            key = (cursor.created_at, cursor.run_id)
            runs = [r for r in runs if (r.created_at, r.run_id) < key]
        return runs[:limit]

    async def get_run(self, run_id: str) -> Run:
        try:
            return self._runs[run_id]
        except KeyError:
            raise RunNotFound(f"no Run {run_id!r}") from None

    # ------------------------------------------------------------------ dispatch

    def _update(self, run_id: str, **changes: object) -> Run:
        run = msgspec.structs.replace(self._runs[run_id], updated_at=_now(), **changes)
        self._runs[run_id] = run
        return run

    async def _dispatch(self, run_id: str) -> None:
        try:
            while not self._stopping:
                run = self._runs[run_id]
                attempt = run.attempts + 1
                run = self._update(run_id, state=RunState.DISPATCHING, attempts=attempt)
                reason = await self._attempt(run)
                if reason is None:
                    return
                if attempt >= self._max_attempts:
                    self._update(
                        run_id,
                        state=RunState.FAILED,
                        error=f"gave up after {attempt} attempts: {reason}",
                    )
                    return
                self._update(run_id, state=RunState.PENDING, error=reason)
                delay = min(self._backoff_cap, self._backoff_initial * 2 ** (attempt - 1))
                await asyncio.sleep(delay * random.uniform(0.5, 1.0))
        except asyncio.CancelledError:
            # Stopped mid-call: leave the Run recoverable, not half-dispatched.
            if self._runs[run_id].state == RunState.DISPATCHING:
                self._update(run_id, state=RunState.PENDING)
            raise

    async def _attempt(self, run: Run) -> str | None:
        """One dispatch attempt: None once the Run is finished, else the transient reason."""
        assert self._handler is not None
        invocation = RunInvocation(
            run_id=run.run_id,
            deployment_id=run.deployment_id,
            trigger=run.trigger,
            due_at=run.due_at,
            payload=run.payload,
            attempt=run.attempts,
            session_id=run.session_id,
            replay_of=run.replay_of,
        )
        step = "start_session"
        try:
            if invocation.session_id is None:
                session_id = await self._call(self._handler.start_session(invocation))
                self._update(run.run_id, session_id=session_id)
                invocation = msgspec.structs.replace(invocation, session_id=session_id)
            step = "admit_turn"
            turn_id = await self._call(self._handler.admit_turn(invocation))
        except RunPermanentError as exc:
            self._update(run.run_id, state=RunState.FAILED, error=f"{step} refused: {exc}")
            return None
        except TimeoutError:
            return f"{step} did not answer within {self._call_timeout:g} s"
        except Exception as exc:
            return f"{step} failed: {exc}" if str(exc) else f"{step} failed"
        self._update(run.run_id, state=RunState.DISPATCHED, turn_id=turn_id, error=None)
        return None

    async def _call(self, call: Awaitable[str]) -> str:
        return await asyncio.wait_for(call, self._call_timeout)
