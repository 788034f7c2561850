"""The reusable, provider-neutral contract suite of the scheduler seam (:mod:`nats_scheduler.seam`).

Bind it in a provider's tests by subclassing it under a name pytest collects::

    class TestExampleScheduler(SchedulerProviderContractSuite):
        engine_words = ("example-engine",)

        def make_provider(self, store):
            provider = ExampleSchedulerProvider(retry_attempts=3, retry_initial=0.02, ...)
            provider.configure(repository_backend=...)  # a fresh store at `store`
            return provider

        async def fire_due_times(self, provider, deployment_id, start, end):
            ...  # fire every due time in (start, end) the way the engine does

The suite drives the provider through the seam only, with
:class:`~nats_scheduler.testing.handler.RecordingRunHandler` standing in for AstraBox. It
imports nothing but the seam and that handler, so any provider can bind it.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import itertools
import pathlib
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any, ClassVar, TypeVar
from zoneinfo import ZoneInfo

import pytest

from nats_scheduler.seam import (
    SEAMS_API_VERSION,
    EnqueueRequest,
    InvalidSchedule,
    Run,
    RunNotFound,
    RunPayload,
    RunState,
    Schedule,
    ScheduleCapacityExceeded,
    ScheduleNotFound,
    SchedulerProperties,
    SchedulerProvider,
    Trigger,
)
from nats_scheduler.testing.handler import CallOutcome, HandlerCall, RecordingRunHandler

__all__ = ["FarCron", "SchedulerProviderContractSuite", "eventually", "far_cron", "holds_for"]

T = TypeVar("T")

_TERMINAL = (RunState.DISPATCHED, RunState.FAILED)
_PYTHON_TEXT = re.compile(r"Traceback|\w*(?:Error|Exception|Warning)\(")


# --------------------------------------------------------------------------- waiting


async def eventually(
    check: Callable[[], Awaitable[T]],
    *,
    timeout: float,
    what: str,
    interval: float = 0.02,
) -> T:
    """Poll ``check`` until it returns a truthy value (returned) or ``timeout`` passes.

    An ``AssertionError`` from ``check`` counts as "not yet"; the last one is reported when
    the deadline passes.
    """
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            value = await check()
        except AssertionError as exc:
            last = exc
        else:
            if value:
                return value
            last = value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")
        await asyncio.sleep(interval)


async def holds_for(
    check: Callable[[], Awaitable[bool]], *, duration: float, what: str, interval: float = 0.02
) -> None:
    """Assert ``check`` stays true for ``duration`` seconds (proof that nothing more happens)."""
    deadline = time.monotonic() + duration
    while True:
        assert await check(), f"no longer true: {what}"
        if time.monotonic() >= deadline:
            return
        await asyncio.sleep(interval)


# --------------------------------------------------------------------------- calendar


@dataclass(frozen=True)
class FarCron:
    """A monthly cron expression ``M H D * *`` whose real due times are days away.

    The provider's own ticker runs on the real clock during the suite, so the suite only
    uses expressions that cannot come due while it runs, and fires chosen windows in 2031
    through ``fire_due_times`` instead.
    """

    minute: int
    hour: int
    day: int

    @property
    def expr(self) -> str:
        return f"{self.minute} {self.hour} {self.day} * *"

    def due_times(self, timezone: str, start: datetime, end: datetime) -> list[datetime]:
        """The due times strictly inside ``(start, end)``, aware UTC, ascending."""
        zone = ZoneInfo(timezone)
        result = []
        year, month = start.year, start.month
        while datetime(year, month, 1, tzinfo=UTC) <= end + timedelta(days=1):
            local = datetime(year, month, self.day, self.hour, self.minute, tzinfo=zone)
            due = local.astimezone(UTC)
            if start < due < end:
                result.append(due)
            year, month = (year + 1, 1) if month == 12 else (year, month + 1)
        return result


def far_cron(today: date | None = None) -> FarCron:
    """A :class:`FarCron` whose day of month is at least 6 days from today in any zone.

    Local dates differ from the UTC date by at most one day, and 14 or 28 is always at least
    7 days (circularly, in months of 28 to 31 days) from today's UTC day.
    """
    day = (today or datetime.now(UTC).date()).day
    return FarCron(minute=30, hour=9, day=14 if day >= 22 or day <= 7 else 28)


def _utc(year: int, month: int) -> datetime:
    return datetime(year, month, 1, tzinfo=UTC)


# Windows in the future, each month holding exactly one due time of a FarCron.
ONE = (_utc(2031, 1), _utc(2031, 2))
"""One due time (January 2031)."""
NEXT_ONE = (_utc(2031, 2), _utc(2031, 3))
"""One due time (February 2031)."""
Q1 = (_utc(2031, 1), _utc(2031, 4))
"""Three due times (January to March 2031)."""
Q2 = (_utc(2031, 4), _utc(2031, 7))
"""Three due times (April to June 2031)."""
Q3 = (_utc(2031, 7), _utc(2031, 10))
"""Three due times (July to September 2031)."""


# --------------------------------------------------------------------------- the suite


class SchedulerProviderContractSuite:
    """The scheduler seam's contract, checked through the seam only.

    A binding subclasses this under a name pytest collects (``Test*``) and provides:

    ``make_provider(store)``
        A CONFIGURED provider (``configure`` already called) on a fresh, empty store kept in
        the directory ``store`` (may also be a coroutine). Configure it for tests: a SHORT
        retry budget (3 to 5 attempts, backoff in the tens of milliseconds), a short per-call
        timeout (about a second: long enough for the suite to observe a held call, short
        enough for a hanging one to be cut off quickly) and a short drain time (about a
        second), so exhaustion, timeouts and ``stop`` are all reached well within
        :attr:`wait_timeout`. Attributes set by the subclass's own autouse fixtures (a
        server, say) are available on ``self``.
    ``fire_due_times(provider, deployment_id, start, end)``
        Fire every due time strictly inside ``(start, end)`` of that deployment's Schedule
        the way the engine itself fires them (same path, same uniqueness: firing a due time
        twice must go through the store's guard), and return once the resulting Runs are
        stored. A deployment without a Schedule (deleted), or a disabled one, fires nothing.
        It is called with windows in 2031, far from the real clock.
    ``engine_words``
        Words of the engine's vocabulary that must never appear in ``str(error)`` of anything
        the provider raises, nor in a Run's ``error`` (compared case-insensitively).
        Python exception reprs (``SomeError(...)``) and tracebacks are always forbidden.

    The provider's own ticker keeps running on the real clock: every Schedule the suite
    applies uses :func:`far_cron`, whose real due times are days away. Each test gets a new
    provider started with a new :class:`RecordingRunHandler`; it is stopped at teardown
    whatever the outcome (within :attr:`stop_timeout`), and the handler must not have seen
    anything AstraBox would reject (``handler.violations``).
    """

    engine_words: ClassVar[tuple[str, ...]] = ()
    wait_timeout: ClassVar[float] = 30.0
    """How long the suite waits for asynchronous dispatch outcomes."""
    stop_timeout: ClassVar[float] = 30.0
    """The bound ``stop()`` must return within (the binding's drain time plus slack)."""
    quiet_period: ClassVar[float] = 0.3
    """How long the suite watches to conclude that nothing more happens (no retry)."""

    # ------------------------------------------------------------------ binding

    def make_provider(self, store: pathlib.Path) -> SchedulerProvider:
        """Return a configured provider with a fresh store in ``store``."""
        raise NotImplementedError("bind the suite: implement make_provider")

    async def fire_due_times(
        self, provider: Any, deployment_id: str, start: datetime, end: datetime
    ) -> None:
        """Fire every due time in ``(start, end)`` of the deployment; return once stored."""
        raise NotImplementedError("bind the suite: implement fire_due_times")

    # ------------------------------------------------------------------ fixtures

    @pytest.fixture
    def anyio_backend(self) -> str:
        """Providers may be asyncio-only."""
        return "asyncio"

    @pytest.fixture
    def handler(self) -> RecordingRunHandler:
        return RecordingRunHandler()

    @pytest.fixture
    async def provider(
        self, tmp_path: pathlib.Path, handler: RecordingRunHandler
    ) -> AsyncIterator[SchedulerProvider]:
        """A started provider on a fresh store; always stopped at teardown."""
        store = tmp_path / "store"
        store.mkdir()
        made: Any = self.make_provider(store)
        provider: SchedulerProvider = await made if inspect.isawaitable(made) else made
        try:
            await provider.start(handler)
            await provider.reconcile([])
            yield provider
        finally:
            try:
                await asyncio.wait_for(provider.stop(), self.stop_timeout)
            finally:
                handler.close()
        assert not handler.violations, f"AstraBox would have rejected: {handler.violations}"

    # ------------------------------------------------------------------ helpers

    @functools.cached_property
    def cron(self) -> FarCron:
        """This test's expression, fixed once (a test may run across midnight)."""
        return far_cron()

    def schedule(
        self,
        deployment_id: str,
        *,
        prompt: str = "summarise the night's alerts",
        enabled: bool = True,
        version: int = 0,
        timezone: str = "UTC",
        cron: str | None = None,
    ) -> Schedule:
        return Schedule(
            deployment_id=deployment_id,
            name=f"nightly {deployment_id}",
            cron=self.cron.expr if cron is None else cron,
            timezone=timezone,
            enabled=enabled,
            payload=RunPayload(target=f"agent-{deployment_id}", prompt=prompt),
            version=version,
        )

    def due(self, window: tuple[datetime, datetime], timezone: str = "UTC") -> list[datetime]:
        return self.cron.due_times(timezone, *window)

    async def fire(
        self, provider: SchedulerProvider, deployment_id: str, window: tuple[datetime, datetime]
    ) -> None:
        await asyncio.wait_for(
            self.fire_due_times(provider, deployment_id, *window), self.wait_timeout
        )

    async def fire_one(
        self,
        provider: SchedulerProvider,
        deployment_id: str,
        window: tuple[datetime, datetime] = ONE,
    ) -> Run:
        """Fire a window holding one due time and return the one new scheduled Run."""
        before = {r.run_id for r in await self.history(provider, deployment_id)}
        await self.fire(provider, deployment_id, window)
        new = [r for r in await self.history(provider, deployment_id) if r.run_id not in before]
        assert len(new) == 1, f"expected one new Run, got {new}"
        return new[0]

    async def history(self, provider: SchedulerProvider, deployment_id: str) -> list[Run]:
        return await provider.list_runs(deployment_id, limit=1000)

    async def scheduled(self, provider: SchedulerProvider, deployment_id: str) -> list[Run]:
        runs = await self.history(provider, deployment_id)
        return sorted((r for r in runs if r.trigger == Trigger.SCHEDULE), key=_due)

    async def run_now(self, provider: SchedulerProvider, deployment_id: str, **fields: Any) -> Run:
        return await provider.enqueue(EnqueueRequest(deployment_id, Trigger.RUN_NOW, **fields))

    async def settled(self, provider: SchedulerProvider, run_id: str, state: RunState) -> Run:
        """Wait until the Run reaches ``state``; fail at once if it ends in another."""

        async def check() -> Run | None:
            run = await provider.get_run(run_id)
            if run.state in _TERMINAL and run.state != state:
                pytest.fail(f"run {run_id} ended {run.state}, expected {state}: {run.error}")
            return run if run.state == state else None

        return await eventually(check, timeout=self.wait_timeout, what=f"{run_id} {state}")

    async def all_settled(self, provider: SchedulerProvider, deployment_id: str) -> list[Run]:
        async def check() -> list[Run] | None:
            runs = await self.history(provider, deployment_id)
            return runs if runs and all(r.state == RunState.DISPATCHED for r in runs) else None

        return await eventually(
            check, timeout=self.wait_timeout, what=f"every Run of {deployment_id} dispatched"
        )

    async def quiet(self, check: Callable[[], bool], what: str) -> None:
        async def probe() -> bool:
            return check()

        await holds_for(probe, duration=self.quiet_period, what=what)

    def assert_clean(self, text: str | None, *names: str) -> None:
        """An API-ready message: non-empty, no engine words, no Python text, names given."""
        assert text, "the message is empty"
        lowered = text.lower()
        for word in self.engine_words:
            assert word.lower() not in lowered, f"engine word {word!r} in {text!r}"
        assert not _PYTHON_TEXT.search(text), f"Python exception text in {text!r}"
        for name in names:
            assert name in text, f"{name!r} not named in {text!r}"

    def assert_attempts(self, calls: list[HandlerCall], run: Run) -> None:
        """Attempts start at 1, grow by one only after a failed call; Run.attempts is the last."""
        assert calls, "the handler was never called"
        assert calls[0].invocation.attempt == 1
        for prev, cur in itertools.pairwise(calls):
            step = cur.invocation.attempt - prev.invocation.attempt
            assert step in (0, 1), f"attempt jumped from {prev} to {cur}"
            if step:
                assert prev.outcome != CallOutcome.OK, f"attempt grew after a success: {cur}"
        assert run.attempts == calls[-1].invocation.attempt

    # ================================================================== properties

    @pytest.mark.anyio
    async def test_declares_name_version_and_properties(self, provider: SchedulerProvider) -> None:
        cls = type(provider)
        assert isinstance(cls.name, str)
        assert cls.name
        assert cls.seams_api_version == SEAMS_API_VERSION == 1
        assert isinstance(provider, SchedulerProvider)
        props = provider.properties
        assert isinstance(props, SchedulerProperties)
        assert props.recovery_scope in ("cluster", "executor")
        assert props.pause_visibility_seconds >= 0
        assert props.max_active_schedules is None or props.max_active_schedules >= 1

    # ================================================================== dispatch

    @pytest.mark.anyio
    async def test_scheduled_due_time_dispatches_through_handler(
        self, provider: SchedulerProvider, handler: RecordingRunHandler
    ) -> None:
        schedule = self.schedule("dep-dispatch", timezone="Europe/Berlin")
        await provider.apply(schedule)
        run = await self.fire_one(provider, "dep-dispatch")
        assert run.trigger == Trigger.SCHEDULE
        assert run.due_at == self.due(ONE, "Europe/Berlin")[0]
        assert run.due_at is not None
        assert run.due_at.utcoffset() == timedelta(0)
        assert (run.payload, run.replay_of, run.requested_by) == (schedule.payload, None, None)

        done = await self.settled(provider, run.run_id, RunState.DISPATCHED)
        assert done.session_id is not None
        assert done.session_id == handler.session_of(run.run_id)
        assert done.turn_id is not None
        assert done.turn_id == handler.turn_of(run.run_id)
        assert done.attempts >= 1
        assert done.error is None
        assert done.created_at.utcoffset() == done.updated_at.utcoffset() == timedelta(0)
        assert done.created_at <= done.updated_at

        calls = handler.calls_for(run.run_id)
        starts = [c for c in calls if c.method == "start_session"]
        admits = [c for c in calls if c.method == "admit_turn"]
        assert starts
        assert admits
        assert starts[0].index < admits[0].index, "admit_turn came before start_session"
        assert starts[0].invocation.session_id is None
        assert all(c.invocation.session_id == done.session_id for c in admits)
        for call in calls:
            inv = call.invocation
            assert (inv.deployment_id, inv.trigger, inv.due_at) == (
                "dep-dispatch",
                Trigger.SCHEDULE,
                run.due_at,
            )
            assert (inv.payload, inv.replay_of) == (schedule.payload, None)
        assert handler.sessions_created(run.run_id) == 1
        self.assert_attempts(calls, done)

    @pytest.mark.anyio
    async def test_transient_failures_are_retried_to_success(
        self, provider: SchedulerProvider, handler: RecordingRunHandler
    ) -> None:
        handler.fail_transiently(2, deployment_id="dep-flaky", method="start_session")
        await provider.apply(self.schedule("dep-flaky"))
        run = await self.fire_one(provider, "dep-flaky")
        done = await self.settled(provider, run.run_id, RunState.DISPATCHED)

        starts = handler.calls_for(run.run_id, "start_session")
        assert [c.invocation.attempt for c in starts] == [1, 2, 3]
        assert [c.outcome for c in starts] == [
            CallOutcome.TRANSIENT,
            CallOutcome.TRANSIENT,
            CallOutcome.OK,
        ]
        assert done.attempts == 3
        assert done.session_id == handler.session_of(run.run_id)
        assert handler.sessions_created(run.run_id) == 1
        admits = handler.calls_for(run.run_id, "admit_turn")
        assert [c.invocation.session_id for c in admits] == [done.session_id]
        self.assert_attempts(handler.calls_for(run.run_id), done)

    @pytest.mark.anyio
    async def test_retry_after_admit_turn_failure_reuses_stored_session(
        self, provider: SchedulerProvider, handler: RecordingRunHandler
    ) -> None:
        handler.fail_transiently(1, deployment_id="dep-admit", method="admit_turn")
        await provider.apply(self.schedule("dep-admit"))
        run = await self.run_now(provider, "dep-admit")
        done = await self.settled(provider, run.run_id, RunState.DISPATCHED)

        calls = handler.calls_for(run.run_id)
        assert calls[0].method == "start_session"
        assert calls[0].outcome == CallOutcome.OK
        admits = [c for c in calls if c.method == "admit_turn"]
        assert [c.outcome for c in admits] == [CallOutcome.TRANSIENT, CallOutcome.OK]
        # Every call after the Session was stored carries it, start_session retries included.
        assert all(c.invocation.session_id == done.session_id for c in calls[1:])
        assert done.session_id == handler.session_of(run.run_id)
        assert handler.sessions_created(run.run_id) == 1
        assert done.attempts >= 2
        self.assert_attempts(calls, done)

    @pytest.mark.anyio
    async def test_permanent_failure_fails_without_retry(
        self, provider: SchedulerProvider, handler: RecordingRunHandler
    ) -> None:
        handler.fail_permanently(deployment_id="dep-refused", method="start_session")
        await provider.apply(self.schedule("dep-refused"))
        run = await self.fire_one(provider, "dep-refused")
        failed = await self.settled(provider, run.run_id, RunState.FAILED)

        await self.quiet(lambda: len(handler.calls_for(run.run_id)) == 1, "exactly one call")
        assert handler.calls_for(run.run_id)[0].outcome == CallOutcome.PERMANENT
        assert (failed.session_id, failed.turn_id, failed.attempts) == (None, None, 1)
        self.assert_clean(failed.error)

    @pytest.mark.anyio
    async def test_permanent_failure_on_admit_turn_keeps_stored_session(
        self, provider: SchedulerProvider, handler: RecordingRunHandler
    ) -> None:
        handler.fail_permanently(deployment_id="dep-no-turn", method="admit_turn")
        await provider.apply(self.schedule("dep-no-turn"))
        run = await self.run_now(provider, "dep-no-turn")
        failed = await self.settled(provider, run.run_id, RunState.FAILED)

        await self.quiet(lambda: len(handler.calls_for(run.run_id)) == 2, "no retry")
        assert [c.method for c in handler.calls_for(run.run_id)] == ["start_session", "admit_turn"]
        assert failed.session_id is not None
        assert failed.session_id == handler.session_of(run.run_id)
        assert failed.turn_id is None
        self.assert_clean(failed.error)

    @pytest.mark.anyio
    async def test_exhausted_retries_fail_the_run(
        self, provider: SchedulerProvider, handler: RecordingRunHandler
    ) -> None:
        handler.fail_forever(deployment_id="dep-down", method="start_session")
        await provider.apply(self.schedule("dep-down"))
        run = await self.run_now(provider, "dep-down")
        failed = await self.settled(provider, run.run_id, RunState.FAILED)

        calls = handler.calls_for(run.run_id)
        await self.quiet(lambda: len(handler.calls_for(run.run_id)) == len(calls), "retries ended")
        assert len(calls) >= 2, "a transient failure was not retried"
        assert all(c.outcome == CallOutcome.TRANSIENT for c in calls)
        assert failed.attempts == len(calls)
        assert [c.invocation.attempt for c in calls] == list(range(1, len(calls) + 1))
        assert failed.session_id is None
        self.assert_clean(failed.error)

    @pytest.mark.anyio
    async def test_hanging_call_is_cut_off_and_retried(
        self, provider: SchedulerProvider, handler: RecordingRunHandler
    ) -> None:
        gate = handler.hang(deployment_id="dep-hang", method="start_session", times=1)
        await provider.apply(self.schedule("dep-hang"))
        run = await self.run_now(provider, "dep-hang")
        await gate.wait_until_blocked(timeout=self.wait_timeout)
        done = await self.settled(provider, run.run_id, RunState.DISPATCHED)

        starts = handler.calls_for(run.run_id, "start_session")
        assert len(starts) >= 2
        assert starts[0].outcome in (CallOutcome.CANCELLED, CallOutcome.IN_PROGRESS)
        assert starts[-1].outcome == CallOutcome.OK
        assert done.attempts >= 2
        assert handler.sessions_created(run.run_id) == 1

    @pytest.mark.anyio
    async def test_run_is_dispatching_while_handler_call_in_flight(
        self, provider: SchedulerProvider, handler: RecordingRunHandler
    ) -> None:
        gate = handler.block(deployment_id="dep-busy", method="admit_turn")
        await provider.apply(self.schedule("dep-busy"))
        run = await self.run_now(provider, "dep-busy")
        await gate.wait_until_blocked(timeout=self.wait_timeout)

        async def dispatching_with_session() -> Run | None:
            current = await provider.get_run(run.run_id)
            held = current.state == RunState.DISPATCHING and current.session_id is not None
            return current if held else None

        # The Session ID is stored before admit_turn is called, so a takeover can reuse it.
        held = await eventually(
            dispatching_with_session,
            timeout=self.wait_timeout,
            what="DISPATCHING with the Session ID stored",
        )
        assert held.session_id == handler.session_of(run.run_id)
        assert held.turn_id is None
        gate.release()
        done = await self.settled(provider, run.run_id, RunState.DISPATCHED)
        assert done.turn_id == handler.turn_of(run.run_id)

    # ================================================================== history

    @pytest.mark.anyio
    async def test_history_lists_every_trigger_newest_first_and_pages(
        self, provider: SchedulerProvider
    ) -> None:
        await provider.apply(self.schedule("dep-history"))
        await self.fire(provider, "dep-history", Q1)
        first = (await self.scheduled(provider, "dep-history"))[0]
        await self.run_now(provider, "dep-history")
        await provider.enqueue(
            EnqueueRequest("dep-history", Trigger.REPLAY, replay_of=first.run_id)
        )
        runs = await self.all_settled(provider, "dep-history")

        assert len(runs) == 5
        assert {r.trigger for r in runs} == set(Trigger)
        keys = [(r.created_at, r.run_id) for r in runs]
        assert keys == sorted(keys, reverse=True), "not newest first (ties: run_id descending)"
        assert await provider.list_runs("dep-history") == runs
        assert await provider.list_runs("dep-history", limit=2) == runs[:2]

        paged: list[Run] = []
        before: str | None = None
        while page := await provider.list_runs("dep-history", limit=2, before=before):
            assert len(page) <= 2
            paged.extend(page)
            before = page[-1].run_id
        assert paged == runs, "paging with before skipped or repeated Runs"
        for run in runs:
            assert await provider.get_run(run.run_id) == run

    @pytest.mark.anyio
    async def test_list_runs_limits_and_unknown_deployment(
        self, provider: SchedulerProvider
    ) -> None:
        await provider.apply(self.schedule("dep-limits"))
        await self.run_now(provider, "dep-limits")
        for bad in (0, 1001):
            with pytest.raises(ValueError) as caught:
                await provider.list_runs("dep-limits", limit=bad)
            self.assert_clean(str(caught.value))
        assert len(await provider.list_runs("dep-limits", limit=1000)) == 1
        assert len(await provider.list_runs("dep-limits", limit=1)) == 1
        assert await provider.list_runs("dep-never-existed") == []

    @pytest.mark.anyio
    async def test_get_run_unknown_raises_clean_run_not_found(
        self, provider: SchedulerProvider
    ) -> None:
        with pytest.raises(RunNotFound) as caught:
            await provider.get_run("run-does-not-exist")
        assert isinstance(caught.value, LookupError)
        self.assert_clean(str(caught.value), "run-does-not-exist")

    # ================================================================== payload capture

    @pytest.mark.anyio
    async def test_run_keeps_payload_captured_at_creation(
        self, provider: SchedulerProvider, handler: RecordingRunHandler
    ) -> None:
        old = self.schedule("dep-edit", prompt="old prompt", version=1)
        await provider.apply(old)
        first = await self.fire_one(provider, "dep-edit", ONE)
        await self.settled(provider, first.run_id, RunState.DISPATCHED)

        new = self.schedule("dep-edit", prompt="new prompt", version=2)
        await provider.apply(new)
        assert (await provider.get_run(first.run_id)).payload == old.payload
        assert {c.invocation.payload for c in handler.calls_for(first.run_id)} == {old.payload}

        second = await self.fire_one(provider, "dep-edit", NEXT_ONE)
        assert second.payload == new.payload
        await self.settled(provider, second.run_id, RunState.DISPATCHED)
        assert {c.invocation.payload for c in handler.calls_for(second.run_id)} == {new.payload}
        assert (await provider.get_run(first.run_id)).payload == old.payload

    # ================================================================== run now

    @pytest.mark.anyio
    async def test_run_now_provenance_and_current_payload(
        self, provider: SchedulerProvider, handler: RecordingRunHandler
    ) -> None:
        await provider.apply(self.schedule("dep-now", prompt="v1", version=1))
        current = self.schedule("dep-now", prompt="v2", version=2)
        await provider.apply(current)
        run = await self.run_now(provider, "dep-now", requested_by="ops@example.com")

        assert run.state in (RunState.PENDING, RunState.DISPATCHING, RunState.DISPATCHED)
        assert (run.deployment_id, run.trigger, run.due_at) == ("dep-now", Trigger.RUN_NOW, None)
        assert (run.payload, run.replay_of) == (current.payload, None)
        assert run.requested_by == "ops@example.com"
        done = await self.settled(provider, run.run_id, RunState.DISPATCHED)
        assert done.requested_by == "ops@example.com"
        assert done.session_id == handler.session_of(run.run_id)
        for call in handler.calls_for(run.run_id):
            inv = call.invocation
            assert (inv.trigger, inv.due_at, inv.payload) == (
                Trigger.RUN_NOW,
                None,
                current.payload,
            )

    @pytest.mark.anyio
    async def test_run_now_does_not_move_calendar(self, provider: SchedulerProvider) -> None:
        await provider.apply(self.schedule("dep-calendar"))
        await self.fire(provider, "dep-calendar", ONE)
        await self.run_now(provider, "dep-calendar")
        await self.run_now(provider, "dep-calendar")
        later = (ONE[1], Q2[0])  # February and March
        await self.fire(provider, "dep-calendar", later)

        scheduled = await self.scheduled(provider, "dep-calendar")
        assert [r.due_at for r in scheduled] == self.due(ONE) + self.due(later)
        assert len(await self.history(provider, "dep-calendar")) == 5

    @pytest.mark.anyio
    async def test_run_now_allowed_while_disabled(self, provider: SchedulerProvider) -> None:
        await provider.apply(self.schedule("dep-off", enabled=False))
        run = await self.run_now(provider, "dep-off")
        await self.settled(provider, run.run_id, RunState.DISPATCHED)
        await self.fire(provider, "dep-off", Q1)
        assert await self.scheduled(provider, "dep-off") == [], "run now re-enabled the calendar"

    @pytest.mark.anyio
    async def test_run_now_request_id_is_idempotent(
        self, provider: SchedulerProvider, handler: RecordingRunHandler
    ) -> None:
        await provider.apply(self.schedule("dep-idem"))
        await provider.apply(self.schedule("dep-other"))
        first = await self.run_now(provider, "dep-idem", request_id="req-1")
        await self.settled(provider, first.run_id, RunState.DISPATCHED)
        again = await self.run_now(provider, "dep-idem", request_id="req-1")

        assert again.run_id == first.run_id
        assert [r.run_id for r in await self.history(provider, "dep-idem")] == [first.run_id]
        await self.quiet(
            lambda: (
                len(handler.calls_for(first.run_id)) == 2
                and handler.run_ids("dep-idem") == {first.run_id}
            ),
            "one Run dispatched once",
        )
        # The key is per deployment, and another key is another Run.
        other = await self.run_now(provider, "dep-other", request_id="req-1")
        assert other.run_id != first.run_id
        assert other.deployment_id == "dep-other"
        fresh = await self.run_now(provider, "dep-idem", request_id="req-2")
        assert fresh.run_id != first.run_id

    @pytest.mark.anyio
    async def test_enqueue_unknown_or_deleted_deployment_raises_schedule_not_found(
        self, provider: SchedulerProvider
    ) -> None:
        with pytest.raises(ScheduleNotFound) as caught:
            await self.run_now(provider, "dep-unknown")
        assert isinstance(caught.value, LookupError)
        self.assert_clean(str(caught.value), "dep-unknown")

        await provider.apply(self.schedule("dep-gone"))
        run = await self.run_now(provider, "dep-gone")
        await provider.delete("dep-gone")
        with pytest.raises(ScheduleNotFound) as caught:
            await self.run_now(provider, "dep-gone")
        self.assert_clean(str(caught.value), "dep-gone")
        with pytest.raises(ScheduleNotFound):
            await provider.enqueue(EnqueueRequest("dep-gone", Trigger.REPLAY, replay_of=run.run_id))

    # ================================================================== replay

    @pytest.mark.anyio
    async def test_replay_reuses_captured_payload_with_provenance(
        self, provider: SchedulerProvider, handler: RecordingRunHandler
    ) -> None:
        old = self.schedule("dep-replay", prompt="as it was", version=1)
        await provider.apply(old)
        original = await self.fire_one(provider, "dep-replay")
        original = await self.settled(provider, original.run_id, RunState.DISPATCHED)
        await provider.apply(self.schedule("dep-replay", prompt="as it is now", version=2))

        replay = await provider.enqueue(
            EnqueueRequest(
                "dep-replay", Trigger.REPLAY, replay_of=original.run_id, requested_by="ops"
            )
        )
        assert replay.run_id != original.run_id
        assert (replay.trigger, replay.replay_of, replay.due_at) == (
            Trigger.REPLAY,
            original.run_id,
            None,
        )
        assert (replay.payload, replay.requested_by) == (old.payload, "ops")
        done = await self.settled(provider, replay.run_id, RunState.DISPATCHED)
        assert done.session_id != original.session_id, "a replay is a new Run with its own Session"
        for call in handler.calls_for(replay.run_id):
            inv = call.invocation
            assert (inv.trigger, inv.replay_of, inv.payload) == (
                Trigger.REPLAY,
                original.run_id,
                old.payload,
            )
        assert await provider.get_run(original.run_id) == original

        again = await provider.enqueue(
            EnqueueRequest("dep-replay", Trigger.REPLAY, replay_of=replay.run_id)
        )
        assert (again.replay_of, again.payload) == (replay.run_id, old.payload)

    @pytest.mark.anyio
    async def test_replay_of_unknown_or_foreign_run_raises_run_not_found(
        self, provider: SchedulerProvider
    ) -> None:
        await provider.apply(self.schedule("dep-a"))
        await provider.apply(self.schedule("dep-b"))
        foreign = await self.fire_one(provider, "dep-a")
        for missing in ("run-does-not-exist", foreign.run_id):
            with pytest.raises(RunNotFound) as caught:
                await provider.enqueue(EnqueueRequest("dep-b", Trigger.REPLAY, replay_of=missing))
            self.assert_clean(str(caught.value), missing)
        assert await self.history(provider, "dep-b") == []

    def test_enqueue_request_rejects_schedule_trigger(self) -> None:
        with pytest.raises(ValueError):
            EnqueueRequest("dep-x", Trigger.SCHEDULE)
        with pytest.raises(ValueError):
            EnqueueRequest("dep-x", Trigger.REPLAY)  # replay_of is required

    # ================================================================== one Run per due time

    @pytest.mark.anyio
    async def test_same_due_time_fired_twice_makes_one_run(
        self, provider: SchedulerProvider, handler: RecordingRunHandler
    ) -> None:
        await provider.apply(self.schedule("dep-twice"))
        await self.fire(provider, "dep-twice", Q1)
        await self.fire(provider, "dep-twice", Q1)
        await self.fire(provider, "dep-twice", (Q1[0], NEXT_ONE[1]))  # overlaps the first two
        runs = await self.scheduled(provider, "dep-twice")
        assert [r.due_at for r in runs] == self.due(Q1)
        settled = await self.all_settled(provider, "dep-twice")
        assert handler.run_ids("dep-twice") == {r.run_id for r in settled}

    @pytest.mark.anyio
    async def test_same_due_time_fired_concurrently_makes_one_run(
        self, provider: SchedulerProvider, handler: RecordingRunHandler
    ) -> None:
        await provider.apply(self.schedule("dep-race"))
        await asyncio.gather(*(self.fire(provider, "dep-race", Q1) for _ in range(5)))
        runs = await self.scheduled(provider, "dep-race")
        assert [r.due_at for r in runs] == self.due(Q1)
        settled = await self.all_settled(provider, "dep-race")
        assert handler.run_ids("dep-race") == {r.run_id for r in settled}
        assert all(handler.sessions_created(r.run_id) == 1 for r in settled)

    # ================================================================== enable / disable

    @pytest.mark.anyio
    async def test_disabled_schedule_does_not_fire(
        self, provider: SchedulerProvider, handler: RecordingRunHandler
    ) -> None:
        await provider.apply(self.schedule("dep-pause", enabled=False, version=1))
        await self.fire(provider, "dep-pause", Q1)
        assert await self.history(provider, "dep-pause") == []

        await provider.apply(self.schedule("dep-pause", enabled=True, version=2))
        await self.fire(provider, "dep-pause", Q2)
        assert [r.due_at for r in await self.scheduled(provider, "dep-pause")] == self.due(Q2)

        await provider.apply(self.schedule("dep-pause", enabled=False, version=3))
        await self.fire(provider, "dep-pause", Q3)
        assert [r.due_at for r in await self.scheduled(provider, "dep-pause")] == self.due(Q2)
        assert not any(c.invocation.due_at in self.due(Q1) + self.due(Q3) for c in handler.calls)

    # ================================================================== removal

    @pytest.mark.anyio
    async def test_deleted_schedule_stops_firing_and_keeps_history(
        self, provider: SchedulerProvider
    ) -> None:
        await provider.apply(self.schedule("dep-delete"))
        await self.fire(provider, "dep-delete", Q1)
        runs = await self.all_settled(provider, "dep-delete")
        assert len(runs) == 3

        await provider.delete("dep-delete")
        await self.fire(provider, "dep-delete", Q2)
        assert await self.history(provider, "dep-delete") == runs
        for run in runs:
            assert await provider.get_run(run.run_id) == run
        await provider.delete("dep-delete")  # twice: harmless
        await provider.delete("dep-never-existed")  # unknown: no-op
        assert await self.history(provider, "dep-delete") == runs

    @pytest.mark.anyio
    async def test_delete_lets_started_runs_finish(
        self, provider: SchedulerProvider, handler: RecordingRunHandler
    ) -> None:
        gate = handler.block(deployment_id="dep-finish", method="admit_turn")
        await provider.apply(self.schedule("dep-finish"))
        run = await self.fire_one(provider, "dep-finish")
        await gate.wait_until_blocked(timeout=self.wait_timeout)
        await provider.delete("dep-finish")
        gate.release()
        done = await self.settled(provider, run.run_id, RunState.DISPATCHED)
        assert done.turn_id == handler.turn_of(run.run_id)

    # ================================================================== versions, reconcile

    @pytest.mark.anyio
    async def test_apply_honours_version_ordering(self, provider: SchedulerProvider) -> None:
        async def current_prompt() -> str:
            return (await self.run_now(provider, "dep-version")).payload.prompt

        await provider.apply(self.schedule("dep-version", prompt="two", version=2))
        await provider.apply(self.schedule("dep-version", prompt="one", version=1))  # stale
        assert await current_prompt() == "two"
        await provider.apply(self.schedule("dep-version", prompt="two again", version=2))
        assert await current_prompt() == "two", "an equal version must be a no-op"
        await provider.apply(self.schedule("dep-version", prompt="three", version=3))
        assert await current_prompt() == "three"
        await provider.apply(self.schedule("dep-version", prompt="zero", version=0))
        assert await current_prompt() == "zero", "version 0 (unversioned) always replaces"

    @pytest.mark.anyio
    async def test_stale_version_cannot_disable(self, provider: SchedulerProvider) -> None:
        await provider.apply(self.schedule("dep-stale", enabled=True, version=5))
        await provider.apply(self.schedule("dep-stale", enabled=False, version=4))
        await self.fire(provider, "dep-stale", Q1)
        assert [r.due_at for r in await self.scheduled(provider, "dep-stale")] == self.due(Q1)

    @pytest.mark.anyio
    async def test_reconcile_deletes_missing_and_applies_present(
        self, provider: SchedulerProvider
    ) -> None:
        await provider.apply(self.schedule("dep-keep", prompt="before", version=1))
        await provider.apply(self.schedule("dep-drop", version=1))
        await provider.reconcile(
            [
                self.schedule("dep-keep", prompt="after", version=2),
                self.schedule("dep-new", prompt="brand new"),
            ]
        )
        await self.fire(provider, "dep-drop", Q1)
        assert await self.history(provider, "dep-drop") == []
        with pytest.raises(ScheduleNotFound):
            await self.run_now(provider, "dep-drop")
        assert (await self.run_now(provider, "dep-keep")).payload.prompt == "after"
        assert (await self.run_now(provider, "dep-new")).payload.prompt == "brand new"
        await self.fire(provider, "dep-keep", Q1)
        assert [r.due_at for r in await self.scheduled(provider, "dep-keep")] == self.due(Q1)

    # ================================================================== errors

    @pytest.mark.anyio
    async def test_invalid_cron_is_rejected_cleanly(self, provider: SchedulerProvider) -> None:
        with pytest.raises(InvalidSchedule) as caught:
            await provider.apply(self.schedule("dep-cron", cron="61 * * * *"))
        assert isinstance(caught.value, ValueError)
        self.assert_clean(str(caught.value), "dep-cron")
        assert "minute" in str(caught.value).lower()
        for cron in ("* * * *", "0 0 32 * *", "0 24 * * *", "0 0 * 13 *", "every day", ""):
            with pytest.raises(InvalidSchedule) as caught:
                await provider.apply(self.schedule("dep-cron", cron=cron))
            self.assert_clean(str(caught.value), "dep-cron")
        with pytest.raises(ScheduleNotFound):
            await self.run_now(provider, "dep-cron")  # nothing was stored
        # Standard syntax is accepted: names, ranges, steps, lists (disabled: never fires).
        for cron in ("0 9 * JAN,JUL MON-FRI", "*/15 1-5 1,15 * *", "0 0 * * SUN"):
            await provider.apply(self.schedule("dep-syntax", cron=cron, enabled=False))

    @pytest.mark.anyio
    async def test_unknown_timezone_is_rejected_cleanly(self, provider: SchedulerProvider) -> None:
        with pytest.raises(InvalidSchedule) as caught:
            await provider.apply(self.schedule("dep-zone", timezone="Mars/Olympus_Mons"))
        self.assert_clean(str(caught.value), "dep-zone")
        with pytest.raises(ScheduleNotFound):
            await self.run_now(provider, "dep-zone")

    @pytest.mark.anyio
    async def test_capacity_is_enforced_for_enabled_schedules(
        self, provider: SchedulerProvider
    ) -> None:
        cap = provider.properties.max_active_schedules
        if cap is None or cap > 200:
            pytest.skip(f"max_active_schedules is {cap}: too many Schedules to fill in a test")
        for i in range(cap):
            await provider.apply(self.schedule(f"dep-cap-{i}"))
        with pytest.raises(ScheduleCapacityExceeded) as caught:
            await provider.apply(self.schedule("dep-cap-extra"))
        self.assert_clean(str(caught.value), "dep-cap-extra")
        await provider.apply(self.schedule("dep-cap-extra", enabled=False))  # disabled: fine
        await provider.apply(self.schedule("dep-cap-0", prompt="edited"))  # already enabled
        with pytest.raises(ScheduleCapacityExceeded):
            await provider.apply(self.schedule("dep-cap-extra", enabled=True))
        await provider.delete("dep-cap-0")
        await provider.apply(self.schedule("dep-cap-extra", enabled=True))

    # ================================================================== drain

    @pytest.mark.anyio
    async def test_stop_drains_within_bound_and_is_idempotent(
        self, provider: SchedulerProvider, handler: RecordingRunHandler
    ) -> None:
        gate = handler.block(deployment_id="dep-drain", method="start_session")
        await provider.apply(self.schedule("dep-drain"))
        run = await self.run_now(provider, "dep-drain")
        await gate.wait_until_blocked(timeout=self.wait_timeout)

        async def dispatching() -> bool:
            return (await provider.get_run(run.run_id)).state == RunState.DISPATCHING

        await eventually(dispatching, timeout=self.wait_timeout, what="DISPATCHING")
        stopping = time.monotonic()
        await asyncio.wait_for(provider.stop(), self.stop_timeout)  # the call is never released
        assert time.monotonic() - stopping < self.stop_timeout
        await asyncio.wait_for(provider.stop(), self.stop_timeout)  # twice: harmless
        assert not gate.released
        assert handler.turn_of(run.run_id) is None
        # Stopping drains the call in flight but starts no new attempt: an attempt spent while
        # stopping could exhaust the budget and FAIL a Run that must stay recoverable.
        await self.quiet(
            lambda: all(c.started_at < stopping for c in handler.calls),
            "no handler call may start once stop() has begun",
        )


def _due(run: Run) -> datetime:
    assert run.due_at is not None
    return run.due_at
