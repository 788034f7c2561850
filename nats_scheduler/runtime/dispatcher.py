"""Dispatch: claim a Run, call the handler, store what it returned, retry, recover.

One task per Run this process holds (at most its lease slots; the Runs beyond wait in a
queue, a dictionary entry each, not a task: a herd of 100,000 on one replica). The sequence
per attempt follows the contract (docs/contract.md): claim (lease + ``run.claimed``, or for
a scheduled Run its creator stored already claimed, the ``run.created`` itself),
``start_session``, store the Session ID, ``admit_turn``, store the turn
(``run.dispatched``). Transient failures wait a bounded, jittered backoff while the lease is
kept (renewed by one loop for all the Runs held: :mod:`.holds`); ``RunPermanentError`` or an
exhausted budget ends FAILED.

A recovery sweep resumes Runs nobody is working on: Runs whose lease expired (their holder
died or paused), Runs released at a drain, and Runs created by a process that died before it
claimed them. It looks only at the ledger's set of unfinished Runs, never at the history.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Protocol

from ..clock import Clock, sleep_for
from ..core import runcore
from ..core.events import RunEventType, RunRecord
from ..core.pause_visibility import NOT_STARTED_AFTER_PAUSE
from ..core.runcore import RetryPolicy
from ..ports.leases import Claimed, LeaseTable
from ..ports.runs import Conflict, RunJournal
from ..projections.ledger import Ledger
from ..seam import (
    RunHandler,
    RunInvocation,
    RunPermanentError,
    SchedulerError,
)
from .deadlines import Deadlines
from .holds import Held, Holds
from .metrics import Metrics

log = logging.getLogger(__name__)


class Gate(Protocol):
    """Whether a Run may start its first attempt (:class:`.gate.PauseGate`)."""

    async def may_start(self, record: RunRecord, *, vetted: bool) -> bool: ...


IN_FLIGHT_MIN = 256
"""Runs one process leases at once at least (four per allowed handler call otherwise): each
is renewed every third of a lease, so leasing a busy minute's thousands would spend the
store's time on renewals; the rest wait unrenewed (docs/architecture.md)."""


class _LostRun(Exception):
    """This process no longer holds the Run (lease lost or another writer appended)."""


