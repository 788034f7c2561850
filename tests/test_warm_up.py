"""The background warm-up of a starting replica: each deployment's newest Run, read into the
views' summaries, even when the first attempt fails (the store unanswered while this
replica's event loop was busy with a large load)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import nats.errors
import pytest

from nats_scheduler.jetstream.history import RunHistory
from nats_scheduler.jetstream.leases import Leases
from nats_scheduler.runtime import warm_up
from nats_scheduler.seam import EnqueueRequest, RunPayload, RunState, Schedule, Trigger
from tests.harness.servers import unique_prefix
from tests.providers import eventually, running

pytestmark = pytest.mark.anyio

FAR = f"0 0 1 {(datetime.now(UTC).month + 5) % 12 + 1} *"
"""Due once a year, half a year from now: the test's Run is a Run now, made by hand."""


async def test_a_warm_up_whose_reads_failed_is_tried_again(
    nats_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replica started after a Run finished, once the Run's key has expired, reads it into
    its deployment's summary only through the warm-up (its Run feed begins at its start).
    The warm-up's first read fails as a store that did not answer in time does; the warm-up
    is tried again, the summary names the Run, and ``warmed`` is set only then."""
    prefix = unique_prefix()
    async with running(nats_url, prefix) as maker:
        await maker.apply(Schedule("warm", "warm", FAR, "UTC", True,
                                   RunPayload("agent:test", "summarise"), 1))
        made = await maker.enqueue(EnqueueRequest("warm", Trigger.RUN_NOW))

        async def finished() -> bool:
            run = await maker.get_run(made.run_id)
            return run is not None and run.state is RunState.DISPATCHED

        await eventually(finished)
        await maker.wait_idle(timeout=30)

    async def none_open(self: Leases) -> dict[str, Any]:
        return {}  # its key gone, as a minute after the Run (else read as an open Run)

    monkeypatch.setattr(Leases, "open_runs", none_open)

    failed: list[int] = []
    latest = RunHistory.latest

    async def failing_once(self: RunHistory, deployment_ids: Any) -> Any:
        if not failed:
            failed.append(1)
            raise nats.errors.TimeoutError
        return await latest(self, deployment_ids)

    monkeypatch.setattr(RunHistory, "latest", failing_once)
    monkeypatch.setattr(warm_up, "WARM_UP_RETRY_SECONDS", (0.05,))
    async with running(nats_url, prefix) as fresh:
        assert fresh.runtime is not None
        await asyncio.wait_for(fresh.runtime.warmed.wait(), 30)
        assert failed == [1]
        last = fresh.ledger.summary("warm").last
        assert last is not None and last.run_id == made.run_id
