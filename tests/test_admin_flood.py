"""The admin service under a flood answers or sheds (issue 41), on a real server with a real
provider and its admin service.

2,000 concurrent requests spread over every read endpoint, each with a timeout: every one
gets an answer within it, a result or the busy answer (``unavailable``, ``retry_after``),
never silence. ``cluster.status`` callers share one fan-out. Before the change, nats-py ran
each endpoint's requests one at a time and most ``cluster.status`` callers timed out.

A busy answer reaches the command line and the console as its message; the client asks it
again twice, within its own timeout, and never reads the store instead.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import AsyncIterator

import nats.errors
import pytest

from nats_scheduler.admin.admission import (
    BUSY_MESSAGE,
    BUSY_RETRY_AFTER,
    ENDPOINT_LIMITS,
    EndpointGate,
    Firing,
    LoopShare,
    SingleFlight,
    charged,
)
from nats_scheduler.admin.api import AdminError, ErrorCode
from nats_scheduler.admin.client import BUSY_RETRIES, AdminClient
from nats_scheduler.names import SERVICE_NAME
from nats_scheduler.seam import RunPayload, Schedule
from tests.harness.servers import connect_fast, unique_prefix
from tests.test_admin_service import Admin, admin_on
from tests.test_hold_until import cli

pytestmark = pytest.mark.anyio

FLOOD = 2000
TIMEOUT = 10.0
"""Each request's timeout: generous for a 2-core CI; before the change, ``cluster.status``
callers queued one fan-out after another (0.2 s each) far past it."""


@pytest.fixture
async def admin(nats_url: str) -> AsyncIterator[Admin]:
    async with admin_on(nats_url, unique_prefix()) as ctx:
        for n in range(20):
            await ctx.provider.apply(Schedule(f"dep-{n:02d}", f"Report {n}", f"{n} 9 * * *",
                                              "UTC", True, RunPayload("agent", "report"), 1))
        yield ctx


def read_requests(run_id: str) -> list[tuple[str, dict[str, object]]]:
    """One request of every read endpoint (the flood repeats them)."""
    return [("schedules.list", {}), ("schedules.get", {"deployment_id": "dep-03"}),
            ("schedules.explain", {"deployment_id": "dep-03"}), ("schedules.load", {}),
            ("runs.list", {"deployment_id": "dep-03"}), ("runs.get", {"run_id": run_id}),
            ("cluster.status", {}), ("health", {})]


async def stats(admin: Admin) -> dict[str, int]:
    """Endpoint name -> requests received, from micro's own stats."""
    msg = await admin.nc.request(f"$SRV.STATS.{SERVICE_NAME}.{admin.service.service.id}", b"",
                                 timeout=5)
    return {e["name"]: e["num_requests"] for e in json.loads(msg.data)["endpoints"]}


async def test_two_thousand_concurrent_reads_each_get_an_answer_within_their_timeout(
        admin: Admin) -> None:
    run = await admin.client.run_now("dep-03", by="alice")
    kinds = read_requests(run.run_id)
    assert {endpoint for endpoint, _ in kinds} | {"schedules.hold", "schedules.release",
                                                  "schedules.hold_bulk",
                                                  "schedules.release_bulk", "runs.run_now",
                                                  "runs.replay"} == set(
        admin.service.endpoints())  # every read endpoint is in the flood
    connections = [await connect_fast(admin.nc.connected_url.geturl())  # type: ignore[union-attr]
                   for _ in range(4)]
    outcomes: Counter[tuple[str, str]] = Counter()

    async def one(n: int) -> None:
        endpoint, body = kinds[n % len(kinds)]
        nc = connections[n % len(connections)]
        subject = f"{admin.prefix}.admin.{endpoint}"
        try:
            msg = await nc.request(subject, json.dumps(body).encode(), timeout=TIMEOUT)
        except nats.errors.NoRespondersError:
            outcomes[(endpoint, "no responders")] += 1
            return
        except nats.errors.TimeoutError:
            outcomes[(endpoint, "timeout")] += 1
            return
        answer = json.loads(msg.data)
        error = answer.get("error") if isinstance(answer, dict) else None
        if error is None:
            outcomes[(endpoint, "result")] += 1
        elif (error["code"], error["message"], error.get("retry_after")) == (
                "unavailable", BUSY_MESSAGE, BUSY_RETRY_AFTER):
            outcomes[(endpoint, "busy")] += 1
        else:
            outcomes[(endpoint, f"error {error}")] += 1

    try:
        await asyncio.gather(*(one(n) for n in range(FLOOD)))
    finally:
        for nc in connections:
            await nc.close()
    assert sum(outcomes.values()) == FLOOD
    unanswered = {key: count for key, count in outcomes.items()
                  if key[1] not in ("result", "busy")}
    assert unanswered == {}, (unanswered, outcomes)
    for endpoint, _ in kinds:  # each endpoint answered some for real, not only shed
        assert outcomes[(endpoint, "result")] >= 1, outcomes
    # every cluster.status answered shared a few fan-outs, not one each
    statuses = outcomes[("cluster.status", "result")]
    assert admin.service.status_flight.started * 4 <= statuses, (
        admin.service.status_flight.started, statuses)
    assert (await stats(admin))["replica_status"] <= admin.service.status_flight.started + 1
    assert admin.service.share.charged > 0  # the requests were charged to the loop share


