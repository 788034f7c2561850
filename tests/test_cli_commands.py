"""Every ``nats-scheduler`` operator command against a real provider and admin service.

The provider runs in the test's event loop; each command runs ``main()`` in a worker thread
(it starts its own event loop), exactly as from a terminal.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import anyio
import pytest

from nats_scheduler.admin.service import AdminService, start_admin_service
from nats_scheduler.cli.main import main
from nats_scheduler.command_line import default_actor
from nats_scheduler.jetstream.replica_reads import read_live_replicas
from nats_scheduler.names import Names
from nats_scheduler.provider import NatsSchedulerProvider
from nats_scheduler.seam import RunPayload, Schedule
from nats_scheduler.testing.handler import RecordingRunHandler
from tests.harness.servers import unique_prefix
from tests.providers import assert_clean, eventually, running

pytestmark = pytest.mark.anyio


@dataclass
class Cli:
    url: str
    prefix: str
    provider: NatsSchedulerProvider
    service: AdminService
    capsys: pytest.CaptureFixture[str]

    async def run(self, *argv: str) -> tuple[int, str, str]:
        """``nats-scheduler ARGV --url ... --prefix ...``: (exit code, stdout, stderr)."""
        self.capsys.readouterr()
        args = [*argv, "--url", self.url, "--prefix", self.prefix, "--timeout", "3"]
        try:
            code = await anyio.to_thread.run_sync(main, args)
        except SystemExit as exc:  # argparse refusals
            code = int(exc.code or 0)
        out, err = self.capsys.readouterr()
        return code, out, err

    async def json(self, *argv: str) -> object:
        code, out, err = await self.run(*argv, "--json")
        assert code == 0, err
        return json.loads(out)


@pytest.fixture
async def cli(nats_url: str, capsys: pytest.CaptureFixture[str]) -> AsyncIterator[Cli]:
    prefix = unique_prefix()
    handler = RecordingRunHandler()
    async with running(nats_url, prefix, handler) as provider:
        service = await start_admin_service(provider)
        await provider.apply(Schedule("berlin-daily", "Berlin daily", "0 9 * * *",
                                      "Europe/Berlin", True, RunPayload("agent", "report"), 1))
        await provider.apply(Schedule("tokyo", "Tokyo", "*/30 * * * *", "Asia/Tokyo", True,
                                      RunPayload("agent", "tick"), 1))
        try:
            yield Cli(nats_url, prefix, provider, service, capsys)
        finally:
            handler.close()
            await service.stop()


async def test_schedules_list_detail_and_json(cli: Cli) -> None:
    code, out, _ = await cli.run("schedules")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["DEPLOYMENT", "NAME", "STATE"]
    assert lines[1].startswith("berlin-daily") and "enabled" in lines[1]
    code, out, _ = await cli.run("schedules", "berlin-daily")
    assert code == 0 and "upcoming:" in out and "Europe/Berlin" in out
    listed = await cli.json("schedules", "--filter", "TOK")
    assert [s["deployment_id"] for s in listed] == ["tokyo"]  # type: ignore[union-attr, index]
    code, _, err = await cli.run("schedules", "nope")
    assert code == 3 and err.startswith("error: ")


async def test_hold_release_single_and_bulk(cli: Cli) -> None:
    held = await cli.json("hold", "tokyo", "--reason", "vendor outage", "--by", "alice")
    # a service without a login of its own proves nobody: it records the name the client
    # gives itself (user@host), and --by only as "on behalf of"
    hold = held["hold"]  # type: ignore[index]
    assert held["state"] == "held" and hold["by"] == default_actor()
    assert hold["on_behalf_of"] == "alice" and hold["caller"] is None
    code, out, _ = await cli.run("schedules")
    assert f"held by {default_actor()} on behalf of alice" in out
    code, out, _ = await cli.run("release", "tokyo", "--reason", "back")
    assert code == 0 and "enabled" in out
    code, out, _ = await cli.run("hold", "--filter", "berlin", "--reason", "maintenance")
    assert code == 0 and "held: berlin-daily" in out
    bulk = await cli.json("release", "--filter", "Y", "--reason", "done")
    assert bulk == {"changed": ["berlin-daily"], "unchanged": ["tokyo"], "changed_count": 1,
                    "unchanged_count": 1, "next_after": None, "truncated": False}
    # refusals: no reason (usage), empty filter, unknown deployment, both or neither target
    assert (await cli.run("hold", "tokyo"))[0] == 2
    code, _, err = await cli.run("hold", "--filter", " ", "--reason", "x")
    assert code == 2 and "filter" in err
    assert (await cli.run("hold", "nope", "--reason", "x"))[0] == 3
    assert (await cli.run("hold", "--reason", "x"))[0] == 2
    code, out, _ = await cli.run("hold", "nope", "--reason", "x", "--json")
    assert code == 3 and json.loads(out)["error"]["code"] == "not_found"


async def test_run_now_replay_runs_and_run(cli: Cli) -> None:
    first = await cli.json("run-now", "tokyo", "--reason", "check", "--by", "alice",
                           "--wait", "10")
    assert first["state"] == "dispatched" and first["requested_by"] == "alice"  # type: ignore[index]
    replay = await cli.json("replay", first["run_id"], "--wait")  # type: ignore[index]
    assert replay["replay_of"] == first["run_id"] and replay["state"] == "dispatched"  # type: ignore[index]
    code, out, _ = await cli.run("runs", "tokyo", "--limit", "1")
    assert code == 0 and replay["run_id"] in out  # type: ignore[index]
    assert f"--before {replay['run_id']}" in out  # type: ignore[index]
    page = await cli.json("runs", "tokyo", "--before", replay["run_id"])  # type: ignore[index]
    assert [r["run_id"] for r in page["runs"]] == [first["run_id"]]  # type: ignore[index]
    code, out, _ = await cli.run("run", first["run_id"])  # type: ignore[index]
    assert code == 0 and "requested by alice" in " ".join(out.split())
    assert (await cli.run("runs", "tokyo", "--limit", "0"))[0] == 2
    assert (await cli.run("replay", "nope"))[0] == 3


async def test_events_status_and_doctor(cli: Cli) -> None:
    await cli.run("run-now", "tokyo", "--wait")
    code, out, _ = await cli.run("events", "--deployment", "tokyo", "--type", "run.created",
                                 "--type", "run.dispatched", "--json")
    assert code == 0
    kinds = [json.loads(line)["type"] for line in out.splitlines()]
    assert kinds == ["run.created", "run.dispatched"]
    code, out, _ = await cli.run("events", "--history", "3")
    assert code == 0 and len(out.splitlines()) == 3
    code, out, _ = await cli.run("status")
    assert code == 0, out
    assert "replicas alive: 1" in out and cli.provider.identity in out and "health: ok" in out
    assert "history retention: 90 days, newest 10000 Runs per deployment" in out
    # this replica's own figures: the Run now above, created and dispatched by it
    figures = next(line for line in out.splitlines()
                   if line.startswith(f"  {cli.provider.identity}: "))
    assert "Runs created 1 (run_now 1), dispatched 1 (run_now 1), failed 0" in figures
    report = await cli.json("status")
    assert report["healthy"] is True and report["source"] == "service"  # type: ignore[index]
    replica = report["cluster"]["replicas"][0]  # type: ignore[index]
    assert replica["metrics"]["runs_created"] == {"run_now": 1}
    assert report["cluster"]["store"]["retention_runs"] == 10_000  # type: ignore[index]
    code, out, _ = await cli.run("doctor")
    assert code in (0, 7) and out.startswith("CHECK")
    assert "history retention" in out and f"stream {cli.prefix}_RUNINDEX" in out
    doctor = json.loads((await cli.run("doctor", "--json"))[1])
    assert {"name", "status", "detail"} <= set(doctor["checks"][0])


async def test_without_a_serving_process_reads_work_and_actions_say_why(cli: Cli) -> None:
    """The admin service stopped, the process goes on: reads come from the store, the
    replica is counted alive but serving nothing, and an action says so (not "no scheduler
    process is running": one is)."""
    await cli.service.stop()
    names = Names(cli.prefix)

    async def says_stopped() -> bool:  # its next beat carries the word
        live = await read_live_replicas(cli.provider.store.nc, names)
        return [r.admin_service for r in live] == ["stopped"]

    await eventually(says_stopped, timeout=10)
    code, out, _ = await cli.run("schedules")
    assert code == 0 and "berlin-daily" in out and "read from the store" in out
    code, out, _ = await cli.run("status")
    assert code == 0 and "replicas alive: 1 (0 serve actions)" in out
    assert f"{cli.provider.identity}: serves no actions: stopped while the process" in out
    code, _, err = await cli.run("run-now", "tokyo")
    assert code == 4 and ("1 scheduler replica is alive but none serves actions: stopped "
                          "while the process goes on") in err, err
    assert "no scheduler process is running" not in err
    assert_clean(err)


async def test_an_unreachable_server_is_a_clean_unavailable(capsys: pytest.CaptureFixture[str]
                                                             ) -> None:
    code = await anyio.to_thread.run_sync(
        main, ["schedules", "--url", "nats://127.0.0.1:1", "--timeout", "0.5"])
    err = capsys.readouterr().err
    assert code == 4 and err.startswith("error: ") and "Traceback" not in err
    assert_clean(err)


def _default_sigint() -> None:
    # A test run started in the background by a non-interactive shell (a CI runner, `nohup
    # ... &`) ignores SIGINT, and a child inherits that; Python then installs no Ctrl+C
    # handler. Give the child the disposition of a terminal's foreground process.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _spawn_cli(cli: Cli, *argv: str) -> subprocess.Popen[str]:
    env = {**os.environ, "ASTRABOX_NATS_URL": cli.url, "ASTRABOX_NATS_PREFIX": cli.prefix}
    return subprocess.Popen(
        [sys.executable, "-m", "nats_scheduler.cli.main", *argv],
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, preexec_fn=_default_sigint)


async def test_events_follow_prints_new_events_until_ctrl_c(cli: Cli) -> None:
    proc = _spawn_cli(cli, "events", "--follow", "--history", "0", "--deployment", "tokyo",
                      "--type", "run.dispatched")
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)  # type: ignore[arg-type]
    reader.start()
    try:
        # The follower starts within a second or two; Run now until it reports one.
        deadline = time.monotonic() + 20
        while not any("run.dispatched" in line for line in lines):
            assert time.monotonic() < deadline, "events --follow printed nothing"
            assert proc.poll() is None, proc.stderr.read()  # type: ignore[union-attr]
            await cli.run("run-now", "tokyo", "--wait")
            await anyio.sleep(0.3)  # poll interval for the subprocess's output
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=5)


