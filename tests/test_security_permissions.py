"""The users of nats-server.conf, each proven to do its job and nothing more.

Every test starts a server running the committed ``nats-server.conf`` (test ports, data
dir and passwords substituted; ``tests/security_support.py``). "Works" is proven by doing
the role's whole job and finding no permission violation of that user in the server's
log; "refused" by the server's refusal (a ``ViolationLog`` probe) AND by the store being
unchanged afterwards. docs/configuration.md lists every rule with the test that proves it.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import nats.errors
import nats.js.errors
import pytest

from nats_scheduler import NatsSchedulerProvider
from nats_scheduler.admin.api import AdminError, ErrorCode
from nats_scheduler.admin.client import AdminClient
from nats_scheduler.admin.doctor import Status, run_doctor
from nats_scheduler.admin.permissions import Probe, ViolationLog, probes
from nats_scheduler.jetstream.connection import ConnectMisconfigured, FailureKind, connect
from nats_scheduler.jetstream.presence import Presence
from nats_scheduler.names import Names
from nats_scheduler.natsserver.config import CLUSTER_DIR, PASSWORD_ENV, REPO_CONFIG
from nats_scheduler.natsserver.process import find_nats_server
from nats_scheduler.seam import (
    EnqueueRequest,
    RunPayload,
    RunState,
    Schedule,
    SchedulerConfigurationError,
    Trigger,
)
from nats_scheduler.settings import NatsSettings
from nats_scheduler.testing.handler import RecordingRunHandler
from tests.providers import MongoBackend, assert_clean, eventually, settings
from tests.security_support import (
    PASSWORDS,
    connect_as,
    prod_server,
    run_cli,
    scheduler_with_service,
    store_state,
    violations,
)

pytestmark = pytest.mark.anyio

NAMES = Names("SCHED")
DUE = datetime(2031, 1, 1, 3, 0, tzinfo=UTC)
MUTATING = {p.ability for p in probes(NAMES) if p.mutating}
READS = {p.ability for p in probes(NAMES) if not p.mutating}


def schedule(dep: str, version: int = 1) -> Schedule:
    return Schedule(dep, f"name of {dep}", "0 3 1 1 *", "UTC", True,
                    RunPayload("agent://report", f"prompt of {dep}"), version)


async def abilities(nc, log: ViolationLog) -> dict[str, bool]:  # type: ignore[no-untyped-def]
    return {p.ability: await log.allowed(nc, p) for p in probes(NAMES)}


async def announce(provider: NatsSchedulerProvider, names: Names = NAMES) -> None:
    """Two replicas announce themselves through the provider's connection, see each other
    (a put and a watch of the replicas bucket each), and leave again (a delete)."""
    replicas = [await Presence.open(provider.store.js, names, f"replica-{i}", replicas=1,
                                    beat_seconds=0.2) for i in (1, 2)]
    for replica in replicas:
        await replica.start()
    try:
        for replica in replicas:
            await eventually(lambda r=replica: r.live() == ("replica-1", "replica-2"), timeout=10)
    finally:
        for replica in replicas:
            await replica.stop()


async def populate(provider: NatsSchedulerProvider) -> str:
    """Two Schedules, a fired Run and a Run now, both dispatched; returns a Run ID."""
    await provider.apply(schedule("dep-a"))
    await provider.apply(schedule("dep-b"))
    fired = await provider.fire_due("dep-a", DUE)
    assert fired is not None
    await provider.enqueue(EnqueueRequest("dep-b", Trigger.RUN_NOW, requested_by="test"))

    async def all_dispatched() -> bool:
        runs = [*await provider.list_runs("dep-a"), *await provider.list_runs("dep-b")]
        return len(runs) == 2 and all(r.state == RunState.DISPATCHED for r in runs)

    await eventually(all_dispatched, timeout=10)
    return fired.run_id


# ================================================================================ scheduler


async def test_scheduler_runs_the_provider_and_the_admin_service(tmp_path: Path) -> None:
    """Rule S1: ``scheduler`` can do everything a provider process and its service do."""
    with prod_server(tmp_path / "nats") as server:
        async with scheduler_with_service(server) as (provider, _service):
            run_id = await populate(provider)
            await provider.hold("dep-a", by="ops", reason="maintenance")
            await provider.release("dep-a", by="ops", reason="done")
            await provider.delete("dep-b")
            assert (await provider.get_run(run_id)).state == RunState.DISPATCHED
            # leases: read back (direct get) and watched, as the takeover sweep does
            kv = await provider.store.js.key_value(NAMES.leases_bucket)
            await kv.put("probe-key", b"{}")
            assert (await kv.get("probe-key")).value == b"{}"
            await kv.delete("probe-key")
            # the live replicas: announced, watched, read back, left
            await announce(provider)
            replicas = await provider.store.js.key_value(NAMES.replicas_bucket)
            await replicas.put("probe-key", b"{}")
            assert (await replicas.get("probe-key")).value == b"{}"
            await replicas.delete("probe-key")
            # the service answers an operator, counting replicas (a scatter-gather)
            nc, _ = await connect_as(server, "operator")
            try:
                status = await AdminClient(nc, timeout=2.0).cluster_status()
                assert [r.identity for r in status.replicas] == [provider.identity]
            finally:
                await nc.close()
        # a second process on the existing store: verifies instead of creating, and records
        # the outage since the first one stopped (its one write is allowed)
        async with scheduler_with_service(server) as (again, _):
            assert again.schedules.get("dep-a") is not None
            assert again.runtime is not None
            await asyncio.wait_for(again.runtime.outages.decided.wait(), 30)
            assert again.runtime.outages.recorded is not None
        assert violations(server, "scheduler") == []
        # with no process running, the auditor reads the account from the store itself
        nc, _ = await connect_as(server, "auditor")
        try:
            client = AdminClient(nc, timeout=1.0)
            account = await client.explain("dep-a")
            assert (account.deployment_id, client.last_source) == ("dep-a", "store")
            assert not any("not recorded" in note for note in account.notes)
        finally:
            await nc.close()
        assert violations(server, "auditor") == []
        nc, log = await connect_as(server, "scheduler")
        try:
            can = await abilities(nc, log)
        finally:
            await nc.close()
    assert {a for a, ok in can.items() if ok} == {
        "read events", "read the history index", "watch events", "read leases",
        "read replicas", "append Schedule events", "append Run events", "change leases",
        "announce replicas", "create streams"}


async def test_the_service_user_serves_the_admin_service_and_nothing_else(
        tmp_path: Path) -> None:
    """Rule V1: ``service`` (account SCHED_ADMIN) serves the endpoints and their discovery;
    it can publish nothing but answers, so nobody inside that account can send a request
    whose identity header the server did not write."""
    with prod_server(tmp_path / "nats") as server:
        async with scheduler_with_service(server) as (provider, service):
            await populate(provider)
            assert service.proves_callers
            nc, log = await connect_as(server, "service")
            try:
                can = await abilities(nc, log)
                hold = Probe("send a request inside the account",
                             NAMES.admin_subject("schedules.hold"), payload=b"{}")
                assert not await log.allowed(nc, hold)
            finally:
                await nc.close()
    assert {a for a, ok in can.items() if ok} == {"serve the admin service"}


async def test_scheduler_cannot_destroy_or_leave_its_namespace(tmp_path: Path) -> None:
    """Rule S2: ``scheduler`` cannot delete/edit streams, delete an event, purge anything but
    the Run history (retention), or touch other subjects."""
    with prod_server(tmp_path / "nats") as server:
        async with scheduler_with_service(server) as (provider, _):
            await populate(provider)
            nc, log = await connect_as(server, "scheduler")
            try:
                before = await store_state(nc)
                refused = [
                    Probe("other subjects", "OTHER.events"),
                    Probe("other streams", "$JS.API.STREAM.CREATE.OTHER",
                          payload=b'{"name": "OTHER"}'),
                    Probe("edit streams", f"$JS.API.STREAM.UPDATE.{NAMES.runs_stream}",
                          payload=b"{}"),
                    Probe("delete own stream", f"$JS.API.STREAM.DELETE.{NAMES.runs_stream}"),
                    Probe("purge the Schedules",
                          f"$JS.API.STREAM.PURGE.{NAMES.schedules_stream}"),
                    Probe("purge the history index",
                          f"$JS.API.STREAM.PURGE.{NAMES.index_stream}"),
                    Probe("delete an event", f"$JS.API.STREAM.MSG.DELETE.{NAMES.runs_stream}",
                          payload=b'{"seq": 1}'),
                    Probe("act as operator", f"{NAMES.admin_prefix}.schedules.hold",
                          payload=b"{}"),
                    Probe("listen to everything", ">", kind="subscription"),
                    Probe("snoop on the system", "$SYS.>", kind="subscription"),
                ]
                for probe in refused:
                    assert not await log.allowed(nc, probe), probe
                after = await store_state(nc)
            finally:
                await nc.close()
        assert after == before


# ================================================================================ operator


async def test_operator_console_and_cli_work(tmp_path: Path) -> None:
    """Rule O1: ``operator`` reads, watches and requests every action via the service.

    The console and the command line both speak through ``AdminClient``; with no
    scheduler process running, its reads fall back to the store directly.
    """
    with prod_server(tmp_path / "nats") as server:
        nc, log = await connect_as(server, "operator")
        try:
            client = AdminClient(nc, timeout=2.0, violations=log)
            async with scheduler_with_service(server) as (provider, _):
                run_id = await populate(provider)
                assert await client.can_act() == (True, None)
                assert {s.deployment_id for s in await client.list_schedules()} == {
                    "dep-a", "dep-b"}
                assert client.last_source == "service"
                assert (await client.get_schedule("dep-a")).schedule.name == "name of dep-a"
                assert [r.run_id for r in (await client.list_runs("dep-a")).runs] == [run_id]
                held = await client.hold("dep-a", by="alice", reason="incident 42")
                # the name a client gives itself is not proof: the server's word is recorded
                assert held.hold is not None and held.hold.by == "operator"
                assert (await client.release("dep-a", by="alice", reason="fixed")).hold is None
                bulk = await client.hold_bulk("dep-", by="alice", reason="freeze")
                assert sorted(bulk.changed) == ["dep-a", "dep-b"]
                await client.release_bulk("dep-", by="alice", reason="thaw")
                now = await client.run_now("dep-a", by="alice", reason="check")
                replay = await client.replay(run_id, by="alice", reason="again")
                assert replay.replay_of == run_id and now.requested_by == "operator"
                assert (await client.cluster_status()).replicas
                await client.health()
                assert (await client.load_ahead(1)).capacity is not None  # the service's
                events = await client.recent_events(deployment_id="dep-a", history=20)
                assert "schedule.held" in {type(e).__struct_config__.tag for e in events}
            # no scheduler process: reads come straight from the store
            assert {s.deployment_id for s in await client.list_schedules()} == {
                "dep-a", "dep-b"}
            assert client.last_source == "store"
            assert (await client.get_run(run_id)).run_id == run_id
            assert len((await client.list_runs("dep-a")).runs) == 3
            await client.cluster_status()
            await client.health()
            assert await client.recent_events(history=5)
            assert violations(server, "operator") == []
            can = await abilities(nc, log)
        finally:
            await nc.close()
    assert {a for a, ok in can.items() if ok} == READS | {
        "request actions (hold, release, Run now, Replay)"}


async def test_operator_cannot_write_events_or_change_streams(tmp_path: Path) -> None:
    """Rule O2: ``operator`` cannot append events, change leases, create/delete/purge."""
    with prod_server(tmp_path / "nats") as server:
        async with scheduler_with_service(server) as (provider, _):
            await populate(provider)
            nc, log = await connect_as(server, "operator")
            try:
                before = await store_state(nc)
                can = await abilities(nc, log)
                await _direct_writes_fail(nc)
                after = await store_state(nc)
            finally:
                await nc.close()
    assert {a for a in MUTATING if can[a]} == {"request actions (hold, release, Run now, Replay)"}
    assert after == before


async def _direct_writes_fail(nc) -> None:  # type: ignore[no-untyped-def]
    """Real attempts (not probes) at writing, deleting and purging: each one refused."""
    js = nc.jetstream(timeout=0.3)
    attempts = [
        lambda: js.publish(NAMES.run_subject("dep-a", "forged"), b"{}"),
        lambda: js.publish(NAMES.schedule_subject("dep-a"), b"{}"),
        lambda: js.publish(f"$KV.{NAMES.leases_bucket}.forged", b"{}"),
        lambda: js.publish(f"$KV.{NAMES.replicas_bucket}.forged", b"{}"),
        lambda: js.purge_stream(NAMES.runs_stream),
        lambda: js.delete_stream(NAMES.schedules_stream),
        lambda: js.delete_msg(NAMES.runs_stream, 1),
        lambda: js.add_stream(name="SCHED_EVIL", subjects=["SCHED.evil.>"]),
        lambda: js.update_stream(name=NAMES.runs_stream, subjects=[NAMES.runs_filter],
                                 max_msgs=1),
    ]

    async def refused(attempt) -> bool:  # type: ignore[no-untyped-def]
        try:
            await asyncio.wait_for(attempt(), 0.5)
        except (TimeoutError, nats.errors.TimeoutError, nats.js.errors.Error):
            return True
        return False

    # concurrently: each refusal is a timeout (the server drops a refused request)
    assert all(await asyncio.gather(*(refused(a) for a in attempts)))


# ================================================================================ auditor


async def test_auditor_views_streams_kv_and_watches_events(tmp_path: Path) -> None:
    """Rule A1: ``auditor`` reads streams, leases and events, and the service's reads."""
    with prod_server(tmp_path / "nats") as server:
        nc, log = await connect_as(server, "auditor")
        try:
            client = AdminClient(nc, timeout=2.0, violations=log)
            async with scheduler_with_service(server) as (provider, _):
                run_id = await populate(provider)
                await provider.store.leases.put("audit-key", b'{"probe": 1}')
                replica = await Presence.open(provider.store.js, NAMES, "replica-1",
                                              replicas=1, beat_seconds=60)
                await replica.start()
                try:  # the live replicas, as `nats kv ls SCHED_REPLICAS` shows them
                    replicas = await nc.jetstream(timeout=2.0).key_value(NAMES.replicas_bucket)
                    # the running provider has joined too
                    assert sorted(await replicas.keys()) == sorted(
                        ["replica-1", NAMES.replica_key(provider.identity)])
                    entry = await replicas.get("replica-1")
                    assert b'"identity":"replica-1"' in (entry.value or b"")
                finally:
                    await replica.stop()
                assert [s.deployment_id for s in await client.list_schedules()] == [
                    "dep-a", "dep-b"]
                assert (await client.get_run(run_id)).state == RunState.DISPATCHED
                await client.get_schedule("dep-b")
                await client.cluster_status()
                await client.health()
                assert (await client.load_ahead(1)).capacity is not None  # the service's
            assert (await client.list_runs("dep-a")).runs[0].run_id == run_id  # from the store
            events = await client.recent_events(history=50)
            assert {"schedule.applied", "run.created", "run.dispatched"} <= {
                type(e).__struct_config__.tag for e in events}
            js = nc.jetstream(timeout=2.0)
            for stream in (NAMES.schedules_stream, NAMES.runs_stream):
                assert (await js.stream_info(stream)).state.messages > 0
            last = await js.get_last_msg(NAMES.runs_stream, NAMES.run_subject("dep-a", run_id))
            assert b"run.dispatched" in last.data
            kv = await js.key_value(NAMES.leases_bucket)
            assert (await kv.get("audit-key")).value == b'{"probe": 1}'
            assert "audit-key" in await kv.keys()
            assert violations(server, "auditor") == []
            can = await abilities(nc, log)
        finally:
            await nc.close()
    assert {a for a, ok in can.items() if ok} == READS


