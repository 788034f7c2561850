"""Retrying transient store failures, and failing over to another server of a cluster.

One policy for every operation of the provider's :class:`~.store.Store`, so a leader
election (a few seconds of timeouts and "no quorum") is ridden out the same way everywhere
and whatever is left is turned into the seam's errors in one place (:mod:`.errors`).

Two ways to go through it:

* :meth:`Retrier.retrying` retries a transient failure for ``store_retry_seconds`` (long
  enough for a leader election), then raises SchedulerUnavailable.
* :meth:`Retrier.once` and :meth:`Retrier.note_results` make no retry and keep the client's
  own errors (for callers with their own answer to a failure: a lease renewal that must not
  block longer than one publish, a batch with a result per item), yet every answer and every
  silence they see still counts for failover.

Failover: a node partitioned from the rest of its cluster stays reachable, so the client
would stay on it while the other nodes may have a quorum (tests/faults/test_faults_cluster.py).
After :data:`FAILOVER_AFTER` seconds without a usable answer the store connects to another
server.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from nats.aio.client import Client

from ..seam import SchedulerError
from . import errors
from .errors import Conflict

log = logging.getLogger(__name__)

T = TypeVar("T")

FAILOVER_AFTER = 2.0
"""Seconds a server may leave the store unanswered before the store connects to another one
of the cluster (and the least time between two such switches)."""


class Retrier:
    """The retry budget and the failover watch of one connection.

    ``count_error`` hears of every failure :meth:`retrying` sees, by kind (``transient``:
    retried, ``unavailable``: raised, ``conflict``: a refused conditional append), for the
    provider's metrics (:mod:`nats_scheduler.runtime.metrics`); :meth:`once` counts nothing,
    as its callers count their own outcomes.
    """

    def __init__(self, nc: Client, retry_seconds: float,
                 count_error: Callable[[str], None] | None = None) -> None:
        self.nc = nc
        self.retry_seconds = retry_seconds
        self.count_error: Callable[[str], None] = count_error or (lambda _kind: None)
        self._failed_over_at = float("-inf")
        self._unanswered_since: float | None = None
        """When the connected server first left an operation unanswered, since its last answer."""

    async def retrying(
        self, what: str, op: Callable[[], Awaitable[T]], retry_seconds: float | None = None
    ) -> T:
        """Run ``op``, retrying transient failures; SchedulerUnavailable when time runs out.

        ``retry_seconds`` overrides the store's budget for this call (0: one attempt).
        """
        loop = asyncio.get_running_loop()
        budget = self.retry_seconds if retry_seconds is None else retry_seconds
        started = loop.time()
        deadline = started + budget
        delay = 0.05
        while True:
            try:
                result = await op()
            except Conflict:
                self.answered()
                self.count_error("conflict")
                raise
            except SchedulerError:
                raise
            except Exception as exc:
                await self.note_failure(exc, loop.time() - started)
                if not errors.is_transient(exc) or loop.time() + delay > deadline:
                    self.count_error("unavailable")
                    raise errors.unavailable(what, exc) from exc
                self.count_error("transient")
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
            else:
                self.answered()
                return result

    async def once(self, op: Callable[[], Awaitable[T]]) -> T:
        """Run ``op`` once: its result, or the client's own error, uncounted and unretried.

        A failure without an answer counts towards failover; an answer does not reset it
        (only :meth:`retrying` does): a server that answers some requests (reads from its
        own replica, say) while it cannot store must still be left. Failing over only
        schedules the reconnect, so this takes no longer than ``op``.
        """
        try:
            return await op()
        except Exception as exc:
            if not errors.is_conflict(exc):
                await self.note_failure(exc)
            raise

    async def note_results(self, results: Sequence[object]) -> None:
        """A batch's per-item outcome, for failover: a failure if no item got an answer and
        one went unanswered (an answer does not reset the watch: :meth:`once`)."""
        failures = [r for r in results if isinstance(r, BaseException)]
        if len(failures) < len(results) or any(errors.is_conflict(f) for f in failures):
            return
        unanswered = next((f for f in failures if errors.unanswered(f)), None)
        if unanswered is not None:
            await self.note_failure(unanswered)

    def answered(self) -> None:
        """The connected server answered an operation: it is not the one to leave."""
        self._unanswered_since = None

    async def note_failure(self, exc: BaseException, failing_for: float = 0.0) -> None:
        """Note an operation the server left without a usable answer; fail over after 2 s.

        2 s of one operation failing (``failing_for``), or 2 s in which no operation got an
        answer: a one-shot write (a scheduled Run's create) or a confirmation never lasts
        2 s on its own, yet a partitioned node leaves every operation unanswered
        (tests/faults/test_faults_cluster.py)."""
        if not errors.unanswered(exc):
            return
        now = asyncio.get_running_loop().time()
        if self._unanswered_since is None:
            self._unanswered_since = now
        await self._fail_over(max(failing_for, now - self._unanswered_since))

    async def _fail_over(self, failing_for: float) -> None:
        """Connect to another server when this one has not answered for a while.

        A node partitioned from the rest of the cluster stays reachable, so the client would
        stay on it; the others may have a quorum (tests/faults/test_faults_cluster.py).
        """
        now = asyncio.get_running_loop().time()
        if (failing_for < FAILOVER_AFTER or now - self._failed_over_at < FAILOVER_AFTER
                or len(self.nc.servers) < 2):
            return
        self._failed_over_at = now
        self._unanswered_since = None  # the next server gets its own 2 s
        log.warning("the connected server has not answered for %.1f s; trying another one",
                    failing_for)
        await self.nc.force_reconnect()
