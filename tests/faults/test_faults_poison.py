"""Poison events: messages on the event subjects that are not events, or not true.

A client with the development setup's permissions (no users: anybody may publish anywhere;
with the production config only the ``scheduler`` user may write these subjects) publishes
garbage, an event filed under another Run's subject, and a valid-looking event claiming an
impossible transition of a finished Run. The projections must skip each one, count it where
the health view can read it (``provider.runtime.followers``), never stall on it, and keep
the state the true events left (the ledger checks each event against the state before it).
The checker reports exactly the injected events, nothing else.
"""

from __future__ import annotations

import msgspec
import pytest

from admin_tui.widgets.top_bar import health_text
from nats_scheduler.admin.client import AdminClient
from nats_scheduler.cli.status import healthy
from nats_scheduler.core import runcore
from nats_scheduler.core.events import encode
from nats_scheduler.names import Names
from nats_scheduler.provider import NatsSchedulerProvider
from nats_scheduler.seam import EnqueueRequest, RunPayload, RunState, Schedule, Trigger
from tests.harness.checking import check_store
from tests.harness.servers import connect_fast, unique_prefix
from tests.harness.shared_handler import SqliteRunHandler
from tests.providers import eventually, running

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


async def dispatched(provider: NatsSchedulerProvider, run_id: str) -> bool:
    return (await provider.get_run(run_id)).state == RunState.DISPATCHED


def poisoned(provider: NatsSchedulerProvider) -> dict[str, int]:
    runtime = provider.runtime
    assert runtime is not None
    return {f.stream: f.poisoned for f in runtime.followers}


async def test_poison_events_are_skipped_counted_and_never_corrupt_or_stall_a_projection(
    nats_url: str, tmp_path: object,
) -> None:
    prefix = unique_prefix()
    names = Names(prefix)
    handler = SqliteRunHandler(f"{tmp_path}/handler.db", process="p")
    async with running(nats_url, prefix, handler) as provider, \
            running(nats_url, prefix, handler) as other:
        await provider.apply(Schedule("d", "d", "0 3 29 2 *", "UTC", True,
                                      RunPayload("t", "p"), 1))
        done = await provider.enqueue(EnqueueRequest("d", Trigger.RUN_NOW))
        await eventually(lambda: dispatched(provider, done.run_id), timeout=10)
        await eventually(lambda: dispatched(other, done.run_id), timeout=10)
        finished = provider.ledger.get(done.run_id)
        assert finished is not None

        nc = await connect_fast(nats_url)
        try:
            js = nc.jetstream()
            # 1. not an event at all
            await js.publish(names.run_subject("d", "junk"), b"\x00{not json")
            # 2. a finished Run "claimed" again: a transition that cannot happen
            forged = runcore.RunClaimed(
                at=finished.updated_at, actor="intruder", holder="intruder",
                run=msgspec.structs.replace(finished, state=RunState.DISPATCHING,
                                            holder="intruder"))
            await js.publish(names.run_subject("d", done.run_id), encode(forged))
            # 3. a Run's event filed under another Run's subject
            await js.publish(names.run_subject("d", "elsewhere"), encode(forged))
            # 4. garbage on a Schedule subject
            await js.publish(names.schedule_subject("junk"), b"[]")
        finally:
            await nc.close()

        for p in (provider, other):
            await eventually(lambda p=p: poisoned(p) == {names.schedules_stream: 1,
                                                        names.runs_stream: 3}, timeout=10)
            assert p.ledger.get(done.run_id) == finished  # the forged claim was refused
            assert p.ledger.get("elsewhere") is None
            followers = p.runtime.followers  # type: ignore[union-attr]
            assert all(f.last_poison for f in followers)
        # Reported where operators look: the metric, the admin health, status and console.
        assert provider.runtime is not None
        assert provider.runtime.metrics.snapshot().events_skipped == {"schedules": 1,
                                                                      "runs": 3}
        client = AdminClient(provider.store.nc, prefix)
        health = await eventually(client.health, timeout=10)
        assert len(health.skipped_events) == 2 and not healthy(health)
        assert "skipping events" in health_text(health).plain
        # ... and the projections go on: a new Run is seen by both replicas
        after = await provider.enqueue(EnqueueRequest("d", Trigger.RUN_NOW))
        await eventually(lambda: dispatched(other, after.run_id), timeout=10)
        assert other.schedules.get("d") is not None

        report = await check_store(nats_url, prefix, handler=handler, ledger=other.ledger)
    assert report.by_check() == {"foreign": 3, "transition": 1}, report.text()
    subjects = sorted(v.subject.split("#")[0] for v in report.violations)
    assert subjects == sorted([names.run_subject("d", "elsewhere"),
                               names.run_subject("d", "junk"),
                               names.schedule_subject("junk"), done.run_id])
