"""Foreign messages on every subject of the scheduler: nothing wedges, the checker names each.

A message the provider cannot take as its own (jetstream/foreign.py) may sit on any of its
subjects: written by hand with its login, by a newer release, damaged. With the provider's
login (a development server: no users), this test writes several kinds of them (server
JSON, bytes that are no JSON, an event type this release does not know, a valid event of
another subject) on the last event of a Schedule, its history index, a finished Run's
subject, a future Run's subject and its lease key, a replica key, the outage records and
the checkpoints. Afterwards everything AstraBox and an operator do still works, on the
running replica and on one started after it: ``apply``, ``delete``, ``enqueue``,
``list_runs`` read page by page against every Run created, ``get_run``, the operator's hold
and release, ``explain``, the future due time fired once (its Run created after the
foreign messages on its subject) and the next due time planned. The checker passes before
and reports exactly the injected messages after.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
from datetime import UTC, datetime, timedelta

import msgspec
import pytest

from nats_scheduler.admin.client import AdminClient
from nats_scheduler.admin.doctor import Status, run_doctor
from nats_scheduler.cli.main import main as cli_main
from nats_scheduler.names import Names, scheduled_run_id
from nats_scheduler.provider import NatsSchedulerProvider
from nats_scheduler.seam import EnqueueRequest, Run, RunPayload, RunState, Schedule, Trigger
from tests.harness.checking import check_store
from tests.harness.servers import connect_fast, unique_prefix
from tests.providers import eventually, running, settings


def check_command(url: str, prefix: str, *args: str) -> tuple[int, str]:
    """``nats-scheduler check`` in this process: its exit code and what it printed."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli_main(["check", "--url", url, "--prefix", prefix, "--paging-sample", "0",
                         "--early-tolerance", "off", *args])
    return code, out.getvalue()

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

DUE = datetime(2031, 1, 1, 3, 0, tzinfo=UTC)
"""A due time far ahead: nothing fires by itself while the test runs."""


def schedule(dep: str, version: int, prompt: str = "p") -> Schedule:
    return Schedule(dep, f"name of {dep}", "0 3 * * *", "UTC", True,
                    RunPayload("agent://report", prompt), version)


async def dispatched(provider: NatsSchedulerProvider, run_id: str) -> bool:
    return (await provider.get_run(run_id)).state == RunState.DISPATCHED


async def every_run(provider: NatsSchedulerProvider, dep: str) -> list[Run]:
    """The whole history, read one Run per page, as a client pages it."""
    found: list[Run] = []
    before = None
    while page := await provider.list_runs(dep, limit=1, before=before):
        found += page
        before = page[-1].run_id
    return found


def kinds(other_event: bytes) -> list[bytes]:
    """Foreign messages of several kinds: server JSON, bytes that are no JSON, an event of
    a newer release, a valid event filed under another subject."""
    newer = msgspec.json.encode({"type": "run.paused", "schema": 9, "at": "2030-01-01T00:00:00Z",
                                 "actor": "a newer release"})
    return [b'{"type":"io.nats.jetstream.api.v1.account_info_response","memory":0}',
            b"\xff\x00 not json", newer, other_event]


