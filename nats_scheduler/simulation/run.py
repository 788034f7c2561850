"""Run one seed of the simulation on its own virtual-time event loop (:mod:`.loop`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from ..admin.invariant_report import Violation
from .cluster import owner_task_factory
from .loop import VirtualTimeLoop
from .mutations import switched_on
from .scenario import Outcome, Scenario


def run_seed(seed: int, *, replicas: int = 3, hours: float = 1.0, schedules: int = 100,
             trace: bool = False, mutation: str | None = None,
             foreign: bool = True) -> Outcome:
    """Simulate ``seed`` (a fresh loop, store and cluster) and judge it; ``foreign``: with
    the foreign messages of :mod:`.foreign_faults` (off: a seed's run as before them)."""
    loop = VirtualTimeLoop()
    loop.set_task_factory(owner_task_factory)  # type: ignore[arg-type]
    logging.disable(logging.CRITICAL)  # replicas log their faults: the verdict is the output
    try:
        with switched_on(mutation):
            return loop.run_until_complete(_simulate(
                seed, replicas=replicas, hours=hours, schedules=schedules, trace=trace,
                foreign=foreign))
    except Exception as exc:  # the simulation itself failed: that seed's finding
        return Outcome(seed, hours, 0, 0, [Violation(
            "simulation", f"seed {seed}", f"{type(exc).__name__}: {exc}")])
    finally:
        _close(loop)
        logging.disable(logging.NOTSET)


async def _simulate(seed: int, **kwargs: object) -> Outcome:
    scenario = Scenario(seed, **kwargs)  # type: ignore[arg-type]
    return await scenario.run()


def _close(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel what is left (a crashed replica's stragglers) and close the loop."""
    pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for task in pending:
        task.cancel()
    if pending:
        with contextlib.suppress(Exception):
            loop.run_until_complete(asyncio.wait(pending, timeout=60.0))
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.close()
