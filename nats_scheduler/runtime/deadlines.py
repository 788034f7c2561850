"""Waiting for many handler calls at once, each with a timeout, on one timer.

``asyncio.wait({call}, timeout=...)`` arms a timer, a waiter future and a set per call; with
thousands of Runs started in one second that bookkeeping cost more CPU than the handler
calls themselves (bench/firing.py under py-spy). :class:`Deadlines` keeps one table of
waiters and one task that wakes the overdue ones a few times a second, and only while some
call is pending (an idle process runs no timer at all).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

T = TypeVar("T")

RESOLUTION = 0.05
"""Seconds between looks at the table: a call times out at most this late."""


class Deadlines:
    """``wait(future, timeout)`` for many futures at once."""

    def __init__(self, resolution: float = RESOLUTION) -> None:
        self._resolution = resolution
        self._pending: dict[asyncio.Future[bool], float] = {}
        self._ticker: asyncio.Task[None] | None = None

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
        self._pending[waiter] = loop.time() + timeout
        if self._ticker is None or self._ticker.done():
            self._ticker = loop.create_task(self._tick(), name="handler call timeouts")
        try:
            return await waiter
        finally:
            self._pending.pop(waiter, None)
            future.remove_done_callback(wake)

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

    async def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        while self._pending:
            await asyncio.sleep(self._resolution)
            now = loop.time()
            for waiter, deadline in list(self._pending.items()):
                if deadline <= now and not waiter.done():
                    waiter.set_result(False)


def _forget_outcome(call: asyncio.Future[Any]) -> None:
    """Retrieve an abandoned call's outcome, so its late failure is not logged as lost."""
    if not call.cancelled():
        call.exception()
