"""The end-to-end walkthrough of docs/contract.md ("The contract suite"), with real processes.

A nats-server, two dev-host replicas (separate OS processes sharing the Deployment
database; each loads the provider only through the ``astrabox.providers.scheduler`` entry
point, as AstraBox does, and the provider serves the admin service itself), the dev host's
CLI for what AstraBox's API would do, and ``nats-scheduler`` for the operator: create a
Schedule, let a real due time fire, Run now, Replay, disable it, delete it. At each step the
Run ledger, the events and the handler's Sessions are checked.

This is the one test of the suite that waits for a real due time (a ``* * * * *`` Schedule:
up to a minute).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path

import anyio
import pytest

from nats_scheduler.admin.api import RunView
from nats_scheduler.admin.client import AdminClient, event_type
from nats_scheduler.cli.main import main as nats_scheduler
from nats_scheduler.devhost.cli import main as devhost
from nats_scheduler.devhost.handler import count_calls, read_sessions
from nats_scheduler.seam import RunState, Trigger
from tests.harness.servers import connect_fast, unique_prefix
from tests.providers import eventually, reaped

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.timeout(240)]

REPLICAS = ("walk-replica-1", "walk-replica-2")


@contextlib.contextmanager
def replicas(db: Path, url: str, prefix: str, logs: Path) -> Iterator[list[subprocess.Popen]]:  # type: ignore[type-arg]
    env = {**os.environ, "ASTRABOX_SCHEDULER_PROVIDER": "nats", "ASTRABOX_NATS_URL": url,
           "ASTRABOX_NATS_PREFIX": prefix, "ASTRABOX_NATS_LEASE_SECONDS": "2",
           "ASTRABOX_NATS_DRAIN_SECONDS": "2"}
    with reaped() as procs:
        for identity in REPLICAS:
            with open(logs / f"{identity}.log", "wb") as log:
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "nats_scheduler.devhost", "run", "--db", str(db),
                     "--identity", identity, "--poll", "0.1",
                     "--exit-with-parent", str(os.getpid())],
                    env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT))
        yield procs


@contextlib.asynccontextmanager
async def admin_client(url: str, prefix: str) -> AsyncIterator[AdminClient]:
    nc = await connect_fast(url)
    try:
        yield AdminClient(nc, prefix, timeout=3.0)
    finally:
        await nc.close()


async def cli(*argv: str) -> dict:  # type: ignore[type-arg]
    """``nats-scheduler ARGV --json`` in a thread; its JSON answer."""
    import io
    from contextlib import redirect_stdout

    def call() -> str:
        buffer = io.StringIO()
        with redirect_stdout(buffer):
            assert nats_scheduler([*argv, "--json"]) == 0
        return buffer.getvalue()

    return json.loads(await anyio.to_thread.run_sync(call))  # type: ignore[no-any-return]


@pytest.mark.wall_clock(boundary=True)
async def test_create_fire_run_now_replay_disable_delete(
    nats_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prefix = unique_prefix()
    db = tmp_path / "astrabox.db"
    monkeypatch.setenv("ASTRABOX_NATS_URL", nats_url)
    monkeypatch.setenv("ASTRABOX_NATS_PREFIX", prefix)
    with replicas(db, nats_url, prefix, tmp_path) as procs:
        async with admin_client(nats_url, prefix) as client:
            await _walk(client, db, procs)
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc, identity in zip(procs, REPLICAS, strict=True):
            assert proc.wait(timeout=30) == 0
            log = (tmp_path / f"{identity}.log").read_text()
            assert f"devhost stopped: identity {identity}" in log
            # loaded through the entry point (the loader's startup line), and the admin
            # service the operator used was the provider's own
            assert "nats_scheduler.devhost.loader: scheduler provider nats: " \
                "recovery_scope=cluster" in log
            assert f"nats_scheduler.admin.service: admin service for prefix {prefix} " \
                f"started ({identity})" in log


async def _walk(client: AdminClient, db: Path, procs: list[subprocess.Popen]) -> None:  # type: ignore[type-arg]
    async def both_replicas_up() -> bool:
        assert all(p.poll() is None for p in procs), "a replica exited"
        return len((await client.cluster_status()).replicas) == 2

    await eventually(both_replicas_up, timeout=60)

    # 1. AstraBox creates the Deployment: both replicas apply version 1, one event is written.
    assert devhost(["create", "walk", "--db", str(db), "--cron", "* * * * *",
                    "--prompt", "walk the dog", "--name", "Walk"]) == 0

    async def visible() -> bool:
        views = await client.list_schedules("walk")
        return bool(views) and views[0].state == "enabled"

    await eventually(visible, timeout=10)
    schedule_events = await client.recent_events(deployment_id="walk", types={"schedule"})
    assert [event_type(e) for e in schedule_events] == ["schedule.applied"]

    # 2. A real due time fires: one Run, dispatched once, one Session.
    async def fired() -> RunView | None:
        runs = (await client.list_runs("walk")).runs
        return runs[0] if runs and runs[0].state == RunState.DISPATCHED else None

    scheduled = await eventually(fired, timeout=130, interval=0.25)
    assert scheduled.trigger == Trigger.SCHEDULE and scheduled.due_at is not None
    assert scheduled.due_at.second == 0 and scheduled.due_at.microsecond == 0
    assert scheduled.created_at - scheduled.due_at < timedelta(seconds=5)
    sessions = read_sessions(db, "walk")
    assert [(s.run_id, s.session_id, s.turn_id) for s in sessions] == [
        (scheduled.run_id, scheduled.session_id, scheduled.turn_id)]
    assert sessions[0].prompt == "walk the dog"
    assert count_calls(db, scheduled.run_id) == {"start_session": 1, "admit_turn": 1}
    run_events = await client.recent_events(deployment_id="walk", types={"run"})
    # the create carries its creator's claim (schema 2): no run.claimed on the happy path
    assert [event_type(e) for e in run_events] == [
        "run.created", "run.session_started", "run.dispatched"]

    # 3. Run now, through the operator's command line.
    now = await cli("run-now", "walk", "--by", "tester", "--reason", "walkthrough", "--wait")
    assert (now["trigger"], now["state"], now["requested_by"], now["reason"]) == (
        "run_now", "dispatched", "tester", "walkthrough")

    # 4. Replay the scheduled Run: a new Run with its captured payload.
    replay = await cli("replay", scheduled.run_id, "--by", "tester", "--wait")
    assert (replay["trigger"], replay["replay_of"], replay["state"]) == (
        "replay", scheduled.run_id, "dispatched")
    assert replay["payload"]["prompt"] == "walk the dog"
    triggers = {s.run_id: s.trigger for s in read_sessions(db, "walk")}
    assert {run_id: triggers.get(run_id) for run_id in (
        scheduled.run_id, now["run_id"], replay["run_id"])} == {
        scheduled.run_id: "schedule", now["run_id"]: "run_now", replay["run_id"]: "replay"}
    ledger = [r["run_id"] for r in (await cli("runs", "walk"))["runs"]]
    # newest first (a later due time may have fired meanwhile: it would come first)
    assert ledger.index(replay["run_id"]) < ledger.index(now["run_id"]) < ledger.index(
        scheduled.run_id)

    # 5. AstraBox disables it: version 2, no replica plans it any more.
    assert devhost(["disable", "walk", "--db", str(db)]) == 0

    async def disabled() -> bool:
        view = (await client.list_schedules("walk"))[0]
        planned = [r.schedules_planned for r in (await client.cluster_status()).replicas]
        return (view.state, view.version, view.next_due) == ("disabled", 2, []) and \
            planned == [0, 0]

    await eventually(disabled, timeout=10)

    # 6. AstraBox deletes it: the history stays listable, the Sessions are unchanged.
    assert devhost(["delete", "walk", "--db", str(db)]) == 0

    async def deleted() -> bool:
        views = await client.list_schedules("walk", include_deleted=True)
        return bool(views) and views[0].state == "deleted"

    await eventually(deleted, timeout=10)
    assert await client.list_schedules("walk") == []
    history = (await client.list_runs("walk")).runs
    assert {r.run_id for r in history} >= {scheduled.run_id, now["run_id"], replay["run_id"]}
    assert all(r.state == RunState.DISPATCHED for r in history)
    schedule_events = await client.recent_events(deployment_id="walk", types={"schedule"})
    assert [event_type(e) for e in schedule_events] == [
        "schedule.applied", "schedule.applied", "schedule.deleted"]
    sessions = read_sessions(db, "walk")
    assert len(sessions) == len(history) and all(s.turn_id for s in sessions)
