"""Retries of the in-memory store's transient failures, as the JetStream store retries its own.

An operation that meets :class:`~.store.StoreDown` is tried again with a growing pause until
its budget (``retry_seconds`` of the event loop's clock) is spent; then the caller hears
``SchedulerUnavailable`` in AstraBox's words, as from the real store.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from ..seam import SchedulerUnavailable
from .store import StoreDown

T = TypeVar("T")

FIRST_PAUSE = 0.05
MAX_PAUSE = 1.0


def unavailable(what: str, cause: BaseException | None = None) -> SchedulerUnavailable:
    error = SchedulerUnavailable(f"the scheduler store is unavailable: {what}")
    error.__cause__ = cause
    return error


async def retrying(what: str, op: Callable[[], Awaitable[T]], retry_seconds: float) -> T:
    """``op()``, tried again through StoreDown for ``retry_seconds``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + retry_seconds
    pause = FIRST_PAUSE
    while True:
        try:
            return await op()
        except StoreDown as exc:
            if loop.time() + pause > deadline:
                raise unavailable(what, exc) from exc
            await asyncio.sleep(pause)
            pause = min(pause * 2, MAX_PAUSE)
