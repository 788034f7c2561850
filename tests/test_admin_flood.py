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

from nats_scheduler.admin.admission import BUSY_MESSAGE, ENDPOINT_LIMITS
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
                "unavailable", BUSY_MESSAGE, 0.2):
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
        assert busy.value.retry_after == 0.2
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