async def test_foreign_messages_on_every_subject_wedge_nothing_and_are_reported(
        nats_url: str) -> None:
    prefix = unique_prefix()
    names = Names(prefix)
    future, later = DUE + timedelta(days=1), DUE + timedelta(days=2)
    future_run = scheduled_run_id("d1", future)
    async with running(nats_url, prefix) as provider:
        await provider.apply(schedule("d1", 1))
        await provider.apply(schedule("d2", 1))
        fired = await provider.fire_due("d1", DUE)
        assert fired is not None
        now_run = await provider.enqueue(EnqueueRequest("d1", Trigger.RUN_NOW))
        for run in (fired, now_run):
            await eventually(lambda r=run: dispatched(provider, r.run_id), timeout=10)
        before = await check_store(nats_url, prefix, ticker_only=False)
        assert before.ok, before.text()

        # -------------------------------------------- the foreign messages, with its login
        d2_event = await provider.store.js.get_last_msg(names.schedules_stream,
                                                        names.schedule_subject("d2"))
        foreign = kinds(d2_event.data)
        targets = [names.schedule_subject("d1"), names.schedule_subject("d2"),
                   names.index_subject("d1"), names.run_subject("d1", fired.run_id),
                   names.run_subject("d1", future_run), names.lease_subject(future_run),
                   names.replica_subject("ghost"), names.outage_subject,
                   names.checkpoint_head_subject, names.checkpoint_parts_subject("x")]
        injected: set[str] = set()
        nc = await connect_fast(nats_url)
        try:
            js = nc.jetstream()
            for i, subject in enumerate(targets):
                for data in (foreign[i % 4], foreign[(i + 1) % 4]):
                    if subject.startswith("$KV.") and data == d2_event.data:
                        data = b"[1, 2]"  # the buckets: a value of no lease nor replica
                    ack = await js.publish(subject, data)
                    injected.add(f"{subject}#{ack.seq}")
        finally:
            await nc.close()
        # A bucket keeps a key's last value only: the lease key is taken over when its Run
        # is created (its foreign values replaced), the replica key keeps the second one.
        kept = {s for s in injected if not s.startswith("$KV.")}
        kept.add(max((s for s in injected if "ghost" in s), key=lambda s: int(s.split("#")[1])))

        # ----------------------------------------------------- everything still works
        await provider.apply(schedule("d1", 2, prompt="p2"))
        assert provider.schedules.get("d1").payload.prompt == "p2"  # type: ignore[union-attr]
        client = AdminClient(provider.store.nc, prefix)
        held = await client.hold("d1", by="ops", reason="check")
        assert held.state == "held"
        released = await client.release("d1", by="ops", reason="done")
        assert released.state == "enabled"
        account = await client.explain("d1", since=DUE - timedelta(days=1),
                                       until=DUE + timedelta(hours=1))
        assert [d.run_id for d in account.due_times if d.run_id] == [fired.run_id]
        again = await provider.enqueue(EnqueueRequest("d1", Trigger.RUN_NOW))
        created = await provider.fire_due("d1", future)
        assert created is not None and created.run_id == future_run
        assert (await provider.fire_due("d1", future)).run_id == future_run  # type: ignore[union-attr]
        for run in (again, created):
            await eventually(lambda r=run: dispatched(provider, r.run_id), timeout=15)
        runs = await every_run(provider, "d1")
        assert [r.run_id for r in runs] == [r.run_id for r in sorted(
            (fired, now_run, again, created), key=lambda r: (r.created_at, r.run_id),
            reverse=True)]
        assert (await provider.get_run(fired.run_id)).state == RunState.DISPATCHED
        await provider.delete("d2")
        assert provider.schedules.get("d2").deleted  # type: ignore[union-attr]

    # ------------------------------------------ a replica started after them reads around them
    async with running(nats_url, prefix) as restarted:
        await restarted.until_ready()
        record = restarted.schedules.get("d1")
        assert record is not None and record.payload.prompt == "p2" and record.active
        assert restarted.next_due("d1") is not None
        assert restarted.schedules.get("d2").deleted  # type: ignore[union-attr]
        assert [r.run_id for r in await every_run(restarted, "d1")] == [r.run_id for r in runs]
        fired_later = await restarted.fire_due("d1", later)
        assert fired_later is not None
        await eventually(lambda: dispatched(restarted, fired_later.run_id), timeout=15)
        foreign_counted = restarted.runtime.metrics.snapshot().events_skipped  # type: ignore[union-attr]
        assert sum(foreign_counted.values()) >= 1

        # doctor names them (those the replica's readers met, and the buckets' own), exit 7
        report = await run_doctor(settings(nats_url, prefix))
        check = report.get("foreign messages")
        assert check.status == Status.FAIL and not report.ok
        assert names.replica_subject("ghost") in check.detail, check.detail

    after = await check_store(nats_url, prefix, ticker_only=False)
    assert {v.check for v in after.violations} == {"foreign"}, after.text()
    assert {v.subject for v in after.violations} == kept, after.text()
    # the command line's check: every one by stream, subject and sequence, exit 7
    code, out = await asyncio.to_thread(check_command, nats_url, prefix)
    assert code == 7
    assert all(subject in out for subject in kept), out

    # once looked at, each is named as known and check passes (docs/failure-modes.md)
    known = [arg for subject in sorted(kept) for arg in ("--known-foreign", subject)]
    code, out = await asyncio.to_thread(check_command, nats_url, prefix, *known)
    assert code == 0, out


async def test_an_event_copied_from_another_schedule_is_not_taken_for_its_own(
        nats_url: str) -> None:
    """A valid event of deployment A written on B's subject: B's readers skip it (they do not
    take A's definition for B's), and B's next change goes after it."""
    prefix = unique_prefix()
    names = Names(prefix)
    async with running(nats_url, prefix) as provider:
        await provider.apply(schedule("a", 1, prompt="of a"))
        await provider.apply(schedule("b", 1, prompt="of b"))
        a_event = await provider.store.js.get_last_msg(names.schedules_stream,
                                                       names.schedule_subject("a"))
        await provider.store.js.publish(names.schedule_subject("b"), a_event.data)
        assert (await provider.runtime.schedules.read("b")).payload.prompt == "of b"  # type: ignore[union-attr]
        await provider.apply(schedule("b", 2, prompt="b again"))
    async with running(nats_url, prefix) as restarted:
        await restarted.until_ready()
        b = restarted.schedules.get("b")
        assert b is not None and b.payload.prompt == "b again"