def test_status_shows_each_replicas_own_measure_of_its_clock_against_the_stores() -> None:
    from nats_scheduler.admin.api import ReplicaView
    from nats_scheduler.admin.skew import store_offsets
    from nats_scheduler.cli.status import offset_text

    replicas = [ReplicaView(identity="a", server_offset=-0.0004),
                ReplicaView(identity="b", server_offset=20.0), ReplicaView(identity="old")]
    assert store_offsets(replicas) == {"a": -0.0004, "b": 20.0}
    assert [offset_text(store_offsets(replicas).get(r.identity)) for r in replicas] == [
        "+0.000s", "+20.000s", "-"]


def test_status_text_shows_the_retention_and_every_replica_figure() -> None:
    """Fixed data: a replica with figures, one of a version without them, and the store's
    retention (from the index stream). A few figures are columns, all are on a line."""
    from datetime import UTC, datetime

    import msgspec

    from nats_scheduler.admin.api import (
        ClusterStatus,
        Health,
        LatenessSummary,
        ReplicaMetrics,
        ReplicaView,
        StoreHealth,
    )
    from nats_scheduler.cli.status import status_text

    t = datetime(2026, 3, 28, 12, tzinfo=UTC)
    figures = ReplicaMetrics(
        runs_created={"schedule": 40, "run_now": 2}, runs_dispatched={"schedule": 39, "run_now": 2},
        runs_failed={"schedule": 1}, dispatch_attempts=44, dispatch_retries=2, takeovers=1,
        stale_fire_reads=3, store_errors={"transient": 5}, schedules={"held": 1, "active": 5},
        runs_in_flight=1,
        lateness={"started": LatenessSummary(count=40, p50=0.009, p95=0.02, p99=1.25, max=2.0),
                  "stored": LatenessSummary(count=40, p50=0.002, p95=0.003, p99=0.004, max=0.01)})
    status = ClusterStatus(
        replicas=[ReplicaView(identity="r-1", started_at=t, now=t, in_flight=["run-1"],
                              schedules_planned=6, metrics=figures, server_offset=-0.012,
                              server_offset_error=0.0005),
                  ReplicaView(identity="r-old", started_at=t, now=t)],
        leases=[], in_flight=["run-1"],
        store=StoreHealth(reachable=True, server_version="2.15.1", replicas=1, leader="n1",
                          detail="9 schedule events, 12 run events", retention_days=7.5,
                          retention_runs=250))
    text = status_text(status, Health(silent_stops=[], stuck_runs=[], failed_runs=[]))
    lines = text.splitlines()
    assert lines[:8] == [
        "store: reachable, server 2.15.1, replicas 1, leader n1, 9 schedule events, "
        "12 run events",
        "history retention: 7.5 days, newest 250 Runs per deployment",
        "replicas alive: 2 (2 serve actions)",
        "  IDENTITY  ACTIONS  STARTED               CLOCK VS STORE  IN FLIGHT  PLANNED  RUNS  "
        "FAILED  LATE P99 STORED/STARTED",
        "  r-1       yes      2026-03-28 12:00:00Z  -0.012s         1          6        42    "
        "1       4ms/1.2s",
        "  r-old     yes      2026-03-28 12:00:00Z  -               0          0        -     "
        "-       -",
        "figures since each replica started:",
        "  r-1: lateness p50/p99 stored 2ms/4ms (40 firings), started 9ms/1.2s (40 firings); "
        "Runs created 42 (run_now 2, schedule 40), dispatched 41 (run_now 2, schedule 39), "
        "failed 1 (schedule 1); attempts 44, retries 2, takeovers 1, stale firing reads 3; "
        "store errors transient 5; in flight 1; Schedules active 5, held 1",
    ]
    assert lines[8] == "  r-old: no figures (a provider version from before they were reported)"
    unknown = msgspec.structs.replace(status.store, retention_days=None, retention_runs=None)
    assert "history retention: not reported" in status_text(
        msgspec.structs.replace(status, store=unknown, replicas=[]),
        Health(silent_stops=[], stuck_runs=[], failed_runs=[]))
    assert "replicas alive: 0\nleases held: 0" in status_text(
        msgspec.structs.replace(status, replicas=[]),
        Health(silent_stops=[], stuck_runs=[], failed_runs=[]))


