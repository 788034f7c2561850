"""Waiting for many handler calls at once, each with a timeout, on one timer.

``asyncio.wait({call}, timeout=...)`` arms a timer, a waiter future and a set per call; with
thousands of Runs started in one second that bookkeeping cost more CPU than the handler
calls themselves (bench/firing.py under py-spy). :class:`Deadlines` keeps one table of
waiters and one timer, armed for the earliest deadline rounded up to the resolution (the
calls due within one resolution time out together), and only while some call is pending (an
idle process runs no timer at all). A hung call costs one look at its deadline, not a look
every resolution until then.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable
from typing import Any, TypeVar

T = TypeVar("T")

RESOLUTION = 0.05
"""A call times out at most this late: the table is looked at on a grid of this step."""


class Deadlines:
    """``wait(future, timeout)`` for many futures at once."""

    def __init__(self, resolution: float = RESOLUTION) -> None:
        self._resolution = resolution
        self._pending: dict[asyncio.Future[bool], float] = {}
        self._timer: asyncio.TimerHandle | None = None
        """The next look at the table (None: no call pending)."""

    async def wait(self, future: asyncio.Future[Any], timeout: float) -> bool:
        """Wait until ``future`` is done (True) or ``timeout`` seconds passed (False).

        Never cancels ``future``: what to do with an overdue call is the caller's choice.
        """
        if future.done():
            return True
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[bool] = loop.create_future()

        def wake(_: asyncio.Future[Any]) -> None:
            if not waiter.done():
                waiter.set_result(True)

        future.add_done_callback(wake)
        deadline = loop.time() + timeout
        self._pending[waiter] = deadline
        self._arm(loop, deadline)
        try:
            return await waiter
        finally:
            self._pending.pop(waiter, None)
            future.remove_done_callback(wake)
            if not self._pending and self._timer is not None:
                self._timer.cancel()
                self._timer = None

    async def call(self, awaitable: Awaitable[T], timeout: float) -> T:
        """Await ``awaitable`` for at most ``timeout`` seconds; TimeoutError after that.

        Not ``asyncio.wait_for``: it waits for the cancelled call to end, and a handler that
        swallows its cancellation would hold its Run for ever (tests/faults/
        test_faults_handler.py). A call past the timeout is cancelled and left behind.
        """
        call = asyncio.ensure_future(awaitable)
        try:
            await self.wait(call, timeout)
        finally:
            if not call.done():
                call.cancel()
                call.add_done_callback(_forget_outcome)
        if not call.done():
            raise TimeoutError()
        return call.result()

    def _arm(self, loop: asyncio.AbstractEventLoop, deadline: float) -> None:
        """Look at the table at ``deadline`` rounded up to the resolution, unless a look at
        or before then is armed already."""
        at = max(deadline, math.ceil(deadline / self._resolution) * self._resolution)
        timer = self._timer
        if timer is not None:
            if timer.when() <= at:
                return
            timer.cancel()
        self._timer = loop.call_at(at, self._look, loop)

    def _look(self, loop: asyncio.AbstractEventLoop) -> None:
        """Time out the overdue calls; armed again for the earliest one still pending."""
        self._timer = None
        now = loop.time()
        first: float | None = None
        for waiter, deadline in list(self._pending.items()):
            if waiter.done():
                continue
            if deadline <= now:
                waiter.set_result(False)
            elif first is None or deadline < first:
                first = deadline
        if first is not None:
            self._arm(loop, first)


def _forget_outcome(call: asyncio.Future[Any]) -> None:
    """Retrieve an abandoned call's outcome, so its late failure is not logged as lost."""
    if not call.cancelled():
        call.exception()
