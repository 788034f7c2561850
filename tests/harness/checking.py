"""The invariant checker, wired for this repo's tests and benchmarks.

Every fault scenario ends the same way: read the whole stored history of its prefix, give
the checker (:mod:`nats_scheduler.admin.invariants`) what the test knows besides (the shared
handler's record of calls, the replicas' liveness windows, the due times it fired), and
assert zero violations. :func:`check_store` does that in one call; :func:`handler_calls`
turns the :class:`~.shared_handler.SqliteRunHandler` record into the checker's calls.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime

from nats_scheduler.admin.invariants import (
    HandlerCall,
    History,
    Options,
    Report,
    Window,
    check,
)
from nats_scheduler.admin.stored_events import load_history
from nats_scheduler.projections.ledger import Ledger

from .servers import connect_fast
from .shared_handler import SqliteRunHandler

__all__ = ["check_store", "handler_calls", "read_history"]


async def read_history(url: str, prefix: str, timeout: float = 30.0) -> History:
    """The whole stored history, read again until the store answers (a cluster healing
    from a fault may re-elect leaders for a few seconds after the scenario ended)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        try:
            nc = await connect_fast(url, allow_reconnect=True)
            try:
                return await load_history(nc, prefix, timeout=10.0)
            finally:
                await nc.close()
        except Exception:
            if loop.time() > deadline:
                raise
            await asyncio.sleep(0.2)


def handler_calls(handler: SqliteRunHandler) -> list[HandlerCall]:
    """Every call the shared handler recorded; ok ``start_session`` calls with their Session."""
    sessions = handler.sessions()
    return [
        HandlerCall(
            at=datetime.fromtimestamp(call.at, UTC), method=call.method, run_id=call.run_id,
            session_id=call.session_id, process=call.process, outcome=call.outcome,
            returned=(sessions.get(call.run_id)
                      if call.method == "start_session" and call.outcome == "ok" else None),
        )
        for call in handler.calls()
    ]


async def check_store(
    url: str,
    prefix: str,
    *,
    handler: SqliteRunHandler | None = None,
    windows: Sequence[Window] = (),
    expected: Iterable[tuple[str, datetime]] | None = None,
    ledger: Ledger | None = None,
    grace: float = 30.0,
    lease_seconds: float = 5.0,
    margin: float = 2.0,
    ticker_only: bool = True,
    skew: float = 0.0,
) -> Report:
    """The checker's report on everything stored under ``prefix`` (see the module doc)."""
    history = await read_history(url, prefix)
    calls = handler_calls(handler) if handler is not None else None
    return check(history, Options(calls=calls, windows=windows, expected=expected,
                                  ledger=ledger, grace=grace, lease_seconds=lease_seconds,
                                  margin=margin, ticker_only=ticker_only, skew=skew))
