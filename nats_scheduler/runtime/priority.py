"""Starts before bookkeeping: the work that leads to a ``start_session`` call goes first.

When thousands of Schedules share a due time, one process has thousands of Runs to store and
start at once, and for each started Run three more writes to make (its Session ID, its turn,
closing its key) plus an ``admit_turn`` call. All of it competes for one event loop. Left to
themselves the early Runs' bookkeeping delays the later Runs' starts, and every Run starts
late (bench/firing.py). :class:`StartsFirst` counts the work still heading for a first
``start_session`` (firings in progress, Runs not started yet); the bookkeeping after a start
waits while that count is above zero, at most ``max_defer`` seconds, so a steady stream of
new Runs can delay it but never starve it.
"""

from __future__ import annotations

import asyncio

from .deadlines import Deadlines

MAX_DEFER_SECONDS = 2.0
"""The longest the bookkeeping after a start waits for other Runs' starts."""


class StartsFirst:
    """Counts work heading for a start; lets the work after a start wait for it."""

    def __init__(self, deadlines: Deadlines, *, max_defer: float = MAX_DEFER_SECONDS) -> None:
        self._deadlines = deadlines
        self._max_defer = max_defer
        self._ahead = 0
        self._quiet: asyncio.Future[None] | None = None
        self._released = False

    @property
    def ahead(self) -> int:
        """Firings and Runs still heading for their first start."""
        return self._ahead

    def begin(self) -> None:
        """One more piece of work heading for a start."""
        self._ahead += 1

    def end(self) -> None:
        """One piece of work reached its start (or ended without one)."""
        self._ahead -= 1
        if self._ahead <= 0:
            self._ahead = 0
            self._wake()

    async def after_starts(self) -> None:
        """Wait until no work is heading for a start (at most ``max_defer`` seconds)."""
        if self._ahead == 0 or self._released:
            return
        if self._quiet is None or self._quiet.done():
            self._quiet = asyncio.get_running_loop().create_future()
        await self._deadlines.wait(self._quiet, self._max_defer)

    def release(self) -> None:
        """Stop deferring anything (a stop: what waits must finish before the drain ends)."""
        self._released = True
        self._wake()

    def _wake(self) -> None:
        if self._quiet is not None and not self._quiet.done():
            self._quiet.set_result(None)