async def test_auditor_every_action_is_refused_and_nothing_changes(tmp_path: Path) -> None:
    """Rule A2: ``auditor`` cannot request actions, publish, purge or delete anything."""
    with prod_server(tmp_path / "nats") as server:
        async with scheduler_with_service(server) as (provider, _):
            run_id = await populate(provider)
            nc, log = await connect_as(server, "auditor")
            try:
                before = await store_state(nc)
                client = AdminClient(nc, timeout=0.3, violations=log)
                allowed, why = await client.can_act()
                assert not allowed and why and "may not request actions" in why
                assert_clean(why)
                actions = [
                    lambda: client.hold("dep-a", by="mallory", reason="x"),
                    lambda: client.release("dep-a", by="mallory", reason="x"),
                    lambda: client.hold_bulk("dep-", by="mallory", reason="x"),
                    lambda: client.release_bulk("dep-", by="mallory", reason="x"),
                    lambda: client.run_now("dep-a", by="mallory"),
                    lambda: client.replay(run_id, by="mallory"),
                ]
                for action in actions:
                    with pytest.raises(AdminError) as info:
                        await action()
                    assert info.value.code == ErrorCode.FORBIDDEN, info.value.message
                    assert_clean(info.value.message)
                can = await abilities(nc, log)
                await _direct_writes_fail(nc)
                after = await store_state(nc)
            finally:
                await nc.close()
            assert provider.schedules.get("dep-a").hold is None  # type: ignore[union-attr]
            assert len(await provider.list_runs("dep-a")) == 1
    assert not any(can[a] for a in MUTATING)
    assert after == before


