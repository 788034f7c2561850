"""One refused Schedule never stops the others (issue 41), on a real server.

``reconcile`` applies every Schedule it can, deletes the stored ones missing from the list,
and refuses the others one by one: a refused one keeps its stored Schedule (or has none), is
never deleted for being refused, and is named in an ERROR log, the metric
``astrabox.scheduler.schedules.refused``, ``nats-scheduler status`` and ``explain``. It returns
normally, so AstraBox's start goes on; store failures still raise. The stored outcome is read
back whole from the store (not from the replica's table) and compared with what is expected.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta

import anyio
import msgspec
import pytest

from nats_scheduler import ManualClock
from nats_scheduler.admin.api import AdminError, ErrorCode, ExplainRequest, ReplicaView
from nats_scheduler.admin.reader import StoreReader
from nats_scheduler.admin.service import start_admin_service
from nats_scheduler.cli.main import main
from nats_scheduler.cli.status import refusal_lines
from nats_scheduler.core import schedulecore
from nats_scheduler.core.events import ScheduleRecord
from nats_scheduler.core.refusals import shown_id
from nats_scheduler.names import scheduled_run_id
from nats_scheduler.provider import NatsSchedulerProvider
from nats_scheduler.runtime import refusals as refusals_module
from nats_scheduler.seam import (
    RunPayload,
    Schedule,
    ScheduleCapacityExceeded,
    SchedulerUnavailable,
)
from nats_scheduler.testing.handler import RecordingRunHandler
from tests.harness.servers import unique_prefix
from tests.providers import assert_clean, eventually, running
from tests.test_metrics import exported, instrumented, point

pytestmark = pytest.mark.anyio

CAP = 9
T0 = datetime(2031, 7, 1, 9, 59, 50, tzinfo=UTC)
DUE = datetime(2031, 7, 1, 10, 0, tzinfo=UTC)
HUGE_ID = "h" * 10_000
REFUSALS = "nats_scheduler.runtime.refusals"


def sched(dep: str, *, cron: str = "0 10 * * *", tz: str = "UTC", enabled: bool = True,
          prompt: str = "p", version: int = 1) -> Schedule:
    return Schedule(dep, dep, cron, tz, enabled, RunPayload("agent", prompt), version)


FIRST = [*(sched(f"keep-{i}") for i in range(4)), sched("gone-0"), sched("gone-1"),
         sched("bad-change"), sched("dup-stored"), sched("off-0")]
"""The stored state before the reconcile under test: CAP Schedules, all enabled."""

GIVEN = [
    sched("new-0", version=2),
    sched(HUGE_ID),
    *FIRST[:4],  # unchanged
    sched("new-1"),
    sched("big", prompt="x" * 600_000),
    sched("bad-change", cron="61 * * * *", version=2),
    sched("dup-stored", prompt="one", version=2),
    sched("new-2"),
    sched("bad-cron", cron="0 0 31 2 *"),
    sched("bad-zone", tz="Mars/Olympus_Mons"),
    sched("dup-new", prompt="a"),
    sched("off-0", enabled=False, version=2),
    sched("new-disabled", enabled=False),
    sched("new-3"),
    sched("dup-stored", prompt="two", version=3),
    sched("dup-new", prompt="b"),
    sched("bad-text", prompt="lone \ud800 surrogate"),
    sched("new-4"),
]
"""A restart's list: valid changes among every kind of refusal. Past the capacity: of the
CAP slots, keep-0..3, bad-change and dup-stored stay enabled (6; gone-0/1 are deleted and
off-0 disabled), so the first 3 new enables of the list fit and new-3, new-4 do not."""

APPLIED = {s.deployment_id: s for s in GIVEN if s.deployment_id in {
    "keep-0", "keep-1", "keep-2", "keep-3", "new-0", "new-1", "new-2", "off-0",
    "new-disabled"}}
KEPT = {s.deployment_id: s for s in FIRST if s.deployment_id in {"bad-change", "dup-stored"}}
DELETED = {"gone-0", "gone-1"}
REFUSED = {shown_id(HUGE_ID): "invalid", "big": "too_large", "bad-change": "invalid",
           "bad-cron": "invalid", "bad-zone": "invalid", "bad-text": "invalid",
           "dup-stored": "duplicate", "dup-new": "duplicate", "new-3": "capacity",
           "new-4": "capacity"}


def refused(provider: NatsSchedulerProvider) -> dict[str, str]:
    assert provider.runtime is not None
    return {r.deployment_id: r.kind for r in provider.runtime.refusals.listed()}


async def store_table(provider: NatsSchedulerProvider) -> dict[str, ScheduleRecord]:
    """Every Schedule as the store holds it (its last event each), read afresh."""
    reader = StoreReader(provider.store.nc, provider.store.names.prefix)
    return {r.deployment_id: r for r in (await reader.schedule_table()).all()}


def assert_outcome(stored: dict[str, ScheduleRecord]) -> None:
    assert set(stored) == set(APPLIED) | set(KEPT) | DELETED
    for dep, schedule in {**APPLIED, **KEPT}.items():
        assert not stored[dep].deleted, dep
        assert stored[dep].definition() == schedule, dep
    assert all(stored[dep].deleted for dep in DELETED)
    assert sum(r.enabled and not r.deleted for r in stored.values()) == CAP


@pytest.mark.parametrize("path", ["planned", "one by one"])
async def test_reconcile_applies_exactly_the_valid_schedules_and_refuses_exactly_the_others(
    nats_url: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch,
    path: str,
) -> None:
    """Both ways a reconcile decides (on the table proven current, or one change at a time
    on the stored state when it cannot be proven) store and refuse the same Schedules."""
    caplog.set_level(logging.ERROR, logger=REFUSALS)
    async with instrumented(nats_url, RecordingRunHandler(),
                            max_active_schedules=CAP) as (provider, reader):
        await provider.reconcile(FIRST)
        assert provider.runtime is not None
        if path == "one by one":
            async def unproven(**_: object) -> None:
                return None
            monkeypatch.setattr(provider.runtime.freshness, "confirm", unproven)
        await provider.reconcile(GIVEN)  # no exception: AstraBox's start goes on
        assert_outcome(await store_table(provider))
        assert refused(provider) == REFUSED
        for refusal in provider.runtime.refusals.listed():
            assert_clean(refusal.reason)
            assert len(refusal.reason) < 400 and refusal.by == provider.identity
        lines = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert len(lines) == len(REFUSED)
        for dep in REFUSED:
            assert any(repr(dep) in line for line in lines), dep
        assert max(len(line) for line in lines) < 1000  # a 10,000-character ID is cut
        m = exported(reader)
        for kind, count in {"invalid": 5, "too_large": 1, "duplicate": 2,
                            "capacity": 2}.items():
            assert point(m, "astrabox.scheduler.schedules.refused", kind=kind) == count
        assert provider.runtime.metrics.snapshot().schedules_refused == {
            "invalid": 5, "too_large": 1, "duplicate": 2, "capacity": 2}

        # apply keeps its own rules (it raises), and a successful one clears the refusal
        with pytest.raises(ScheduleCapacityExceeded):
            await provider.apply(sched("new-3"))
        await provider.apply(sched("bad-change", cron="15 10 * * *", version=3))
        assert "bad-change" not in refused(provider)
        await provider.apply(KEPT["dup-stored"])  # its stored definition: nothing written
        assert "dup-stored" not in refused(provider)
        m = exported(reader)
        assert point(m, "astrabox.scheduler.schedules.refused", kind="invalid") == 4
        assert point(m, "astrabox.scheduler.schedules.refused", kind="duplicate") == 1
        # the next reconcile's refusals replace the last one's
        await provider.reconcile([*APPLIED.values(), sched("bad-change", cron="15 10 * * *",
                                                           version=3)])
        assert refused(provider) == {}
        assert all(point(exported(reader), "astrabox.scheduler.schedules.refused",
                         kind=kind) == 0 for kind in REFUSED.values())


async def test_a_restart_with_a_refused_schedule_fires_the_valid_ones_at_the_next_boundary(
    nats_url: str,
) -> None:
    """A rolling restart where AstraBox's list holds records the provider refuses: the
    provider starts, and at the next minute boundary every valid Schedule fires, the one
    whose change was refused with its stored definition, the refused new ones not at all."""
    prefix = unique_prefix()
    valid = [sched(f"v-{i}") for i in range(3)]
    async with running(nats_url, prefix, clock=ManualClock(T0)) as before:
        await before.reconcile(valid)
    handler = RecordingRunHandler()
    clock = ManualClock(T0 + timedelta(seconds=2))
    async with running(nats_url, prefix, handler, clock=clock) as provider:
        await provider.reconcile([
            valid[0], sched(HUGE_ID), sched("big", prompt="x" * 600_000),
            sched("v-1", cron="61 * * * *", version=2),  # refused: v-1 keeps firing as stored
            valid[2], sched("v-new"), sched("bad-zone", tz="Nowhere/Else")])
        assert refused(provider) == {shown_id(HUGE_ID): "invalid", "big": "too_large",
                                     "v-1": "invalid", "bad-zone": "invalid"}
        await provider.until_ready()
        clock.set(DUE + timedelta(seconds=1))
        fired = ["v-0", "v-1", "v-2", "v-new"]
        await eventually(lambda: all(provider.ledger.get(scheduled_run_id(d, DUE))
                                     for d in fired), timeout=20)
        await provider.wait_idle(timeout=20)
        assert sorted({call.deployment_id for call in handler.calls}) == fired
        assert await provider.list_runs("big") == []
        assert await provider.list_runs("bad-zone") == []


async def cli(url: str, prefix: str, *argv: str,
              capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """``nats-scheduler ARGV`` in a worker thread, as from a terminal: (exit code, stdout)."""
    capsys.readouterr()
    code = await anyio.to_thread.run_sync(
        main, [*argv, "--url", url, "--prefix", prefix, "--timeout", "3"])
    return code, capsys.readouterr().out


@pytest.fixture
async def capped(nats_url: str) -> AsyncIterator[tuple[NatsSchedulerProvider, ManualClock]]:
    """A provider with room for one enabled Schedule, ``busy``, stored and enabled, and
    ``off`` stored disabled; its clock at T0."""
    clock = ManualClock(T0)
    async with running(nats_url, unique_prefix(), clock=clock,
                       max_active_schedules=1) as provider:
        await provider.reconcile([sched("busy"), sched("off", enabled=False)])
        await provider.until_ready()
        yield provider, clock


async def test_status_and_explain_name_the_refused_schedules(
    capped: tuple[NatsSchedulerProvider, ManualClock], nats_url: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    provider, clock = capped
    prefix = provider.settings.prefix
    code, out = await cli(nats_url, prefix, "status", capsys=capsys)
    assert code == 0 and "refused schedules: none" in out, out
    await provider.reconcile([sched("busy"), sched("off", version=2), sched("late"),
                              sched("never", cron="0 0 31 2 *")])
    code, out = await cli(nats_url, prefix, "status", capsys=capsys)
    assert code == 7, out
    assert "refused schedules: 3" in out and f"{provider.identity}: 3" in out
    for line in ("off  capacity  cannot enable deployment 'off'",
                 "late  capacity  cannot enable deployment 'late'",
                 "never  invalid  schedule of deployment 'never' is invalid"):
        assert line in out, out
    code, out = await cli(nats_url, prefix, "status", "--json", capsys=capsys)
    [replica] = json.loads(out)["cluster"]["replicas"]
    assert replica["refused_total"] == 3 and not json.loads(out)["healthy"]
    assert {r["deployment_id"] for r in replica["refused"]} == {"off", "late", "never"}

    clock.set(DUE + timedelta(minutes=3))  # the 10:00 due times are past the grace
    await eventually(lambda: provider.ledger.get(scheduled_run_id("busy", DUE)), timeout=20)
    for dep in ("late", "off"):  # never stored / stored disabled: the due time is refused
        code, out = await cli(nats_url, prefix, "explain", dep, "--json", capsys=capsys)
        account = json.loads(out)
        [due] = [d for d in account["due_times"] if d["due_at"].startswith("2031-07-01T10:00")]
        assert (due["outcome"], due["reason"], due["by"]) == (
            "skipped", "refused", provider.identity), account
        assert f"cannot enable deployment '{dep}'" in due["note"]
        assert any("refused AstraBox's schedule" in n for n in account["notes"])
        code, out = await cli(nats_url, prefix, "explain", dep, capsys=capsys)
        assert code == 0 and "skipped: refused by" in out, out
    code, out = await cli(nats_url, prefix, "explain", "never", capsys=capsys)
    assert code == 0, out  # not "not found": the account is empty and says why
    assert "refused AstraBox's schedule for this deployment" in out
    assert "day 31 never occurs in February" in out
    code, out = await cli(nats_url, prefix, "explain", "busy", "--json", capsys=capsys)
    assert {d["outcome"] for d in json.loads(out)["due_times"]} == {"run"}

    await provider.apply(sched("late", enabled=False))  # fixed: the refusal is cleared
    code, out = await cli(nats_url, prefix, "explain", "late", "--json", capsys=capsys)
    assert "refused" not in out
    code, out = await cli(nats_url, prefix, "status", capsys=capsys)
    assert "refused schedules: 2" in out, out


async def test_thousands_of_refusals_are_logged_and_listed_within_bounds(
    nats_url: str, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.ERROR, logger=REFUSALS)
    count = 3000
    async with running(nats_url, unique_prefix()) as provider:
        bad = [sched(f"bad-{i:04d}-" + "x" * 200, cron="61 * * * *") for i in range(count)]
        await provider.reconcile([sched("fine"), *bad])
        assert provider.schedules.get("fine") is not None
        lines = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert len(lines) == refusals_module.LOGGED + 1
        assert f"refused {count} schedules of {count + 1} in all (invalid {count})" in lines[-1]
        _, out = await cli(nats_url, provider.settings.prefix, "status", "--json",
                           capsys=capsys)
        [replica] = json.loads(out)["cluster"]["replicas"]
        assert replica["refused_total"] == count
        assert 0 < len(replica["refused"]) < count  # cut to its share of one message
        _, out = await cli(nats_url, provider.settings.prefix, "status", capsys=capsys)
        assert f"... and {count - 20} more" in out


async def test_a_definition_stored_by_another_replica_clears_the_refusal_a_hold_does_not(
    nats_url: str,
) -> None:
    prefix = unique_prefix()
    async with running(nats_url, prefix) as a, running(nats_url, prefix) as b:
        await a.reconcile([sched("x"), sched("y")])
        await a.reconcile([sched("x", cron="61 * * * *", version=2), sched("y"),
                           sched("z", cron="0 0 31 2 *")])
        assert refused(a) == {"x": "invalid", "z": "invalid"}
        await b.until_ready()
        await b.hold("x", by="ops", reason="look")
        await eventually(lambda: (record := a.schedules.get("x")) is not None
                         and record.hold is not None, timeout=10)
        assert refused(a) == {"x": "invalid", "z": "invalid"}, "a hold fixes nothing"
        # b has no Schedule of z and refused nothing: its explain asks every replica
        service = await start_admin_service(b)
        account = await service.explain(ExplainRequest(deployment_id="z"))
        assert account.due_times == []
        assert [n for n in account.notes if f"replica {a.identity} refused" in n
                and "day 31 never occurs in February" in n]
        with pytest.raises(AdminError) as caught:  # nobody refused it: not found, as before
            await service.explain(ExplainRequest(deployment_id="nobody"))
        assert caught.value.code == ErrorCode.NOT_FOUND
        await b.apply(sched("x", cron="5 10 * * *", version=3))
        await b.apply(sched("z", cron="5 10 * * *"))
        await eventually(lambda: refused(a) == {}, timeout=10)
        assert a.runtime is not None
        assert a.runtime.metrics.snapshot().schedules_refused == {}


async def test_a_store_failure_still_raises(
    nats_url: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Refusals are about Schedules; a store that cannot take the writes is not one."""
    async with running(nats_url, unique_prefix()) as provider:
        assert provider.runtime is not None

        async def failing(planned: Sequence[object], redecide: object) -> None:
            raise SchedulerUnavailable("the scheduler store is unavailable")

        monkeypatch.setattr(provider.runtime.schedules, "write_planned", failing)
        with pytest.raises(SchedulerUnavailable):
            await provider.reconcile([sched("a"), sched("b", cron="61 * * * *")])
        assert refused(provider) == {"b": "invalid"}  # named all the same