class Dispatcher:
    """Runs the dispatch tasks and the recovery sweep of one provider process."""

    def __init__(
        self,
        *,
        runlog: RunJournal,
        ledger: Ledger,
        leases: LeaseTable,
        handler: RunHandler,
        clock: Clock,
        policy: RetryPolicy,
        call_timeout: float,
        max_concurrent: int,
        claim_grace: float,
        gate: Gate | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self._runlog = runlog
        self._ledger = ledger
        self._leases = leases
        self._handler = handler
        self._clock = clock
        self._policy = policy
        self._call_timeout = call_timeout
        self._calls = asyncio.Semaphore(max_concurrent)
        self._deadlines = Deadlines()
        self._slots = max(IN_FLIGHT_MIN, 4 * max_concurrent)
        self._claim_grace = timedelta(seconds=claim_grace)
        self._gate = gate
        self._metrics = metrics or Metrics.disabled()
        self._vetted: set[str] = set()
        self._tasks: dict[str, asyncio.Task[None]] = {}
        """One per lease slot taken: Runs held, or giving a lease back."""
        self._waiting: OrderedDict[str, Claimed | None] = OrderedDict()
        """Runs waiting for a lease slot, oldest first (taken from the front in O(1): a
        dict's first key is found by skipping every entry deleted before it)."""
        self._held = Holds(leases, clock)
        self._stopping = False
        self.identity = leases.identity

    def submit(self, run_id: str, *, vetted: bool = False, claimed: Claimed | None = None) -> None:
        """Try to dispatch ``run_id`` here (no-op if already here or stopping).

        ``vetted``: the caller stored this scheduled Run within the pause-visibility bound of
        its Schedule read, so the first claim need not ask whether it came after a pause.
        ``claimed``: the caller stored it and holds its lease (no lease to take, no read).
        """
        if self._stopping or run_id in self._tasks or run_id in self._waiting:
            return
        if vetted:
            self._vetted.add(run_id)
        if len(self._tasks) < self._slots:
            self._start(run_id, claimed)
        else:
            self._waiting[run_id] = claimed

    def _start(self, run_id: str, claimed: Claimed | None) -> None:
        task = asyncio.create_task(self._leased(run_id, claimed), name=f"dispatch {run_id}")
        self._tasks[run_id] = task

        def done(_task: asyncio.Task[None], run_id: str = run_id) -> None:
            self._tasks.pop(run_id, None)
            self._vetted.discard(run_id)
            self._start_waiting()

        task.add_done_callback(done)

    def _start_waiting(self) -> None:
        """Give the free lease slots to the Runs that waited longest."""
        while self._waiting and len(self._tasks) < self._slots and not self._stopping:
            self._start(*self._waiting.popitem(last=False))

    @property
    def tasks(self) -> int:
        """Runs taken here: held, waiting for a lease slot, or giving a lease back."""
        return len(self._tasks) + len(self._waiting)

    @property
    def in_flight(self) -> list[str]:
        """Run IDs this process holds right now."""
        return self._held.run_ids()

    async def sweep_once(self) -> int:
        """Submit the unfinished Runs nobody live holds, as many as this process has lease
        slots free: a busy replica's waiting Runs look expired (unrenewed), and taking them
        into a queue of its own where they expire again made a herd on three replicas pass
        each Run around; an idle replica still takes them (load sharing). Returns how many."""
        now = self._clock.now()
        submitted = 0
        for record in self._ledger.unfinished():
            if self.tasks >= self._slots:
                break
            if record.run_id in self._tasks or record.run_id in self._waiting or self._stopping:
                continue
            if record.holder is None and now - record.updated_at < self._claim_grace:
                continue  # its creator claims it first
            try:
                current = await self._leases.current(record.run_id)
            except Exception:  # the store is struggling: look again next sweep
                log.debug("lease lookup failed for %s", record.run_id, exc_info=True)
                continue
            if current is not None:
                _, value = current
                if value.holder != self.identity and not self._leases.expired(value):
                    continue
            self.submit(record.run_id)
            submitted += 1
        return submitted

    async def sweep_forever(self, interval: float) -> None:
        while not self._stopping:
            try:
                await self.sweep_once()
            except Exception:
                log.exception("recovery sweep failed")
            await sleep_for(self._clock, interval)

    async def drain(self, timeout: float) -> None:
        """Stop taking Runs; let handler calls in progress finish within ``timeout``.

        Runs waiting for a retry are handed back at once; calls still running at the deadline
        are cancelled. Either way the lease is released and the Run stays recoverable.
        """
        self._stopping = True
        for run_id in self._waiting:  # never leased here: recoverable as they are
            self._vetted.discard(run_id)
        self._waiting.clear()
        for run_id, task in list(self._tasks.items()):
            flight = self._held.get(run_id)
            if flight is None or not flight.in_call:
                task.cancel()
        tasks = list(self._tasks.values())
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=timeout)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=5.0)

    async def _leased(self, run_id: str, claimed: Claimed | None) -> None:
        """Take (or keep, when ``claimed``) the Run's lease, renew it while the attempts
        run, then give it up: free when unfinished, left to expire when finished."""
        if self._stopping:
            return
        if claimed is not None:
            claimed = await self._still_claimed(claimed)
        if claimed is not None:
            lease = claimed.lease
        else:
            acquired = await self._leases.acquire(run_id)
            if acquired is None:
                return
            lease, _previous_holder = acquired
        me = asyncio.current_task()
        assert me is not None
        flight = self._held.take(lease, me)
        self._metrics.in_flight(+1)
        try:
            await self._attempts(flight, claimed)
        except (_LostRun, Conflict):
            log.info("run %s is now leased by another process", run_id)
        except SchedulerError:
            log.warning("store unavailable while dispatching %s; will resume", run_id)
        except asyncio.CancelledError:
            if not flight.lost:
                await self._hand_back(flight)
            raise
        finally:
            self._held.drop(flight)
            self._metrics.in_flight(-1)
            if not flight.lost:
                finished = flight.record is not None and flight.record.finished
                with contextlib.suppress(Exception):
                    await asyncio.shield(self._leases.release(flight.lease,
                                                              finished=finished))

    async def _still_claimed(self, claimed: Claimed) -> Claimed | None:
        """The creator's lease, proven still ours before the first handler call: a Run of a
        herd can wait for a slot past its lease or its key's TTL, and calling the handler
        then starts it twice. So a lapsed lease is renewed by CAS (only if nobody wrote its
        key since), else the Run is acquired like any other or left to its new holder."""
        if self._clock.now() < claimed.lease.value.expires_at:
            return claimed
        try:
            renewed = await self._leases.renew(claimed.lease)
        except Exception:  # store trouble: take it the ordinary way, which retries
            return None
        return None if renewed is None else dataclasses.replace(claimed, lease=renewed)

    async def _attempts(self, flight: Held, claimed: Claimed | None) -> None:
        if claimed is not None:
            flight.seq, flight.record = claimed.seq, claimed.record
        else:
            known = self._ledger.get(flight.lease.run_id)
            if known is None:
                raise _LostRun()
            fetched = await self._runlog.fetch(known.deployment_id, known.run_id)
            if fetched is None:
                raise _LostRun()
            flight.seq, flight.record = fetched
        # A Run this process stored with its claim in the create (the creator claimed its key):
        # the first attempt is claimed already, so no run.claimed is written for it.
        claimed = (claimed is not None and flight.record.holder == self.identity
                   and runcore.claimed_at_create(flight.record))
        if await self._refused_after_pause(flight):
            return
        if claimed:
            self._metrics.attempt(flight.record.trigger, takeover=False)
            await self._attempt(flight)
        while not flight.record.finished:
            record = flight.record
            if record.retry_at is not None and record.retry_at > self._clock.now():
                # as elapsed time, capped: a clock stepped back (or a takeover holder's clock
                # behind the writer's) must not hold the Run for the minutes of the step
                wait = (record.retry_at - self._clock.now()).total_seconds()
                await sleep_for(self._clock, min(wait, self._policy.cap))
            if self._stopping:
                # A drain lets calls in progress finish; it never starts a new attempt
                # (that would spend the retry budget on a shutdown). Hand the Run back.
                await self._hand_back(flight)
                return
            claim = runcore.claim(record, holder=self.identity, now=self._clock.now())
            await self._append(flight, claim)
            self._metrics.attempt(record.trigger, takeover=claim.takeover_from is not None)
            await self._attempt(flight)

    async def _refused_after_pause(self, flight: Held) -> bool:
        """Ask the firing gate before the first claim; record FAILED what it refuses.

        A replica frozen (or cut off) between its fresh Schedule read and the socket write can
        have its create stored long after a pause it could not see (see
        :mod:`nats_scheduler.runtime.firing`). Such a Run is recorded FAILED with a reason
        instead of reaching the handler.
        """
        record = flight.record
        assert record is not None
        if self._gate is None or await self._gate.may_start(
                record, vetted=record.run_id in self._vetted):
            return False
        log.warning("run %s reached the store after its schedule stopped; not starting it",
                    record.run_id)
        await self._append(flight, runcore.failed(
            record, error=NOT_STARTED_AFTER_PAUSE, now=self._clock.now(), actor=self.identity))
        self._metrics.run_failed(record.trigger, "paused")
        return True

    async def _attempt(self, flight: Held) -> None:
        """One attempt: start_session, store it, admit_turn, store it; or record the failure."""
        assert flight.record is not None
        record = flight.record
        called = self._clock.now()
        if record.due_at is not None and record.attempts == 1 and record.session_id is None:
            self._metrics.fire_lateness("started", record.due_at, called)
        try:
            session_id = await self._call(self._handler.start_session,
                                          runcore.invocation(flight.record), flight)
            if flight.record.session_id is None:
                await self._append(flight, runcore.session_started(
                    flight.record, session_id=session_id, now=self._clock.now(),
                    actor=self.identity, started_at=called))
            turn_id = await self._call(self._handler.admit_turn,
                                       runcore.invocation(flight.record), flight)
            await self._append(flight, runcore.dispatched(
                flight.record, turn_id=turn_id, now=self._clock.now(), actor=self.identity))
            self._metrics.run_dispatched(record.trigger)
        except RunPermanentError as exc:
            reason = runcore.describe_failure(exc)
            await self._append(flight, runcore.failed(
                flight.record, error=reason, now=self._clock.now(), actor=self.identity))
            self._metrics.run_failed(record.trigger, "permanent")
        except (_LostRun, Conflict, SchedulerError):
            raise
        except Exception as exc:
            await self._after_transient(flight, exc)

    async def _after_transient(self, flight: Held, exc: Exception) -> None:
        assert flight.record is not None
        timed_out = isinstance(exc, TimeoutError)
        reason = runcore.describe_failure(exc, timed_out=timed_out)
        now = self._clock.now()
        delay = self._policy.delay(flight.record.attempts)
        if self._policy.exhausted(flight.record, now, delay):
            error = f"gave up after {flight.record.attempts} attempts; last: {reason}"
            await self._append(flight, runcore.failed(
                flight.record, error=error, now=now, actor=self.identity))
            self._metrics.run_failed(flight.record.trigger, "exhausted")
            return
        await self._append(flight, runcore.attempt_failed(
            flight.record, error=reason, retry_at=now + timedelta(seconds=delay), now=now,
            actor=self.identity))
        self._metrics.retry(flight.record.trigger)

    async def _call(
        self,
        method: Callable[[RunInvocation], Awaitable[str]],
        invocation: RunInvocation,
        flight: Held,
    ) -> str:
        async with self._calls:  # the setting bounds handler calls, not the bookkeeping
            flight.in_call = True
            try:
                result = await self._deadlines.call(method(invocation), self._call_timeout)
            finally:
                flight.in_call = False
        if flight.lost:
            raise _LostRun()
        if not isinstance(result, str) or not result:
            raise ValueError(f"the handler returned {type(result).__name__}, not an ID")
        return result

    async def _append(self, flight: Held, event: RunEventType) -> None:
        """Append on the last sequence this holder saw, and only while it holds the lease.

        A holder that was paused or starved past its lease's expiry re-proves ownership with
        a CAS renewal first, so once another process took the lease it writes nothing more.
        Whatever could slip between that check and the write is refused by the Run's
        sequence as soon as the new holder's ``run.claimed`` is stored (docs/design.md,
        "A single writer per Run").
        """
        if flight.lost:
            raise _LostRun()
        if self._clock.now() >= flight.lease.value.expires_at and not await self._held.renew_once(
            flight
        ):
            raise _LostRun()
        flight.seq = await self._runlog.append(flight.seq, event)
        flight.record = event.run

    async def _hand_back(self, flight: Held) -> None:
        """At a drain: mark the Run released so any replica resumes it at once."""
        record = flight.record
        if record is None or record.finished:
            return
        if self._clock.now() >= flight.lease.value.expires_at:
            return  # not ours for sure any more: its expiry hands it over anyway
        event = runcore.released(record, reason="the process holding it stopped",
                                 now=self._clock.now(), actor=self.identity)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.shield(self._runlog.append(flight.seq, event)), 2.0)