# ================================================================================ the CLI

READ_COMMANDS = [["schedules"], ["schedules", "dep-a"], ["runs", "dep-a"], ["events"],
                 ["status"], ["explain", "dep-a"]]


async def test_the_command_line_as_operator_and_as_auditor(tmp_path: Path) -> None:
    """Rules O1 and A2 through ``nats-scheduler``: reads for both, actions for the operator.

    The auditor's refused action exits non-zero with a clean message and changes nothing.
    """
    with prod_server(tmp_path / "nats") as server:
        async with scheduler_with_service(server) as (provider, _):
            run_id = await populate(provider)
            for user in ("operator", "auditor"):
                for argv in READ_COMMANDS:
                    code, out, err = await run_cli(server, user, *argv, "--json")
                    assert code in (0, 7) and out, (user, argv, code, err)  # 7: unhealthy
            actions = [["hold", "dep-a", "--reason", "incident", "--by", "alice"],
                       ["release", "dep-a", "--reason", "fixed", "--by", "alice"],
                       ["run-now", "dep-a", "--reason", "check"],
                       ["replay", run_id, "--reason", "again"],
                       ["hold", "--filter", "dep-", "--reason", "freeze"]]
            for argv in actions:
                code, _, err = await run_cli(server, "operator", *argv)
                assert code == 0, (argv, err)
            assert violations(server, "operator") == []
            nc, _ = await connect_as(server, "auditor")
            try:
                before = await store_state(nc)
                for argv in actions:
                    code, out, err = await run_cli(server, "auditor", *argv, "--timeout", "0.5")
                    assert code == 5, (argv, code, err)  # forbidden
                    assert err.startswith("error: ") and not out
                    assert_clean(err)
                after = await store_state(nc)
            finally:
                await nc.close()
    assert after == before


