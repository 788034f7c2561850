"""A replica is never invisible (issue 41): one whose admin service the server refuses says
so at start, is counted alive by ``status``, the console and ``doctor``, and an action says
why nobody serves it.

The live tests run the committed ``nats-server.conf`` (``tests/security_support.py``): there
the ``scheduler`` user may subscribe to nothing but its inboxes, so a replica started without
``ASTRABOX_NATS_SERVICE_USER`` fires, but the server drops its admin service's subscriptions.
Before this change it logged "admin service ... started", ``status`` said "replicas alive:
0" and ``hold`` said "no scheduler process is running". The unit tests pin the decisions.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec
import pytest
from textual.pilot import Pilot

from admin_tui.app import AstraboxConsole
from admin_tui.screens.cluster import ClusterScreen
from admin_tui.widgets.replica_summary import replica_text
from admin_tui.widgets.replica_table import ReplicaTable, process_cell
from admin_tui.widgets.store_panel import processes_text
from nats_scheduler.admin.api import ClusterStatus, Health, ReplicaView, StoreHealth
from nats_scheduler.admin.client import AdminClient
from nats_scheduler.admin.doctor import ADMIN_SERVICE_CHECK, Status, run_doctor
from nats_scheduler.admin.doctor_checks import admin_service_check
from nats_scheduler.admin.reader import with_live
from nats_scheduler.admin.serving import none_serves, why_not
from nats_scheduler.cli.status import status_text
from nats_scheduler.core.serving import Serving
from nats_scheduler.jetstream.permissions import ViolationLog
from nats_scheduler.jetstream.presence import PresenceValue
from nats_scheduler.jetstream.replica_reads import LiveReplica, live_replicas, read_live_replicas
from nats_scheduler.jetstream.store_reads import Stored
from nats_scheduler.names import HDR_KV_OPERATION, Names
from nats_scheduler.natsserver.process import NatsServer
from nats_scheduler.provider import NatsSchedulerProvider
from nats_scheduler.seam import RunPayload, RunState, Schedule
from nats_scheduler.settings import NatsSettings
from tests.providers import assert_clean, eventually, running
from tests.security_support import PASSWORDS, connect_as, prod_server, run_cli

pytestmark = pytest.mark.anyio

NAMES = Names("SCHED")
DUE = datetime(2031, 1, 1, 3, 0, tzinfo=UTC)
SERVICE_LOGIN = {"service_user": "service", "service_password": PASSWORDS["service"]}
SCHEDULER = {"user": "scheduler", "password": PASSWORDS["scheduler"]}
SETTINGS = ("ASTRABOX_NATS_SERVICE_USER", "ASTRABOX_NATS_SERVICE_PASSWORD",
            "ASTRABOX_NATS_SERVICE_CREDS")


def _without_settings(message: str) -> str:
    """``message`` with the settings it names removed (they are AstraBox's own words)."""
    for name in (*SETTINGS, "ASTRABOX_NATS_ADMIN_SERVICE"):
        message = message.replace(name, "")
    return message


async def _fires(provider: NatsSchedulerProvider) -> None:
    """The replica fires and dispatches: a due time becomes a DISPATCHED Run."""
    await provider.apply(Schedule("dep-a", "name", "0 3 1 1 *", "UTC", True,
                                  RunPayload("agent://report", "prompt")))
    fired = await provider.fire_due("dep-a", DUE)
    assert fired is not None

    async def dispatched() -> bool:
        return (await provider.get_run(fired.run_id)).state == RunState.DISPATCHED

    await eventually(dispatched, timeout=10)


async def _words(server: NatsServer) -> list[tuple[str, str | None]]:
    """(identity, admin_service word) of every live replica, read as the operator."""
    nc, _ = await connect_as(server, "operator")
    try:
        return [(r.identity, r.admin_service) for r in await read_live_replicas(nc, NAMES)]
    finally:
        await nc.close()


def _operator() -> NatsSettings:
    return NatsSettings(url="", user="operator", password=PASSWORDS["operator"])


def _start_records(caplog: pytest.LogCaptureFixture) -> tuple[list[str], list[str]]:
    """The admin service's ERROR records and its "started" INFO records."""
    errors = [r.getMessage() for r in caplog.records
              if r.levelno == logging.ERROR and "admin service" in r.getMessage()]
    started = [r.getMessage() for r in caplog.records
               if r.levelno == logging.INFO and "admin service for prefix" in r.getMessage()
               and r.getMessage().rstrip(")").split(" (")[0].endswith("started")]
    return errors, started


# ================================================================================ live


async def test_a_replica_without_the_service_login_fires_and_is_never_invisible(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="nats_scheduler")
    with prod_server(tmp_path / "nats") as server:
        async with running(server.url, "SCHED", **SCHEDULER) as provider:
            await provider.until_ready()
            identity = provider.identity
            # at start: an ERROR naming the missing settings and why, never "started"
            errors, started = _start_records(caplog)
            assert started == [], started
            assert len(errors) == 1, errors
            assert all(name in errors[0] for name in SETTINGS), errors[0]
            assert "the server refused its subscriptions" in errors[0]
            assert "permissions keep the scheduler's own login off" in errors[0]
            assert provider.runtime is not None
            assert provider.runtime.serving() == Serving.REFUSED
            await _fires(provider)  # it still fires: it must not stop AstraBox

            # the replicas bucket (read as the operator) says it does not serve, and why
            assert await _words(server) == [(identity, "refused")]

            # status counts it alive and not serving
            code, out, err = await run_cli(server, "operator", "status")
            assert code == 0, err
            assert "replicas alive: 1 (0 serve actions)" in out, out
            row = next(line for line in out.splitlines() if line.startswith(f"  {identity} "))
            assert row.split()[1] == "no", row
            assert f"{identity}: serves no actions: refused by the server" in out
            code, out, err = await run_cli(server, "auditor", "status")  # read-only reads it
            assert code == 0 and "replicas alive: 1 (0 serve actions)" in out, (out, err)

            # an action says replicas are alive but none serves, and why (exit 4)
            code, out, err = await run_cli(server, "operator", "hold", "dep-a", "--by",
                                           "alice", "--reason", "maintenance")
            assert code == 4, (out, err)
            assert ("1 scheduler replica is alive but none serves actions: refused by the "
                    "server: it runs without the service login") in err, err
            assert "ASTRABOX_NATS_SERVICE_USER" in err
            assert "no scheduler process is running" not in err
            assert_clean(_without_settings(err))
            assert provider.schedules.get("dep-a").hold is None  # type: ignore[union-attr]

            # doctor fails it, naming the replica, the reason and the fix
            report = await run_doctor(_operator().with_(url=server.url))
            check = report.get(ADMIN_SERVICE_CHECK)
            assert check.status == Status.FAIL, report.lines()
            assert identity in check.detail and "refused by the server" in check.detail
            assert "ASTRABOX_NATS_SERVICE_USER" in check.detail
            code, out, _ = await run_cli(server, "operator", "doctor")
            assert code == 7 and "admin service" in out

            # the console's Cluster view lists it, marked, and says why under the table
            await _console_shows_it(server, identity)


async def _until(pilot: Pilot[None], check: Callable[[], object], timeout: float = 10.0
                 ) -> None:
    for _ in range(int(timeout / 0.05)):
        if check():
            return
        await pilot.pause(0.05)
    assert check(), f"condition not met within {timeout} s"


async def _console_shows_it(server: NatsServer, identity: str) -> None:
    nc, log = await connect_as(server, "operator")
    try:
        app = AstraboxConsole(backend=AdminClient(nc, timeout=2.0, violations=log),
                              user="operator", debounce=0.05, health_debounce=0.1)
        async with app.run_test(size=(120, 36)) as pilot:
            await _until(pilot, lambda: "none serves actions" in app.act_reason)
            assert "refused by the server" in app.act_reason
            await pilot.press("3")

            def listed() -> bool:
                screen = app.screen
                return (isinstance(screen, ClusterScreen) and screen.status is not None
                        and screen.query_one(ReplicaTable).row_count == 1)

            await _until(pilot, listed)
            screen = app.screen
            assert isinstance(screen, ClusterScreen) and screen.status is not None
            table = screen.query_one(ReplicaTable)
            assert str(table.get_row(identity)[0]) == f"✗ {identity}"
            summary = replica_text(screen.selected_replica()).plain
            assert "serves no actions: refused by the server" in summary
            assert processes_text(screen.status).plain == "1 · 0 acts"
    finally:
        await nc.close()


async def test_a_replica_with_the_service_login_serves(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="nats_scheduler")
    with prod_server(tmp_path / "nats") as server:
        async with running(server.url, "SCHED", **SCHEDULER, **SERVICE_LOGIN) as provider:
            await provider.until_ready()
            errors, started = _start_records(caplog)
            assert errors == [] and len(started) == 1, (errors, started)
            assert await _words(server) == [(provider.identity, "serving")]
            code, out, err = await run_cli(server, "operator", "status")
            assert code == 0 and "replicas alive: 1 (1 serves actions)" in out, (out, err)
            await _fires(provider)
            code, _, err = await run_cli(server, "operator", "hold", "dep-a", "--by", "alice",
                                         "--reason", "maintenance")
            assert code == 0, err
            report = await run_doctor(_operator().with_(url=server.url))
            check = report.get(ADMIN_SERVICE_CHECK)
            assert check == check.__class__(ADMIN_SERVICE_CHECK, Status.OK,
                                            "1 of 1 live replica(s) serve it"), check


async def test_a_service_login_the_server_refuses_or_cannot_connect_is_said_too(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    """A service login whose user may not serve (``operator`` here): ``login-refused``, the
    ERROR names that user's permissions; one that cannot log in: ``failed``."""
    caplog.set_level(logging.INFO, logger="nats_scheduler")
    with prod_server(tmp_path / "nats") as server:
        wrong_user = {"service_user": "operator", "service_password": PASSWORDS["operator"]}
        async with running(server.url, "SCHED", **SCHEDULER, **wrong_user) as provider:
            await provider.until_ready()
            assert await _words(server) == [(provider.identity, "login-refused")]
            errors, started = _start_records(caplog)
            assert started == [] and len(errors) == 1, (errors, started)
            assert "its service login (ASTRABOX_NATS_SERVICE_USER) may not serve" in errors[0]
        wrong_password = {"service_user": "service", "service_password": "not-the-password"}
        async with running(server.url, "SCHED", **SCHEDULER, **wrong_password) as provider:
            await provider.until_ready()
            assert await _words(server) == [(provider.identity, "failed")]
            await _fires(provider)


# ================================================================================ decisions


def _stored(key: str, value: bytes, at: float, *, deleted: bool = False) -> Stored:
    headers = {HDR_KV_OPERATION: "DEL"} if deleted else {}
    return Stored(1, f"$KV.{NAMES.replicas_bucket}.{key}", value, headers,
                  datetime(2030, 1, 1, tzinfo=UTC) + timedelta(seconds=at))


def _value(identity: str, word: str | None = None) -> bytes:
    t = datetime(2030, 1, 1, tzinfo=UTC)
    return msgspec.json.encode(PresenceValue(identity=identity, started_at=t, beat_at=t,
                                             admin_service=word))


def test_the_key_says_whether_it_serves_and_old_values_still_decode() -> None:
    old = b'{"identity":"r-1","started_at":"2030-01-01T00:00:00Z","beat_at":"2030-01-01T00:00:00Z"}'
    assert msgspec.json.decode(old, type=PresenceValue).admin_service is None
    assert b'"admin_service":"refused"' in _value("r-1", "refused")
    assert b"admin_service" not in _value("r-1")  # small: absent rather than null
    assert len(_value("replica-with-a-long-host-name-12345", "login-refused")) < 200


def test_the_live_replicas_are_judged_by_the_servers_stamps_only() -> None:
    stored = [_stored("a", _value("a", "serving"), 10.0),
              _stored("b", _value("b", "refused"), 8.5),
              _stored("dead", _value("dead", "serving"), 5.0),  # 5 s before the newest
              _stored("gone", b"", 9.9, deleted=True),
              _stored("old", _value("old"), 9.0),
              _stored("hand-written", b"{}", 9.5),
              _stored("typed", b'{"identity": 5, "admin_service": [1]}', 9.6)]
    # a value that is not a replica's (foreign: hand-written, wrong types) is no replica
    assert live_replicas(stored, NAMES) == [
        LiveReplica("a", datetime(2030, 1, 1, tzinfo=UTC), "serving"),
        LiveReplica("b", datetime(2030, 1, 1, tzinfo=UTC), "refused"),
        LiveReplica("old", datetime(2030, 1, 1, tzinfo=UTC), None)]
    assert live_replicas([], NAMES) == []


def test_cluster_status_counts_the_replicas_that_did_not_answer() -> None:
    answered = [ReplicaView(identity="a", schedules_planned=3)]
    live = [LiveReplica("a", None, "serving"), LiveReplica("b", None, "refused")]
    merged = with_live(answered, live)
    assert [(r.identity, r.answered, r.admin_service, r.schedules_planned) for r in merged] == [
        ("a", True, "serving", 3), ("b", False, "refused", 0)]
    assert with_live(answered, None)[0].identity == "a"  # the bucket unreadable: answers


def test_status_text_marks_a_replica_that_serves_no_actions() -> None:
    t = datetime(2030, 1, 1, tzinfo=UTC)
    status = ClusterStatus(
        replicas=[ReplicaView(identity="r-1", started_at=t, admin_service="serving"),
                  ReplicaView(identity="r-2", started_at=t, admin_service="refused",
                              answered=False)],
        leases=[], in_flight=[], store=StoreHealth(reachable=True))
    lines = status_text(status, Health(silent_stops=[], stuck_runs=[], failed_runs=[]))
    assert "replicas alive: 2 (1 serves actions)" in lines
    row = next(line for line in lines.splitlines() if line.startswith("  r-2 "))
    assert row.split()[1:2] == ["no"] and row.split()[4:6] == ["-", "-"], row
    assert "  r-2: serves no actions: refused by the server" in lines
    assert str(process_cell(status.replicas[1])) == "✗ r-2"
    assert str(process_cell(status.replicas[0])) == "r-1"


def test_an_action_says_why_nobody_serves_it() -> None:
    assert none_serves([]) is None  # nobody alive: "no scheduler process is running"
    assert none_serves(["serving"]) is None  # one says it serves: it did not answer in time
    assert none_serves(["refused", None]) is None  # an older replica may serve
    message = none_serves(["refused", "refused", "off"])
    assert message is not None and message.startswith(
        "3 scheduler replicas are alive but none serves actions: 2 refused by the server")
    assert "; 1 turned off (ASTRABOX_NATS_ADMIN_SERVICE=0)" in message
    assert_clean(_without_settings(message))
    for word in Serving:
        assert_clean(_without_settings(why_not(word)))
    assert why_not("from-the-future") == "it says 'from-the-future'"
    assert len(why_not("x" * 100_000)) < 60  # a hostile key cannot swamp a line


def test_the_doctors_admin_service_check() -> None:
    assert admin_service_check(None, "no answer").status == Status.WARN
    assert admin_service_check({}).status == Status.WARN
    assert admin_service_check({"a": "serving", "b": "serving"}).status == Status.OK
    refused = admin_service_check({"a": "refused"})
    assert refused.status == Status.FAIL and "a: refused by the server" in refused.detail
    some = admin_service_check({"a": "serving", "b": "login-refused"})
    assert some.status == Status.WARN and some.detail.startswith("1 of 2 live")
    assert admin_service_check({"a": "serving", "b": "off"}).status == Status.OK
    assert admin_service_check({"a": "serving", "b": None}).status == Status.WARN
    many = admin_service_check({f"r{i}": "refused" for i in range(9)})
    assert "and 4 more" in many.detail


async def test_the_refusal_log_keeps_its_marks_when_it_drops_old_refusals() -> None:
    log = ViolationLog()
    error = Exception('nats: permissions violation for subscription to "x.1"')
    for _ in range(3 * ViolationLog.KEPT):
        await log.on_error(error)
    assert len(log.refusals) <= 2 * ViolationLog.KEPT  # bounded on a connection of months
    mark = log.mark()
    assert not log.refused_since(mark, "subscription", "x.2")
    await log.on_error(Exception('nats: permissions violation for subscription to "X.2"'))
    assert log.refused_since(mark, "subscription", "x.2")
    assert log.since(mark) == [("subscription", "x.2")]
