"""The Runs this process holds a lease on, and the one loop that keeps their leases.

A held Run's lease is renewed by compare-and-set every third of its length until the
dispatcher gives it up; a renewal that finds the key written by someone else (or the lease
lapsed with the store unreachable) marks the Run lost and cancels its dispatch, so a holder
that was paused or cut off never calls the handler for it again (docs/architecture.md,
"4. Single writer, and the lease protocol").

One loop renews every held lease. It used to be a task per Run: in a busy minute most Runs
are dispatched in milliseconds, long before their first renewal, and creating, arming and
cancelling a task and a timer for each cost more CPU than the renewals themselves
(bench/firing.py under py-spy). The loop runs only while some Run is held; renewals that
fall due together are made together, and leave as one atomic batch
(``Store.publish_grouped``).
"""

from __future__ import annotations

import asyncio
import logging

from ..clock import Clock, elapsed_seconds, sleep_for
from ..core.events import RunRecord
from ..ports.leases import Lease, LeaseTable

log = logging.getLogger(__name__)

RENEWAL_LOOKS = 3
"""Looks per third of a lease the loop takes: a lease is renewed between two ninths and a
third of its length after it was taken or last renewed (never later than a third)."""


class Held:
    """The state of one Run this process is dispatching."""

    def __init__(self, lease: Lease, task: asyncio.Task[None], renew_at: float) -> None:
        self.lease = lease
        self.task = task
        """The dispatch, cancelled when the lease is lost."""
        self.renew_at = renew_at
        """When the lease is renewed next (:meth:`Holds.elapsed` seconds)."""
        self.renewing = asyncio.Lock()  # the renewer and a fenced append never race their CAS
        self.lost = False
        self.in_call = False
        self.seq = 0
        self.record: RunRecord | None = None


class Holds:
    """The Runs held here, by Run ID, and their lease renewals."""

    def __init__(self, leases: LeaseTable, clock: Clock) -> None:
        self._leases = leases
        self._clock = clock
        self._held: dict[str, Held] = {}
        self._renewer: asyncio.Task[None] | None = None

    def take(self, lease: Lease, task: asyncio.Task[None]) -> Held:
        """Hold ``lease`` for the dispatch ``task``; its first renewal is at most a third of
        a lease away."""
        held = Held(lease, task, self.elapsed() + self._interval())
        self._held[lease.run_id] = held
        if self._renewer is None or self._renewer.done():
            self._renewer = asyncio.create_task(self._renew_forever(), name="lease renewals")
        return held

    def drop(self, held: Held) -> None:
        """No longer renew ``held`` (its dispatch ended); the loop stops with the last one."""
        if self._held.get(held.lease.run_id) is held:
            del self._held[held.lease.run_id]
        if not self._held and self._renewer is not None:
            self._renewer.cancel()
            self._renewer = None

    def get(self, run_id: str) -> Held | None:
        return self._held.get(run_id)

    def run_ids(self) -> list[str]:
        return list(self._held)

    def elapsed(self) -> float:
        """Seconds renewals are timed by (:func:`~nats_scheduler.clock.elapsed_seconds`): a
        wall-clock step must neither stop the renewals of a live holder nor bunch them
        (tests/faults/test_faults_clock.py)."""
        return elapsed_seconds(self._clock)

    async def renew_once(self, held: Held) -> bool:
        """Extend the lease by CAS now; False (and ``lost``) once it is someone else's."""
        async with held.renewing:
            if held.lost:
                return False
            try:
                renewed = await self._leases.renew(held.lease)
            except Exception:
                if self._clock.now() < held.lease.value.expires_at:
                    return True  # store trouble; the lease still runs, try again later
                renewed = None
            if renewed is None:
                held.lost = True
                log.warning("lost the lease of run %s", held.lease.run_id)
                return False
            held.lease = renewed
            return True

    def _look(self) -> float:
        """Seconds between the loop's looks at the held leases."""
        return self._leases.lease_seconds / 3 / RENEWAL_LOOKS

    def _interval(self) -> float:
        """Seconds from a renewal to the look that makes the next: a look later it is at
        most a third of a lease."""
        return self._leases.lease_seconds / 3 - self._look()

    async def _renew_forever(self) -> None:
        while self._held:
            await sleep_for(self._clock, self._look())
            now = self.elapsed()
            due = [held for held in self._held.values() if held.renew_at <= now]
            if not due:
                continue
            results = await asyncio.gather(*(self._renew(held, now + self._interval())
                                              for held in due), return_exceptions=True)
            for result in results:  # never expected; logged, and the loop goes on for the rest
                if isinstance(result, Exception):
                    log.error("renewing a lease failed", exc_info=result)

    async def _renew(self, held: Held, next_at: float) -> None:
        held.renew_at = next_at
        if not await self.renew_once(held) and self._held.get(held.lease.run_id) is held:
            held.task.cancel()  # still dispatching: stop it (once it ended, nothing to stop)