# ================================================================================ nobody


async def test_clients_without_valid_credentials_are_refused(tmp_path: Path) -> None:
    """Rule N1: no anonymous access; a wrong password is refused like none."""
    with prod_server(tmp_path / "nats") as server:
        for auth in ({}, {"user": "auditor", "password": "wrong"}, {"user": "nobody",
                                                                    "password": "x"}):
            with pytest.raises(ConnectMisconfigured) as info:
                await connect(NatsSettings(url=server.url, **auth), "intruder")  # type: ignore[arg-type]
            assert info.value.failure.kind is FailureKind.REFUSED_CREDENTIALS
        provider = NatsSchedulerProvider(settings(server.url, "SCHED"))
        provider.configure(repository_backend=MongoBackend())
        with pytest.raises(SchedulerConfigurationError) as failed:
            await provider.start(RecordingRunHandler())
        assert "refused the configured credentials" in str(failed.value)
        report = await run_doctor(NatsSettings(url=server.url, user="auditor", password="no"))
        assert report.get("connection").status == Status.FAIL
        assert "refused the configured credentials" in report.get("connection").detail


async def test_the_config_follows_another_prefix(tmp_path: Path) -> None:
    """render_config(prefix=...) rewrites every name: a provider under ACME works."""
    with prod_server(tmp_path / "nats", prefix="ACME") as server:
        async with scheduler_with_service(server, "ACME") as (provider, _):
            await provider.apply(schedule("dep-x"))
            assert await provider.fire_due("dep-x", DUE) is not None
            await announce(provider, Names("ACME"))
            nc, log = await connect_as(server, "scheduler")
            try:
                assert not await log.allowed(nc, Probe("old prefix", "SCHED.sched.dep-x"))
            finally:
                await nc.close()
        assert violations(server, "scheduler") == ["publish SCHED.sched.dep-x"]


