"""The start-up's two gates, and following the Schedules patiently until the store answers.

A replica's start-up loads the Schedule table in the background (``Runtime._become_ready``),
then joins the live replicas and plans every Schedule. Two gates open along the way:

- **the table loaded**: every Schedule stored before ``start()`` is in the table. Schedule
  changes (``reconcile``, ``apply``, ``delete``, holds and releases) decide on the table, so
  they go ahead from here: AstraBox's restart does not wait for joining and planning, which
  only firing needs (about 3 s of a restart at a million Schedules).
- **ready**: joined and planned. Firing and the admin service's answers wait for it.

A caller waiting at either gate is told ``SchedulerUnavailable`` when the load failed, or
made no progress for ``READY_PATIENCE_SECONDS``: never kept waiting for ever.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from ..ports.feeds import Feed
from ..seam import SchedulerConfigurationError, SchedulerUnavailable

log = logging.getLogger(__name__)

SUBSCRIBE_BACKOFF_FIRST = 1.0
"""The first wait before asking again to follow the Schedules; each next one doubles."""

SUBSCRIBE_BACKOFF_MAX = 30.0
"""The longest wait between two attempts to follow the Schedules."""

READY_PATIENCE_SECONDS = 30.0
"""How long a caller waits for the Schedule table without the load making any progress
before it hears the scheduler is unavailable (a load that keeps moving is waited for)."""


class Readiness:
    """The two gates of one start-up and what went wrong with it, if anything.

    ``position``: how far the Schedule follower has applied (progress while it loads).
    """

    def __init__(self, position: Callable[[], int]) -> None:
        self._position = position
        self.table_loaded = asyncio.Event()
        """Set once the Schedule table holds every stored Schedule."""
        self.ready = asyncio.Event()
        """Set once the replica has joined and planned every Schedule as well."""
        self.failed: BaseException | None = None
        """Why the start-up failed (then neither gate opens)."""

    async def until(self, gate: asyncio.Event) -> None:
        """Wait for ``gate`` (at once when it is open); SchedulerUnavailable when the load
        failed or makes no progress for ``READY_PATIENCE_SECONDS``."""
        progress = -1
        while not gate.is_set():
            if self.failed is not None:
                raise SchedulerUnavailable(
                    "the scheduler could not load its schedules; see the scheduler's log")
            seen = self._position()  # its feed is made again after a checkpoint
            if seen <= progress:
                raise SchedulerUnavailable(
                    "the scheduler store is unavailable: loading the schedules timed out")
            progress = seen
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(gate.wait(), READY_PATIENCE_SECONDS)


async def subscribe_patiently(follower: Feed) -> None:
    """Follow the Schedules, asking again (1 s, doubling to 30 s) while the store does not
    answer: a consumer created under load once took more than its 30 s, and a replica that
    gave up then never fired at all. Configuration errors are not retried."""
    wait = SUBSCRIBE_BACKOFF_FIRST
    while True:
        try:
            await follower.subscribe()
            return
        except (SchedulerConfigurationError, asyncio.CancelledError):
            raise
        except Exception as exc:
            log.warning("could not follow the schedules yet (%s); asking again in %.0f s",
                        str(exc) or type(exc).__name__, wait)
            await asyncio.sleep(wait)
            wait = min(wait * 2, SUBSCRIBE_BACKOFF_MAX)


async def until_caught_up(follower: Feed) -> None:
    """Wait for the Schedule follower to apply every event stored when it subscribed,
    however long a large load takes (a warning each ``READY_PATIENCE_SECONDS`` without)."""
    while True:
        try:
            await follower.caught_up(READY_PATIENCE_SECONDS)
            return
        except TimeoutError:
            log.warning("loading the schedules makes no progress; still waiting")