def test_status_health_names_the_answering_replicas_clock_against_the_stores() -> None:
    from nats_scheduler.admin.api import ClusterStatus, Health, StoreHealth
    from nats_scheduler.cli.status import status_text

    status = ClusterStatus(replicas=[], leases=[], in_flight=[],
                           store=StoreHealth(reachable=True))
    unmeasured = status_text(status, Health(silent_stops=[], stuck_runs=[], failed_runs=[]))
    assert "clock vs store" not in unmeasured
    measured = status_text(status, Health(silent_stops=[], stuck_runs=[], failed_runs=[],
                                          server_offset=20.0004, server_offset_error=0.0012))
    assert "  clock vs store (answering replica): +20.000s ±0.001s" in measured.splitlines()


def test_status_warns_of_a_herd_the_live_replicas_cannot_start_in_time() -> None:
    """The busiest minute the answering replica found (health), judged as doctor judges
    it: 100,000 Schedules due in one minute is more than two replicas start within the
    stated lateness; a hundred is not."""
    from datetime import UTC, datetime

    from nats_scheduler.admin.api import ClusterStatus, Health, StoreHealth
    from nats_scheduler.cli.status import status_text
    from nats_scheduler.core.herd import herd_capacity

    minute = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)
    status = ClusterStatus(replicas=[], leases=[], in_flight=[],
                           store=StoreHealth(reachable=True))

    def herd_line(due: int) -> str:
        health = Health(silent_stops=[], stuck_runs=[], failed_runs=[], busiest_minute=minute,
                        busiest_due=due, live_replicas=2)
        return next(line for line in status_text(status, health).splitlines()
                    if "busiest minute" in line)

    assert herd_capacity(2) < 100_000
    warned = herd_line(100_000)
    assert warned.startswith("  busiest minute: WARNING: 100,000 Schedule(s) due at "
                             "2026-12-03 09:00 UTC; 2 live replica(s)"), warned
    assert "replicas" in warned.split(":")[-1]
    assert "WARNING" not in herd_line(100)
    quiet = status_text(status, Health(silent_stops=[], stuck_runs=[], failed_runs=[]))
    assert "busiest minute" not in quiet  # replicas older than the field say nothing