async def test_a_busy_answer_is_asked_again_then_shown_as_its_message(
        nats_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """An endpoint at its limit (here 0) answers busy at once; the client asks again
    ``BUSY_RETRIES`` times, then raises the busy message without reading the store; the
    command line prints it with the unavailable exit code (4)."""
    prefix = unique_prefix()
    async with admin_on(nats_url, prefix) as ctx:
        await ctx.service.stop()
        from nats_scheduler.admin.service import start_admin_service
        ctx.service = await start_admin_service(ctx.provider,
                                                limits={"cluster.status": 0, "health": 0})
        client = AdminClient(ctx.nc, prefix, timeout=5.0)
        loop = asyncio.get_running_loop()
        began = loop.time()
        with pytest.raises(AdminError) as busy:
            await client.cluster_status()
        assert (busy.value.code, busy.value.message) == (ErrorCode.UNAVAILABLE, BUSY_MESSAGE)
        assert busy.value.retry_after == BUSY_RETRY_AFTER
        assert loop.time() - began < 5.0  # within the request's own timeout
        assert client.last_source is None  # the store was not read instead
        assert (await stats(ctx))["cluster_status"] == 1 + BUSY_RETRIES
        assert ENDPOINT_LIMITS["cluster.status"] > 0  # the shipped limit is not this one
        url = ctx.nc.connected_url
        assert url is not None
        code, _, err = await cli(f"nats://{url.hostname}:{url.port}", prefix, capsys, "status")
        assert code == 4 and f"error: {BUSY_MESSAGE}" in err, err
        schedules = await client.list_schedules()  # the other endpoints still answer
        assert schedules == []


# ----------------------------------------------------------------------------- the parts


class Timer:
    """A hand-moved clock of seconds for the loop share."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_loop_share_drains_at_its_share_and_refuses_past_its_burst() -> None:
    timer = Timer()
    share = LoopShare(0.25, 0.5, timer=timer)
    share.charge(0.4)
    assert not share.exhausted()
    share.charge(0.2)  # 0.6 held, over the 0.5 burst
    assert share.exhausted()
    timer.now += 0.3  # drains 0.075: still over
    assert share.exhausted()
    timer.now += 0.2  # drained to 0.475
    assert not share.exhausted()
    gate = EndpointGate(2, share)
    exempt = EndpointGate(1, share, exempt=True)
    assert gate.enter() and gate.enter() and not gate.enter()  # the endpoint's limit
    gate.leave()
    share.charge(1.0)
    assert not gate.enter()  # the service's share
    assert exempt.enter() and not exempt.enter()  # only its own limit


def test_the_share_holds_only_while_the_replica_fires() -> None:
    """A replica that fires nothing gives its requests the whole loop (a quiet console
    reads at full speed); while it holds Runs, the share holds; when due times come, the
    share holds from their first moment, without a burst on top."""
    timer, firing = Timer(), [Firing.QUIET]
    share = LoopShare(0.25, 0.5, timer=timer, firing=lambda: firing[0])
    share.charge(5.0)  # five seconds of the loop, nothing firing
    assert not share.exhausted()
    firing[0] = Firing.HOLDING  # Runs held: a burst, then the share
    share.charge(0.4)
    assert not share.exhausted()
    share.charge(0.2)
    assert share.exhausted()
    firing[0] = Firing.QUIET
    assert not share.exhausted()
    firing[0] = Firing.DUE  # due times come: the bucket starts full
    assert not share.exhausted()
    share.charge(0.01)
    assert share.exhausted()
    timer.now += 0.05  # drains 0.0125: 25 % of the loop for the service
    assert not share.exhausted()


async def test_charged_counts_the_steps_that_hold_the_loop_not_the_waits() -> None:
    timer = Timer()
    share = LoopShare(0.25, 0.5, timer=timer)

    async def work() -> str:
        timer.now += 0.1  # computing: holds the loop
        await asyncio.sleep(0)
        timer.now += 0.05
        waiting = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_soon(waiting.set_result, "read")
        result = await waiting  # a read of the store: the loop is free meanwhile
        timer.now += 0.02
        return result

    async def idle() -> None:  # time passes while ``work`` waits: not its charge
        await asyncio.sleep(0)
        timer.now += 5.0

    answer, _ = await asyncio.gather(charged(work(), share, timer), idle())
    assert answer == "read"
    assert share.charged == pytest.approx(0.17)

    async def fails() -> None:
        timer.now += 0.01
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        await charged(fails(), share, timer)
    assert share.charged == pytest.approx(0.18)
    blocked = asyncio.create_task(charged(asyncio.sleep(30), share, timer))
    await asyncio.sleep(0)
    blocked.cancel()
    with pytest.raises(asyncio.CancelledError):
        await blocked


async def test_a_single_flight_is_shared_by_the_callers_arriving_while_it_runs() -> None:
    release = asyncio.Event()
    calls = 0

    async def fan_out() -> int:
        nonlocal calls
        calls += 1
        await release.wait()
        if calls == 2:
            raise RuntimeError("store unreadable")
        return calls

    flight = SingleFlight(fan_out)
    waiters = [asyncio.create_task(flight()) for _ in range(5)]
    await asyncio.sleep(0)
    waiters[0].cancel()  # a caller giving up does not end the others' flight
    release.set()
    results = await asyncio.gather(*waiters[1:])
    assert results == [1, 1, 1, 1] and flight.started == 1
    release.clear()
    second = [asyncio.create_task(flight()) for _ in range(3)]
    await asyncio.sleep(0)
    release.set()
    outcomes = await asyncio.gather(*second, return_exceptions=True)
    assert all(isinstance(o, RuntimeError) for o in outcomes) and flight.started == 2
    assert await flight() == 3 and flight.started == 3  # after it ended: a fresh one
