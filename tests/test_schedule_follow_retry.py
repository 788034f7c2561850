"""A replica whose first attempts to follow the Schedules go unanswered still becomes ready.

Under two test workers on two cores, creating the Schedule follower's consumer once took
more than its 30 s; since the Schedules load after ``start()`` returned, nothing asked again
and the replica never fired. Here the first two attempts fail with a time-out (the
follower is ours; the server is real): the replica asks again, loads the Schedule stored
before it started, and fires it.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from nats_scheduler.jetstream.follower import Follower
from nats_scheduler.names import Names
from nats_scheduler.runtime import readiness
from nats_scheduler.seam import RunPayload, Schedule
from tests.harness.servers import unique_prefix
from tests.providers import running

pytestmark = pytest.mark.anyio


async def test_the_schedules_are_followed_after_unanswered_attempts(
        nats_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    prefix = unique_prefix()
    schedule = Schedule("dep-retry", "Retry", "0 3 * * *", "UTC", True,
                        RunPayload("agent/etl", "load"), 1)
    async with running(nats_url, prefix) as first:
        await first.apply(schedule)

    monkeypatch.setattr(readiness, "SUBSCRIBE_BACKOFF_FIRST", 0.05)
    unanswered = {"left": 2}
    real = Follower.subscribe
    schedules_stream = Names(prefix).schedules_stream

    async def subscribe(self: Follower) -> None:
        if self.stream == schedules_stream and unanswered["left"]:
            unanswered["left"] -= 1
            raise TimeoutError
        await real(self)

    monkeypatch.setattr(Follower, "subscribe", subscribe)
    async with running(nats_url, prefix) as second:
        await second.until_ready()
        assert unanswered["left"] == 0
        assert second.schedules.get("dep-retry") is not None
        run = await second.fire_due("dep-retry", datetime(2031, 1, 1, 3, tzinfo=UTC))
        assert run is not None and run.deployment_id == "dep-retry"

