"""The ``Nats-Msg-Id`` a Run's ``run.created`` is stored with, as docs/audit.md shows it.

A scheduled Run's create carries ``<deployment token>@<due time YYYY-MM-DDTHH:MMZ>`` (UTC):
auditors match a Run to its due time by it, and the store resolves a resend after a lost
acknowledgement by it (docs/design.md, "Error 10071 and the resend trap"). The due time is
fired here by the ticker itself, on an injected clock, and the header is read back from the
first message of the Run's subject on a real server.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from nats.js.api import RawStreamMsg

from nats_scheduler import NatsSchedulerProvider
from nats_scheduler.clock import ManualClock
from nats_scheduler.names import HDR_EXPECTED_LAST_SUBJECT_SEQUENCE, HDR_MSG_ID, token
from nats_scheduler.seam import EnqueueRequest, Run, RunPayload, Schedule, Trigger
from tests.harness.servers import unique_prefix
from tests.providers import eventually, running

pytestmark = pytest.mark.anyio

T0 = datetime(2031, 1, 15, 1, 0, 30, tzinfo=UTC)
DUE = datetime(2031, 1, 15, 1, 30, tzinfo=UTC)  # 02:30 in Berlin (winter, UTC+1)
DEP = "team.a/report"  # needs encoding: the header carries the subject token, not the raw ID
SCHEDULED_MSG_ID = re.compile(r"^[A-Za-z0-9_%-]+@\d{4}-\d{2}-\d{2}T\d{2}:\d{2}Z$")


async def first_message(provider: NatsSchedulerProvider, run: Run) -> RawStreamMsg:
    """The first stored message of the Run's own subject: its ``run.created``."""
    names = provider.store.names
    return await provider.store.js.get_msg(
        names.runs_stream, seq=1, subject=names.run_subject(run.deployment_id, run.run_id),
        next=True,
    )


async def test_a_fired_due_time_is_stored_with_deployment_and_due_time_as_msg_id(
    nats_url: str,
) -> None:
    clock = ManualClock(T0)
    async with running(nats_url, unique_prefix(), clock=clock) as provider:
        await provider.apply(Schedule(DEP, "report", "30 2 * * *", "Europe/Berlin", True,
                                      RunPayload("agent:reporter", "Summarise"), 1))
        clock.set(DUE + timedelta(milliseconds=500))  # the ticker fires 01:30Z by itself

        async def fired() -> list[Run]:
            return await provider.list_runs(DEP)

        (run,) = await eventually(fired, timeout=15)
        assert run.trigger == Trigger.SCHEDULE and run.due_at == DUE

        msg = await first_message(provider, run)
        assert b'"type":"run.created"' in msg.data
        msg_id = (msg.headers or {})[HDR_MSG_ID]
        assert msg_id == "team%2Ea%2Freport@2031-01-15T01:30Z"
        assert msg_id == f"{token(DEP)}@{DUE:%Y-%m-%dT%H:%MZ}"
        assert SCHEDULED_MSG_ID.match(msg_id)
        # stored as sent: the uniqueness constraint is visible to an auditor too
        assert (msg.headers or {})[HDR_EXPECTED_LAST_SUBJECT_SEQUENCE] == "0"

        again = await provider.fire_due(DEP, DUE)  # a second firing stores nothing new
        assert again is not None and again.run_id == run.run_id
        assert (await first_message(provider, run)).headers == msg.headers
        assert [r.run_id for r in await provider.list_runs(DEP)] == [run.run_id]


async def test_run_now_creates_carry_the_run_id_as_msg_id(nats_url: str) -> None:
    async with running(nats_url, unique_prefix()) as provider:
        await provider.apply(Schedule(DEP, "report", "30 2 * * *", "Europe/Berlin", True,
                                      RunPayload("agent:reporter", "Summarise"), 1))
        keyed = await provider.enqueue(EnqueueRequest(DEP, Trigger.RUN_NOW, request_id="r-1"))
        fresh = await provider.enqueue(EnqueueRequest(DEP, Trigger.RUN_NOW))

        keyed_id = ((await first_message(provider, keyed)).headers or {})[HDR_MSG_ID]
        fresh_id = ((await first_message(provider, fresh)).headers or {})[HDR_MSG_ID]
        assert keyed_id == f"req:{keyed.run_id}"
        assert fresh_id == f"{fresh.run_id}:0"
        assert not SCHEDULED_MSG_ID.match(keyed_id) and not SCHEDULED_MSG_ID.match(fresh_id)


async def test_later_events_carry_the_writers_decision_nonce(nats_url: str) -> None:
    """A Schedule event's Msg-Id: ``<deployment token>:<expected sequence>:<nonce>``, the
    nonce being the writing store's part (drawn once per store) and its count, in hex."""
    async with running(nats_url, unique_prefix()) as provider:
        await provider.apply(Schedule(DEP, "report", "30 2 * * *", "Europe/Berlin", True,
                                      RunPayload("agent:reporter", "Summarise"), 1))
        names = provider.store.names
        msg = await provider.store.js.get_msg(
            names.schedules_stream, seq=1, subject=names.schedule_subject(DEP), next=True)
        msg_id = (msg.headers or {})[HDR_MSG_ID]
        writer = provider.store.decisions.writer
        assert re.fullmatch(r"[0-9a-f]{12}", writer)
        assert re.fullmatch(rf"{re.escape(token(DEP))}:0:{writer}[0-9a-f]+", msg_id), msg_id
