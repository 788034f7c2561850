"""The whole Run history paged through every surface an operator pages it with: the admin
service (any replica answers), the store reader (no replica running), ``nats-scheduler runs
--before`` and the console's Older/Newer keys; and ``nats-scheduler check``'s own paging
invariant, which must pass on a sound history and report one whose order was forged.

Each walk reads to the end and is compared with the Runs made (tests/harness/walks.py).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import anyio
import msgspec
import pytest

from admin_tui.screens.schedule_detail import ScheduleDetailScreen
from admin_tui.widgets.run_table import RunTable
from nats_scheduler.admin.api import RunList, RunView
from nats_scheduler.admin.client import AdminClient
from nats_scheduler.admin.invariants import Options
from nats_scheduler.admin.paging_check import check_deployment
from nats_scheduler.admin.reader import StoreReader
from nats_scheduler.admin.service import start_admin_service
from nats_scheduler.admin.stored_events import check_stored
from nats_scheduler.cli.main import main
from nats_scheduler.core import runcore
from nats_scheduler.core.events import encode
from nats_scheduler.jetstream.history import IndexEntry
from nats_scheduler.names import HDR_MSG_ID, Names, index_msg_id, random_run_id
from nats_scheduler.seam import EnqueueRequest, Run, RunPayload, Schedule, Trigger
from tests.console_helpers import until
from tests.harness.servers import connect_fast, unique_prefix
from tests.harness.walks import assert_whole, walk
from tests.providers import running
from tests.test_tui_live import console

pytestmark = pytest.mark.anyio

PAYLOAD = RunPayload("agent:test", "summarise")
FIRST_DAY = datetime(2001, 1, 1, tzinfo=UTC)


def schedule(dep: str) -> Schedule:
    """Due at 03:00 UTC: nothing fires by itself during a test; due times are fired by hand."""
    return Schedule(dep, dep, "0 3 * * *", "UTC", True, PAYLOAD, 1)


def day(n: int) -> datetime:
    return FIRST_DAY.replace(hour=3) + timedelta(days=n)


async def make_history(provider, dep: str, scheduled: int, nows: int) -> list[Run]:  # type: ignore[no-untyped-def]
    """Scheduled Runs fired one after another and in a burst, and Run nows at once."""
    await provider.apply(schedule(dep))
    made = [await provider.fire_due(dep, day(n)) for n in range(scheduled // 2)]
    made += await asyncio.gather(*(provider.fire_due(dep, day(n))
                                   for n in range(scheduled // 2, scheduled)))
    made += await asyncio.gather(*(provider.enqueue(EnqueueRequest(dep, Trigger.RUN_NOW))
                                   for _ in range(nows)))
    return [r for r in made if r is not None]


def next_before_reader(list_runs):  # type: ignore[no-untyped-def]
    """A page reader over an admin ``list_runs`` (a RunList with ``next_before``)."""
    async def read(before: str | None, limit: int) -> list[RunView]:
        page: RunList = await list_runs(limit=limit, before=before)
        assert page.next_before is None or len(page.runs) == limit
        return list(page.runs)
    return read


async def test_the_admin_service_and_the_store_reader_page_the_whole_history(
    nats_url: str,
) -> None:
    """Through the admin service, as the console and the CLI ask it; and from the store
    alone, as they read it with no replica running."""
    prefix = unique_prefix()
    async with running(nats_url, prefix) as provider:
        made = await make_history(provider, "svc", 240, 40)
        service = await start_admin_service(provider)
        nc = await connect_fast(nats_url)
        try:
            client = AdminClient(nc, prefix, timeout=5)
            for limit in (1, 25, 1000):
                pages = await walk(next_before_reader(
                    lambda limit, before: client.list_runs("svc", limit=limit, before=before)),
                    limit)
                assert_whole(pages, made, limit)
            reader = StoreReader(nc, prefix, timeout=5)
            pages = await walk(next_before_reader(
                lambda limit, before: reader.list_runs("svc", limit=limit, before=before)), 30)
            assert_whole(pages, made, 30)
        finally:
            await nc.close()
            await service.stop()


@dataclass
class CliRuns:
    url: str
    prefix: str
    capsys: pytest.CaptureFixture[str]

    async def page(self, before: str | None, limit: int) -> list[RunView]:
        """``nats-scheduler runs DEP --limit N [--before RUN] --json``, as a terminal runs it."""
        self.capsys.readouterr()
        args = ["runs", "cli", "--limit", str(limit), "--json", "--url", self.url,
                "--prefix", self.prefix, "--timeout", "5"]
        if before is not None:
            args += ["--before", before]
        code = await anyio.to_thread.run_sync(main, args)
        out, err = self.capsys.readouterr()
        assert code == 0, err
        return list(msgspec.convert(json.loads(out), RunList).runs)


async def test_nats_scheduler_runs_before_pages_the_whole_history(
    nats_url: str, capsys: pytest.CaptureFixture[str],
) -> None:
    prefix = unique_prefix()
    async with running(nats_url, prefix) as provider:
        made = await make_history(provider, "cli", 160, 20)
        service = await start_admin_service(provider)
        try:
            cli = CliRuns(nats_url, prefix, capsys)
            assert_whole(await walk(cli.page, 40), made, 40)
        finally:
            await service.stop()


async def test_the_consoles_older_and_newer_keys_page_the_whole_history(nats_url: str) -> None:
    """``]`` pages older until the last page, ``[`` comes back; every Run is shown once,
    newest first, and the way back shows the same pages."""
    prefix = unique_prefix()
    async with running(nats_url, prefix) as maker:
        made = await make_history(maker, "tui", 260, 40)
        await maker.wait_idle(timeout=30)
    async with console(nats_url, schedule("tui"), prefix=prefix) as s:
        pilot, app = s.pilot, s.app
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, ScheduleDetailScreen)
                    and app.screen.page is not None)
        detail = app.screen
        assert isinstance(detail, ScheduleDetailScreen)
        table = detail.query_one(RunTable)
        forward: list[list[str]] = []
        while True:
            page = detail.page
            assert page is not None
            await until(pilot, lambda page=page: table.row_keys()
                        == [r.run_id for r in page.runs])
            forward.append(table.row_keys())
            if not page.next_before:
                break
            await pilot.press("right_square_bracket")
            await until(pilot, lambda page=page: detail.page is not page)
        by_id = {r.run_id: r for r in made}
        assert_whole([[by_id[i] for i in keys] for keys in forward], made, detail.page_size,
                     said_last=True)
        back: list[list[str]] = [forward[-1]]
        while len(detail.cursors) > 1:
            page = detail.page
            await pilot.press("left_square_bracket")
            await until(pilot, lambda page=page: detail.page is not page)
            current = detail.page
            assert current is not None
            await until(pilot, lambda current=current: table.row_keys()
                        == [r.run_id for r in current.runs])
            back.append(table.row_keys())
        assert back == list(reversed(forward))


# ============================================================ nats-scheduler check


async def forge_out_of_order_run(url: str, prefix: str, dep: str, at: datetime) -> str:
    """Append an index entry that claims the history's order (``ordered``) but is stamped an
    hour before the entries stored ahead of it, and its Run: a history no writer of this
    release makes, whose pages must then miss the Run."""
    names = Names(prefix)
    run_id = random_run_id()
    nc = await connect_fast(url)
    try:
        js = nc.jetstream(timeout=5)
        ack = await js.publish(
            names.index_subject(dep),
            msgspec.json.encode(IndexEntry(run_id=run_id, created_at=at, ordered=True)),
            headers={HDR_MSG_ID: index_msg_id(run_id)})
        created = runcore.indexed(runcore.create(
            run_id=run_id, deployment_id=dep, trigger=Trigger.RUN_NOW, due_at=None,
            payload=PAYLOAD, now=at, actor="forger"), ack.seq)
        claimed = runcore.claim(created.run, holder="forger", now=at)
        done = runcore.dispatched(claimed.run, turn_id="t", now=at, actor="forger")
        for event in (created, claimed, done):
            await js.publish(names.run_subject(dep, run_id), encode(event))
    finally:
        await nc.close()
    return run_id


async def test_check_walks_sampled_histories_and_reports_a_run_paging_misses(
    nats_url: str, capsys: pytest.CaptureFixture[str],
) -> None:
    prefix = unique_prefix()
    async with running(nats_url, prefix) as provider:
        made = await make_history(provider, "sound", 300, 30)
        await make_history(provider, "forged", 150, 0)
        await provider.wait_idle(timeout=30)
    nc = await connect_fast(nats_url)
    try:
        reader = StoreReader(nc, prefix, timeout=5)
        assert await check_deployment(reader, "sound", page_size=50) == []
        assert await check_deployment(reader, "forged", page_size=50) == []
        oldest = min(r.created_at for r in made)
        forged = await forge_out_of_order_run(nats_url, prefix, "forged",
                                              oldest - timedelta(hours=1))
        found = await check_deployment(reader, "forged", page_size=50)
        assert [(v.check, v.subject) for v in found] == [("paging", "forged")]
        assert forged in found[0].detail and "1 retained runs never listed" in found[0].detail

        result = await check_stored(nc, prefix, Options(grace=3600), paging_sample=5)
        assert sorted(result.paged) == ["forged", "sound"]
        assert [v.subject for v in result.report.violations if v.check == "paging"] == ["forged"]
    finally:
        await nc.close()
    code = await anyio.to_thread.run_sync(main, [
        "check", "--url", nats_url, "--prefix", prefix, "--grace", "3600", "--json",
        "--early-tolerance", "off"])
    report = json.loads(capsys.readouterr().out)
    assert code == 7 and report["paged_deployments"] == ["forged", "sound"]
    assert [v["check"] for v in report["violations"]] == ["paging"]