def test_passwords_come_from_the_server_environment() -> None:
    """Rule P1: no password in the file; without $NATS_<USER>_PASSWORD the server won't start.

    ``nats-server -t`` checks the committed files exactly as a platform team would start
    them (the main file and the cluster nodes, which include it).
    """
    text = REPO_CONFIG.read_text("utf-8")
    for user, variable in PASSWORD_ENV.items():
        assert f'user: "{user}"' in text
        assert f"password: ${variable}" in text
    assert all(pw not in text for pw in PASSWORDS.values())
    env = {k: v for k, v in os.environ.items() if k not in PASSWORD_ENV.values()}
    with_passwords = {**env, **{PASSWORD_ENV[u]: pw for u, pw in PASSWORDS.items()}}
    for path in (REPO_CONFIG, *sorted(CLUSTER_DIR.glob("node-*.conf"))):
        check = [find_nats_server(), "-t", "-c", str(path)]
        ok = subprocess.run(check, env=with_passwords, capture_output=True, text=True,
                            cwd=REPO_CONFIG.parent, timeout=30)
        assert ok.returncode == 0, ok.stderr
        refused = subprocess.run(check, env=env, capture_output=True, text=True,
                                 cwd=REPO_CONFIG.parent, timeout=30)
        assert refused.returncode != 0 and "NATS_SCHEDULER_PASSWORD" in refused.stderr
