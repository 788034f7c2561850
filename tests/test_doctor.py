"""``run_doctor`` and ``start()``'s server checks: what the store can promise.

The decisions are pure functions tested with plain dicts (an old server binary is not
available here, so the version rule is proven on a fake server INFO); the gathering runs
against real servers: a plain one (sync_interval default), the production config
(sync_interval always, least-privilege users) and a 3-node cluster.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
from nats.js.api import StreamConfig

from nats_scheduler.admin.doctor import (
    CLOCK_CHECK,
    Check,
    DoctorReport,
    Status,
    Varz,
    clock_check,
    durability_check,
    parse_varz,
    permissions_check,
    replication_check,
    retention_check,
    run_doctor,
    version_check,
)
from nats_scheduler.admin.service import start_admin_service
from nats_scheduler.jetstream.connection import (
    MIN_SERVER_VERSION,
    parse_version,
    require_version,
    server_version,
)
from nats_scheduler.jetstream.permissions import probes
from nats_scheduler.jetstream.store import Store
from nats_scheduler.jetstream.store_reads import Retention
from nats_scheduler.names import Names
from nats_scheduler.natsserver.process import NatsServer, free_port
from nats_scheduler.seam import RunPayload, Schedule, SchedulerConfigurationError
from nats_scheduler.settings import NatsSettings
from tests.harness.clocks import OffsetClock
from tests.harness.cluster import NatsCluster
from tests.harness.servers import connect_fast, unique_prefix
from tests.providers import eventually, running
from tests.security_support import PASSWORDS, prod_server, store_state

pytestmark = pytest.mark.anyio

# =========================================================================== server version


@pytest.mark.parametrize(("text", "parsed"), [
    ("2.15.1", (2, 15, 1)), ("v2.12.3-beta.1", (2, 12, 3)), ("2.9", (0, 0, 0)), ("", (0, 0, 0)),
])
def test_parse_version(text: str, parsed: tuple[int, int, int]) -> None:
    assert parse_version(text) == parsed


@pytest.mark.parametrize("version", ["2.12.2", "2.11.9", "2.9.25", "", "garbage"])
def test_start_refuses_servers_older_than_2_12_3(version: str) -> None:
    """No old server binary is at hand: the rule is proven on the version text alone."""
    with pytest.raises(SchedulerConfigurationError) as info:
        require_version(version)
    assert "2.12.3 or newer" in str(info.value)
    assert version_check(version).status == Status.FAIL


@pytest.mark.parametrize("version", ["2.12.3", "2.12.5", "2.12.6", "2.12.10", "2.15.1", "3.0.0"])
def test_start_accepts_2_12_3_and_newer(version: str) -> None:
    """From 2.12.3 on; the doctor warns below 2.12.6, where the identity an operator action
    records (the server's Nats-Request-Info header) could be forged."""
    require_version(version)
    forgeable = parse_version(version) < (2, 12, 6)
    check = version_check(version)
    assert check.status == (Status.WARN if forgeable else Status.OK)
    assert ("CVE-2026-33223" in check.detail) == forgeable
    assert MIN_SERVER_VERSION == (2, 12, 3)


async def test_the_server_version_is_read_from_the_connection(nats_server: NatsServer) -> None:
    nc = await connect_fast(nats_server.url)
    try:
        version = server_version(nc)
        assert parse_version(version) >= MIN_SERVER_VERSION
        await Store(nc, NatsSettings()).check_server()  # a current server with JetStream
    finally:
        await nc.close()


async def test_start_refuses_a_server_without_jetstream(tmp_path: Path) -> None:
    server = NatsServer(tmp_path / "nojs", jetstream=False).start()
    try:
        nc = await connect_fast(server.url)
        try:
            with pytest.raises(SchedulerConfigurationError) as info:
                await Store(nc, NatsSettings()).check_server()
            assert "persistence" in str(info.value)
        finally:
            await nc.close()
        report = await run_doctor(NatsSettings(url=server.url))
        jetstream = report.get("jetstream")
        assert jetstream.status == Status.FAIL and "off on this server" in jetstream.detail
    finally:
        server.stop()


# =========================================================================== decisions


def test_varz_of_nats_server_2_15() -> None:
    """What 2.15.1's /varz really says (checked on this machine, see docs/configuration.md)."""
    always = {"jetstream": {"config": {"sync_interval": 120_000_000_000, "sync_always": True}}}
    lax = {"jetstream": {"config": {"sync_interval": 5_000_000_000}}}
    assert parse_varz("a", always) == Varz("a", True, 120_000_000_000)
    assert parse_varz("b", lax) == Varz("b", False, 5_000_000_000)
    assert parse_varz("c", {"jetstream": {}}).sync_always is None
    assert parse_varz("d", {}).sync_always is None


def test_durability_check() -> None:
    ok, lax = Varz("http://a", True, 1), Varz("http://b", False, 120_000_000_000)
    unknown = Varz("http://c", None, error="could not read")
    assert durability_check([ok, ok]).status == Status.OK
    warned = durability_check([ok, lax])
    assert warned.status == Status.WARN and "http://b (2m)" in warned.detail
    assert "sync_interval: always" in warned.detail
    assert durability_check([ok, unknown]).status == Status.WARN
    assert "unknown" in durability_check([]).detail


def test_durability_check_compares_what_the_provider_was_told_of_the_server() -> None:
    """``ASTRABOX_NATS_SERVER_SYNC_ALWAYS`` sizes the provider's atomic batches: the doctor
    says when it disagrees with what the monitoring endpoints report."""
    ok, lax = Varz("http://a", True, 1), Varz("http://b", False, 120_000_000_000)
    assert durability_check([ok], declared=True).status == Status.OK
    unset = durability_check([ok], declared=False)
    assert unset.status == Status.WARN
    assert "ASTRABOX_NATS_SERVER_SYNC_ALWAYS is not set" in unset.detail
    wrong = durability_check([lax], declared=True)
    assert wrong.status == Status.WARN and "unset it" in wrong.detail
    assert "unset it" not in durability_check([lax], declared=False).detail


def test_replication_check() -> None:
    single: tuple[str | None, int] = (None, 1)
    clustered: tuple[str | None, int] = ("astrabox", 3)
    advertised: tuple[str | None, int] = (None, 3)  # no stream yet: the server pool tells
    assert replication_check(*single, {"S_RUNS": 1}, 1).status == Status.OK
    assert replication_check(*single, {}, 3).status == Status.WARN
    r1 = replication_check(*clustered, {"S_RUNS": 1, "S_SCHEDULES": 3}, 3)
    assert r1.status == Status.WARN and "S_RUNS R1" in r1.detail and "3 nodes" in r1.detail
    assert "cluster astrabox" in r1.detail
    assert replication_check(*clustered, {"S_RUNS": 3}, 1).status == Status.OK  # streams decide
    assert replication_check(*clustered, {}, 1).status == Status.WARN  # will be created R1
    assert replication_check(*advertised, {}, 1).status == Status.WARN
    assert replication_check(*clustered, {"S_RUNS": 3, "S_SCHEDULES": 3}, 3).status == Status.OK


def test_permissions_check_names_the_role() -> None:
    every = [p.ability for p in probes(Names("P"))]
    reads = {"read events", "read the history index", "watch events", "read leases",
             "read replicas", "read through the admin service"}
    acts = reads | {"request actions (hold, release, Run now, Replay)"}
    writes = reads | {"append Schedule events", "append Run events", "change leases",
                      "announce replicas", "create streams", "serve the admin service"}

    def check(allowed: set[str]) -> Check:
        return permissions_check({a: a in allowed for a in every})

    assert "auditor" in check(reads).detail and check(reads).status == Status.OK
    assert "operator" in check(acts).detail
    assert "scheduler" in check(writes).detail and check(writes).status == Status.OK
    assert check(set(every)).status == Status.WARN  # can delete and purge
    assert check(reads | {"append Run events"}).status == Status.WARN  # partial writer
    # a scheduler user of a config from before the replicas bucket: cannot announce itself
    assert check(writes - {"announce replicas"}).status == Status.WARN
    # ... or from before 0.2: cannot read a deployment's last history entry from the leader
    old = check(writes - {"read the history index"})
    assert old.status == Status.WARN and "history entry" in old.detail
    assert check(set()).status == Status.FAIL


def test_clock_check() -> None:
    """Each replica's own offset from the store's clock (admin/skew.py's bounds)."""
    assert clock_check(None, reason="nobody answered").status == Status.WARN
    assert clock_check({"a": 0.05, "b": -0.2}).status == Status.OK
    warned = clock_check({"a": 0.0, "b": 0.5})
    assert warned.status == Status.WARN and "+0.500 s (b)" in warned.detail
    failed = clock_check({"a": 0.01, "b": -1.2})
    assert failed.status == Status.FAIL and "-1.200 s (b)" in failed.detail
    # a replica that has not measured yet (or an older version) is named, and not OK
    partial = clock_check({"a": 0.01}, ["old-1"])
    assert partial.status == Status.WARN and "old-1" in partial.detail
    assert clock_check({}, ["old-1"]).status == Status.WARN


def test_retention_check() -> None:
    """The index stream's limits are reported as they are; a missing index or a missing
    limit is a warning; limits other than this environment's settings are said, not failed."""
    defaults = NatsSettings()
    missing = retention_check("P_RUNINDEX", None, defaults)
    assert missing.status == Status.WARN
    assert "P_RUNINDEX missing" in missing.detail
    assert "no provider of this version" in missing.detail
    in_force = retention_check("P_RUNINDEX", Retention(90.0, 10_000), defaults)
    assert in_force.status == Status.OK
    assert in_force.detail.startswith("90 days, newest 10000 Runs per deployment (stream P_")
    assert "settings say" not in in_force.detail
    other = retention_check("P_RUNINDEX", Retention(7.5, 200), defaults)
    assert other.status == Status.OK
    assert other.detail.startswith("7.5 days, newest 200 Runs per deployment (stream "
                                   "P_RUNINDEX: max_age 7.5d, max_msgs_per_subject 200)")
    assert "these settings say 90 days, newest 10000 Runs per deployment" in other.detail
    unbounded = retention_check("P_RUNINDEX", Retention(None, 10_000), defaults)
    assert unbounded.status == Status.WARN and "no age limit" in unbounded.detail
    assert "max_age 0 (none)" in unbounded.detail
    assert "grows without bound" in unbounded.detail


def test_report_lines_and_ok() -> None:
    report = DoctorReport([Check("a", Status.OK, "fine"), Check("b", Status.WARN, "hm")])
    assert report.ok and report.lines() == ["[ok]   a: fine", "[warn] b: hm"]
    assert not DoctorReport([Check("c", Status.FAIL, "no")]).ok


# =========================================================================== live


async def test_doctor_on_a_plain_server(nats_server: NatsServer) -> None:
    """Defaults: sync_interval 2m is a warning, an unrestricted user too; nothing written."""
    prefix = unique_prefix()
    async with running(nats_server.url, prefix) as provider:
        await provider.apply(Schedule("dep", "n", "0 3 1 1 *", "UTC", True, RunPayload("t", "p")))
        service = await start_admin_service(provider)
        try:
            # joined, and its outage record decided (it creates the outage stream): the
            # streams are what they stay, so "nothing written" is the doctor's to keep
            await provider.until_ready()
            assert provider.runtime is not None and provider.runtime.outages is not None
            await asyncio.wait_for(provider.runtime.outages.decided.wait(), 30)
            nc = await connect_fast(nats_server.url)
            try:
                before = await store_state(nc, prefix)
                streams = {i.config.name for i in await nc.jetstream().streams_info()}
                report = await run_doctor(NatsSettings(url=nats_server.url, prefix=prefix),
                                          monitor_url=nats_server.http_url)
                # every probe was let through, and none changed anything
                assert await store_state(nc, prefix) == before
                assert {i.config.name for i in await nc.jetstream().streams_info()} == streams
            finally:
                await nc.close()
        finally:
            await service.stop()
    assert report.ok, report.lines()
    status = {c.name: c.status for c in report.checks}
    assert status["server version"] == status["jetstream"] == Status.OK
    assert status[f"stream {prefix}_RUNS"] == status[f"stream KV_{prefix}_LEASES"] == Status.OK
    assert status["replication"] == Status.OK  # a single server
    assert status["durability"] == Status.WARN
    assert "sync_interval is not 'always'" in report.get("durability").detail
    assert status["permissions"] == Status.WARN  # no users: anyone may delete streams
    assert status[CLOCK_CHECK] == Status.OK
    assert status["history retention"] == Status.OK
    assert report.get("history retention").detail.startswith(
        f"90 days, newest 10000 Runs per deployment (stream {prefix}_RUNINDEX")


async def test_doctor_reports_the_retention_the_index_stream_enforces(
    nats_server: NatsServer,
) -> None:
    """Before any provider started: a warning naming the missing index. After one started
    with its own retention: those limits, read from the server, not from the doctor's
    settings (which differ here, and the doctor says so)."""
    prefix = unique_prefix()
    before = await run_doctor(NatsSettings(url=nats_server.url, prefix=prefix))
    missing = before.get("history retention")
    assert missing.status == Status.WARN
    assert f"{prefix}_RUNINDEX missing" in missing.detail
    async with running(nats_server.url, prefix, retention_days=3.0, retention_runs=20):
        pass
    after = await run_doctor(NatsSettings(url=nats_server.url, prefix=prefix))
    in_force = after.get("history retention")
    assert in_force.status == Status.OK, after.lines()
    assert in_force.detail.startswith("3 days, newest 20 Runs per deployment")
    assert "these settings say 90 days" in in_force.detail
    same = await run_doctor(NatsSettings(url=nats_server.url, prefix=prefix,
                                         retention_days=3.0, retention_runs=20))
    assert "settings say" not in same.get("history retention").detail


async def test_doctor_fails_a_replica_whose_host_clock_is_seconds_off(
    nats_server: NatsServer,
) -> None:
    """The replica measures its host clock 3 s ahead of the store's (its presence beats'
    server timestamps) and says so; the doctor fails it, whatever the doctor's own clock."""
    prefix = unique_prefix()
    async with running(nats_server.url, prefix, clock=OffsetClock(3.0)) as provider:
        await provider.until_ready()
        report = await run_doctor(NatsSettings(url=nats_server.url, prefix=prefix))
    check = report.get(CLOCK_CHECK)
    assert check.status == Status.FAIL and provider.identity in check.detail, check
    # the offset as measured: 3 s give or take the bound's width (a round trip), e.g. +2.998
    shown = re.search(r"largest ([+-]\d+\.\d+) s", check.detail)
    assert shown is not None and abs(float(shown.group(1)) - 3.0) < 0.05, check


async def test_doctor_on_the_production_config_per_user(tmp_path: Path) -> None:
    with prod_server(tmp_path / "nats") as server:
        async with running(server.url, "SCHED", user="scheduler",
                           password=PASSWORDS["scheduler"], service_user="service",
                           service_password=PASSWORDS["service"],
                           server_sync_always=True) as provider:
            service = await start_admin_service(provider)
            try:
                # the clock check reads the replica's estimate: its first beat may come late
                runtime = provider.runtime
                assert runtime is not None
                await eventually(lambda: runtime.membership.server_offset() is not None,
                                 timeout=30)
                # every user that connects to the store (``service`` only serves requests)
                reports = {user: await run_doctor(
                    NatsSettings(url=server.url, user=user, password=PASSWORDS[user],
                                 server_sync_always=True),
                    monitor_url=server.http_url) for user in PASSWORDS if user != "service"}
            finally:
                await service.stop()
    for user, report in reports.items():
        assert report.ok, (user, report.lines())
        assert report.get("durability").status == Status.OK
        permissions = report.get("permissions")
        assert permissions.status == Status.OK and user in permissions.detail, permissions
        assert report.get(CLOCK_CHECK).status == Status.OK, (user, report.lines())


async def test_doctor_warns_on_r1_streams_in_a_cluster(nats_cluster: NatsCluster) -> None:
    prefix = unique_prefix()
    async with running(nats_cluster.urls, prefix, replicas=1, store_retry_seconds=12.0):
        pass
    report = await run_doctor(NatsSettings(url=nats_cluster.urls, prefix=prefix))
    check = report.get("replication")
    assert check.status == Status.WARN
    assert f"{prefix}_RUNS" in check.detail and "ASTRABOX_NATS_REPLICAS=3" in check.detail


async def test_doctor_fails_an_incompatible_stream_and_unreachable_monitor(
    nats_server: NatsServer,
) -> None:
    prefix = unique_prefix()
    nc = await connect_fast(nats_server.url)
    try:
        await nc.jetstream().add_stream(StreamConfig(
            name=f"{prefix}_RUNS", subjects=[f"{prefix}.run.*.*"], max_msgs_per_subject=1))
    finally:
        await nc.close()
    report = await run_doctor(NatsSettings(url=nats_server.url, prefix=prefix),
                              monitor_url=f"http://127.0.0.1:{free_port()}")
    assert not report.ok
    assert report.get(f"stream {prefix}_RUNS").status == Status.FAIL
    assert report.get(f"stream {prefix}_SCHEDULES").status == Status.WARN  # not created yet
    durability = report.get("durability")
    assert durability.status == Status.WARN and "could not read" in durability.detail
    assert report.get(CLOCK_CHECK).status == Status.WARN  # no scheduler process


async def test_doctor_without_a_server() -> None:
    report = await run_doctor(NatsSettings(url=f"nats://127.0.0.1:{free_port()}",
                                           connect_timeout=1.0))
    assert not report.ok
    assert report.get("connection").status == Status.FAIL