def test_replica_answers_decode_across_releases() -> None:
    """``replica.status`` grew its refusals additively: an older replica's answer decodes
    with none, and a kind a later release adds still decodes (the kind is text)."""
    older = msgspec.json.decode(b'{"identity": "r"}', type=ReplicaView)
    assert (older.refused, older.refused_count) == ([], 0)
    assert older.metrics is None
    later = msgspec.json.decode(json.dumps({
        "identity": "r", "refused_total": 7, "metrics": {"schedules_refused": {"new": 7}},
        "refused": [{"deployment_id": "d", "kind": "a_kind_added_later", "reason": "why",
                     "unknown_field": 1}]}).encode(), type=ReplicaView)
    assert later.refused_count == 7 and later.refused[0].kind == "a_kind_added_later"
    assert "d  a_kind_added_later  why" in "\n".join(refusal_lines([later]))


async def test_one_change_at_a_time_an_unchanged_schedule_is_not_checked_again(
    nats_url: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """When the table cannot be proven current, the reconcile goes one change at a time with
    the plan's rules: a Schedule stored by an earlier release under looser checks, given
    unchanged, is accepted as it stands (not refused); a change to it is refused."""
    async with running(nats_url, unique_prefix()) as provider:
        assert provider.runtime is not None
        legacy = sched("legacy", cron="61 * * * *")
        await provider.runtime.schedules.write("legacy", lambda current: schedulecore
                                               .decide_apply(current, legacy, now=T0,
                                                             actor="old release"))

        async def unproven(**_: object) -> None:
            return None

        monkeypatch.setattr(provider.runtime.freshness, "confirm", unproven)
        await provider.reconcile([legacy, sched("ok")])
        assert refused(provider) == {}
        assert provider.schedules.get("ok") is not None
        await provider.reconcile([sched("legacy", cron="62 * * * *", version=2), sched("ok")])
        assert refused(provider) == {"legacy": "invalid"}
        record = provider.schedules.get("legacy")
        assert record is not None and record.cron == "61 * * * *" and not record.deleted


async def test_every_replica_refuses_the_same_schedules_of_the_same_list(nats_url: str) -> None:
    """A rolling restart: each replica reconciles AstraBox's same list in turn. The first
    stores what can be stored; each next one refuses exactly the same Schedules (the
    capacity's too: the stored enabled ones keep their place, then the list's order) and
    writes nothing."""
    prefix = unique_prefix()
    async with running(nats_url, prefix, max_active_schedules=CAP) as first:
        await first.reconcile(FIRST)
        await first.reconcile(GIVEN)
        store = first.store
        after_first = await store.last_seq(store.names.schedules_stream)
        async with running(nats_url, prefix, max_active_schedules=CAP) as second:
            await second.reconcile(list(reversed(GIVEN)))  # any order of the same list
            assert refused(second) == refused(first) == REFUSED
            assert await store.last_seq(store.names.schedules_stream) == after_first
            assert_outcome(await store_table(second))
