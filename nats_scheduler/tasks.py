"""Stopping background tasks for sure, within a bound.

Python 3.11's ``asyncio.wait_for`` can lose a cancellation that arrives just as the call it
waits for completes (fixed in 3.12): the task then goes on as if nothing happened. A loop
built on ``wait_for`` (a heartbeat, nats-py's requests under a sweep) that loses the
cancellation of a stop would run for ever, and a stop awaiting it would never return.
:func:`cancel_and_wait` cancels again whatever is still running, a few times a second, and
gives up at its timeout instead of hanging.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

RECANCEL_SECONDS = 0.5
"""How long a cancelled task gets to end before it is cancelled again."""


async def cancel_and_wait(tasks: Iterable[asyncio.Task[Any]], *,
                          timeout: float = 5.0) -> set[asyncio.Task[Any]]:
    """Cancel ``tasks`` and wait until they end; returns those still running at ``timeout``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    pending = {task for task in tasks if not task.done()}
    while pending:
        for task in pending:
            task.cancel()
        remaining = deadline - loop.time()
        if remaining <= 0:
            break
        _, pending = await asyncio.wait(pending, timeout=min(RECANCEL_SECONDS, remaining))
    return pending
