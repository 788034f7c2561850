"""Handler calls waited for with a timeout, on one table and one timer
(``runtime/deadlines.py``), on the simulation's virtual-time loop: exact instants, no sleeps."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest

from nats_scheduler.runtime.deadlines import RESOLUTION, Deadlines
from nats_scheduler.simulation.loop import VirtualTimeLoop

T = TypeVar("T")


class _CountingLoop(VirtualTimeLoop):
    """Counts its steps."""

    steps = 0

    def _run_once(self) -> None:
        self.steps += 1
        super()._run_once()


def _run(coro: Coroutine[Any, Any, T]) -> tuple[T, _CountingLoop]:
    loop = _CountingLoop()
    try:
        return loop.run_until_complete(coro), loop
    finally:
        loop.close()


async def _answer(after: float, value: str) -> str:
    await asyncio.sleep(after)
    return value


def test_a_call_in_time_returns_its_result_and_leaves_no_timer() -> None:
    async def scenario() -> tuple[str, int]:
        deadlines = Deadlines()
        result = await deadlines.call(_answer(0.2, "done"), timeout=30.0)
        loop = asyncio.get_running_loop()
        armed = sum(1 for entry in loop._scheduled  # type: ignore[attr-defined]
                    if not entry[2].cancelled())
        return result, armed

    (result, armed), _ = _run(scenario())
    assert result == "done" and armed == 0  # an idle process runs no timer at all


def test_a_hung_call_times_out_at_its_deadline_at_most_a_resolution_late() -> None:
    async def scenario() -> list[float]:
        deadlines, loop = Deadlines(), asyncio.get_running_loop()
        began, ended = loop.time(), []

        async def one(timeout: float) -> None:
            with pytest.raises(TimeoutError):
                await deadlines.call(_answer(600.0, "never"), timeout=timeout)
            ended.append(loop.time() - began)

        # the later deadline first: the earlier one arms an earlier look
        await asyncio.gather(one(30.0), one(1.01), one(1.02))
        return sorted(ended)

    ended, loop = _run(scenario())
    assert [round(e, 9) for e in ended] == [1.05, 1.05, 30.0]  # on the resolution's grid
    assert RESOLUTION == 0.05
    # three calls' 30 s: a few dozen steps (the calls, three looks), not 600 looks
    assert loop.steps < 60, loop.steps


def test_calls_answered_before_their_deadline_never_time_out() -> None:
    async def scenario() -> list[str]:
        deadlines = Deadlines()
        return list(await asyncio.gather(*(
            deadlines.call(_answer(0.01 * i, f"call {i}"), timeout=0.5 + 0.01 * i)
            for i in range(50))))

    results, _ = _run(scenario())
    assert results == [f"call {i}" for i in range(50)]
