"""A replica started beside one that just died: what bounds the next boundary's lateness.

The newcomer counts the dead replica live until its key is ``WINDOW_BEATS`` beats old
(``jetstream/presence.py``). A due time in that window whose owner is the dead one is left
to it while it counts as live; the newcomer looks again every ``OWNER_GRACE_SECONDS`` and
fires it at the first look after the dead one dropped out; once it has, every due time is
the newcomer's and fires at once. So a boundary right after a death is at most the window
plus one grace late for the dead one's share, and on time for the rest
(docs/architecture.md, "One clock: the store's").

The dead replica is a key the test keeps putting (a live replica's beat) until the newcomer
counts it, then stops putting (the kill); the newcomer's ticker runs on a ManualClock, so
the grace is the clock's, not a wait.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime, timedelta

import msgspec
import pytest

from nats_scheduler import ManualClock
from nats_scheduler.core.ownership import owner, owner_key
from nats_scheduler.jetstream.presence import PresenceValue
from nats_scheduler.names import Names, scheduled_run_id
from nats_scheduler.runtime.ticker import OWNER_GRACE_SECONDS
from nats_scheduler.seam import RunPayload, Schedule
from nats_scheduler.testing.handler import RecordingRunHandler
from tests.harness.servers import connect_fast, unique_prefix
from tests.providers import eventually, running

pytestmark = pytest.mark.anyio

T0 = datetime(2031, 7, 1, 9, 59, 50, tzinfo=UTC)
DUE = datetime(2031, 7, 1, 10, 0, tzinfo=UTC)
NEXT = DUE + timedelta(minutes=1)
BEAT = 0.3
"""Seconds between the dead replica's puts while it lives (faster than a real beat)."""


async def test_the_dead_owners_share_waits_until_it_left_then_every_due_time_fires_at_once(
    nats_url: str,
) -> None:
    prefix = unique_prefix()
    names = Names(prefix)
    clock = ManualClock(T0)
    deployments = [f"every-{i}" for i in range(24)]
    nc = await connect_fast(nats_url)
    beating: asyncio.Task[None] | None = None
    try:
        async with running(nats_url, prefix, RecordingRunHandler(), clock=clock) as newcomer:
            await newcomer.until_ready()
            runtime = newcomer.runtime
            assert runtime is not None and runtime.presence is not None
            presence = runtime.presence
            kv = await nc.jetstream().key_value(names.replicas_bucket)
            key = names.replica_key("dead")

            value = msgspec.json.encode(PresenceValue(identity="dead", started_at=T0,
                                                      beat_at=T0))  # as a replica writes it

            async def beat() -> None:
                while True:
                    await kv.put(key, value)
                    await asyncio.sleep(BEAT)  # the dead replica's beat interval, not a wait

            beating = asyncio.create_task(beat())
            await eventually(lambda: set(presence.live()) == {"dead", newcomer.identity},
                             timeout=10)
            for deployment in deployments:
                await newcomer.apply(Schedule(deployment, deployment, "* * * * *", "UTC", True,
                                              RunPayload("t", deployment), 1))
            assert newcomer.ticker is not None
            await eventually(lambda: newcomer.ticker is not None
                             and newcomer.ticker.planned == len(deployments), timeout=10)
            members = presence.live()
            theirs = {d for d in deployments if owner(members, owner_key(d, DUE)) == "dead"}
            assert 0 < len(theirs) < len(deployments), "both own part of the minute"

            def stored(due: datetime) -> set[str]:
                return {d for d in deployments
                        if newcomer.ledger.get(scheduled_run_id(d, due)) is not None}

            # the kill: its key stops changing, and it is still counted for a window
            beating.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beating
            clock.set(DUE + timedelta(seconds=0.05))
            await eventually(lambda: stored(DUE) >= set(deployments) - theirs, timeout=20)
            assert stored(DUE) == set(deployments) - theirs, "the grace is the ticker's clock's"
            # the dead one's share: left to it while it counts as live, fired by the
            # newcomer at the first look (every grace) after it dropped out
            await eventually(lambda: presence.live() == (newcomer.identity,), timeout=10)
            clock.set(DUE + timedelta(seconds=2 * OWNER_GRACE_SECONDS + 0.1))
            await eventually(lambda: stored(DUE) == set(deployments), timeout=20)
            # the dead one is gone: the next boundary fires whole at once, the clock
            # stays inside the grace
            clock.set(NEXT + timedelta(seconds=0.05))
            await eventually(lambda: stored(NEXT) == set(deployments), timeout=20)
            assert clock.now() < NEXT + timedelta(seconds=OWNER_GRACE_SECONDS)
            for deployment in deployments:
                runs = await newcomer.list_runs(deployment)
                assert sorted(r.run_id for r in runs) == sorted(
                    scheduled_run_id(deployment, due) for due in (DUE, NEXT))
            await newcomer.wait_idle(timeout=30)
    finally:
        if beating is not None:
            beating.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beating
        await nc.close()
