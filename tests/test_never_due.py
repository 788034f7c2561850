"""A cron with no due time ever (``0 0 31 2 *``) is refused by ``apply`` and ``reconcile``
with a message naming the fields, and nothing of it is written (``reconcile`` applies the
valid Schedules beside it); a leap day stays valid."""

from __future__ import annotations

import pytest

from nats_scheduler.provider import NatsSchedulerProvider
from nats_scheduler.seam import InvalidSchedule, RunPayload, Schedule
from tests.harness.servers import unique_prefix
from tests.providers import running

pytestmark = pytest.mark.anyio

NEVER_DUE = {
    "0 0 31 2 *": "day 31 never occurs in February",
    "0 0 30 2 *": "day 30 never occurs in February",
    "0 0 31 4,6,9,11 *": "day 31 never occurs in April, June, September or November",
}


def schedule(deployment_id: str, cron: str) -> Schedule:
    return Schedule(deployment_id, deployment_id, cron, "UTC", True, RunPayload("t", "p"), 1)


async def stored_events(provider: NatsSchedulerProvider) -> int:
    js, names = provider.store.js, provider.store.names
    return (await js.stream_info(names.schedules_stream)).state.messages


@pytest.mark.parametrize("cron", sorted(NEVER_DUE))
async def test_apply_and_reconcile_refuse_a_cron_that_is_never_due(nats_url: str,
                                                                   cron: str) -> None:
    async with running(nats_url, unique_prefix()) as provider:
        before = await stored_events(provider)
        with pytest.raises(InvalidSchedule) as info:
            await provider.apply(schedule("never", cron))
        message = str(info.value)
        assert NEVER_DUE[cron] in message
        assert "day-of-month field" in message and "month field" in message
        assert "'never'" in message  # the deployment it is about
        # reconcile refuses it alone: the valid Schedule beside it is written
        await provider.reconcile([schedule("fine", "0 3 * * *"), schedule("never", cron)])
        assert provider.runtime is not None
        [refusal] = provider.runtime.refusals.listed()
        assert (refusal.deployment_id, refusal.kind) == ("never", "invalid")
        assert NEVER_DUE[cron] in refusal.reason
        assert await stored_events(provider) == before + 1
        assert provider.schedules.get("never") is None
        assert provider.schedules.get("fine") is not None


async def test_a_leap_day_cron_is_accepted(nats_url: str) -> None:
    async with running(nats_url, unique_prefix()) as provider:
        await provider.apply(schedule("leap", "0 0 29 2 *"))
        await provider.reconcile([schedule("leap", "0 0 29 2 *"),
                                  schedule("last", "0 0 31 1,2 *")])
        assert provider.schedules.get("leap") is not None
        assert provider.schedules.get("last") is not None
