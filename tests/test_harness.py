"""Smoke tests of the test harness itself: real servers, a real cluster, real faults."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import nats
import nats.js.errors
import pytest
from nats.js.api import StorageType
from nats.js.client import JetStreamContext

from nats_scheduler.natsserver.process import NatsServer, find_nats_server
from tests.harness.cluster import NatsCluster
from tests.harness.servers import (
    DockerUnavailable,
    connect_fast,
    testcontainers_nats,
    unique_prefix,
)

# Errors a JetStream publish raises while a stream has no leader or the client reconnects.
TRANSIENT = (nats.errors.Error, TimeoutError)


def test_find_nats_server_returns_executable() -> None:
    path = find_nats_server()
    assert os.path.isfile(path) and os.access(path, os.X_OK)
    out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10)
    assert out.returncode == 0 and "v2." in out.stdout


def test_unique_prefix_is_a_valid_setting() -> None:
    prefixes = {unique_prefix() for _ in range(100)}
    assert len(prefixes) == 100
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{1,32}", p) for p in prefixes)


@pytest.mark.anyio
async def test_single_server_stream_and_pull_consumer(nats_server: NatsServer) -> None:
    prefix = unique_prefix()
    nc = await connect_fast(nats_server.url)
    try:
        js = nc.jetstream()
        await js.add_stream(name=prefix, subjects=[f"{prefix}.>"])
        for i in range(10):
            ack = await js.publish(f"{prefix}.ev", f"msg-{i}".encode())
            assert ack.seq == i + 1
        sub = await js.pull_subscribe(f"{prefix}.ev", durable="reader", stream=prefix)
        got: list[bytes] = []
        deadline = time.monotonic() + 5
        while len(got) < 10 and time.monotonic() < deadline:
            for msg in await sub.fetch(10 - len(got), timeout=2):
                got.append(msg.data)
                await msg.ack_sync()
        assert got == [f"msg-{i}".encode() for i in range(10)]
        await js.delete_stream(prefix)
    finally:
        await nc.close()


@pytest.mark.anyio
async def test_connect_fast_fails_fast_on_dead_port() -> None:
    from nats_scheduler.natsserver.process import free_port

    start = time.monotonic()
    with pytest.raises((nats.errors.NoServersError, OSError, TimeoutError)):
        await connect_fast(f"nats://127.0.0.1:{free_port()}")
    assert time.monotonic() - start < 3


@pytest.mark.anyio
async def test_kill_and_restart_keeps_stream_data(fresh_nats_server: NatsServer) -> None:
    server = fresh_nats_server
    nc = await connect_fast(server.url)
    js = nc.jetstream()
    await js.add_stream(name="KEEP", subjects=["keep.>"], storage=StorageType.FILE)
    for i in range(50):
        await js.publish("keep.x", f"{i}".encode())
    await nc.close()

    old_pid = server.pid
    server.kill()  # SIGKILL: no graceful flush
    assert server.pid is None
    server.restart()
    assert server.pid not in (None, old_pid)

    nc = await connect_fast(server.url)
    try:
        js = nc.jetstream()
        info = await js.stream_info("KEEP")
        assert info.state.messages == 50
        last = await js.get_msg("KEEP", seq=info.state.last_seq)
        assert last.data == b"49"
    finally:
        await nc.close()


def _varz(server: NatsServer) -> dict[str, Any]:
    with urllib.request.urlopen(f"{server.http_url}/varz", timeout=2) as resp:
        data: dict[str, Any] = json.load(resp)
    return data


def test_config_file_and_sync_always(tmp_path: Path) -> None:
    """A user config is included; our listen/http/jetstream win over its values."""
    user = tmp_path / "user.conf"
    user.write_text('listen: "0.0.0.0:4222"\nmax_payload: 2MB\njetstream { store_dir: "/x" }\n')
    with NatsServer(tmp_path / "srv", config_file=user, sync_always=True) as server:
        varz = _varz(server)
        assert varz["port"] == server.port and varz["host"] == "127.0.0.1"
        assert varz["max_payload"] == 2 * 1024 * 1024
        assert varz["jetstream"]["config"]["store_dir"].startswith(str(tmp_path / "srv"))
        assert varz["jetstream"]["config"]["sync_always"] is True
    assert server.pid is None


def test_pause_resume_and_stop_while_paused(fresh_nats_server: NatsServer) -> None:
    server = fresh_nats_server
    pid = server.pid
    server.pause()
    assert not server.healthy()  # alive but unresponsive
    server.resume()
    assert server.healthy() and server.pid == pid
    server.pause()
    assert server.stop(timeout=5) == 0  # SIGCONT first, then a graceful SIGTERM
    assert server.pid is None


async def _publish_until_acked(
    js: JetStreamContext, subject: str, data: bytes, msg_id: str, deadline: float
) -> tuple[int, int]:
    """Publish with retries (same Nats-Msg-Id) until acked; return (seq, attempts)."""
    attempts = 0
    while True:
        attempts += 1
        try:
            ack = await js.publish(subject, data, timeout=1.0, headers={"Nats-Msg-Id": msg_id})
            return ack.seq, attempts
        except TRANSIENT:
            if time.monotonic() >= deadline:
                raise
            await _short_pause()


async def _short_pause() -> None:
    import anyio

    await anyio.sleep(0.05)  # retry back-off between attempts, not a wait for a condition


@pytest.mark.anyio
@pytest.mark.slow
async def test_cluster_survives_stream_leader_kill(nats_cluster: NatsCluster) -> None:
    cluster = nats_cluster
    stream, prefix = "R3TEST", unique_prefix()
    nc = await connect_fast(
        cluster.urls, allow_reconnect=True, max_reconnect_attempts=-1, reconnect_time_wait=0.1
    )
    try:
        js = nc.jetstream(timeout=2.0)
        await js.add_stream(name=stream, subjects=[f"{prefix}.>"], num_replicas=3)
        acked: list[str] = []
        for i in range(10):
            await _publish_until_acked(
                js, f"{prefix}.x", b"%d" % i, f"m-{i}", time.monotonic() + 10
            )
            acked.append(f"m-{i}")

        info = await js.stream_info(stream)
        assert info.cluster is not None and info.cluster.leader
        leader = cluster.node_by_name(info.cluster.leader)
        cluster.kill(leader)
        killed_at = time.monotonic()

        # Leader election takes 4.5-8 s here: retry each publish for up to 20 s.
        first_ok: float | None = None
        for i in range(10, 30):
            _, _attempts = await _publish_until_acked(
                js, f"{prefix}.x", b"%d" % i, f"m-{i}", time.monotonic() + 20
            )
            first_ok = first_ok or time.monotonic()
            acked.append(f"m-{i}")
        assert first_ok is not None
        print(f"publishes resumed {first_ok - killed_at:.2f}s after killing the stream leader")

        restart_at = time.monotonic()
        cluster.restart(leader)
        print(f"killed node healthy {time.monotonic() - restart_at:.2f}s after restart")

        # Every replica catches up (the restarted one included).
        deadline = time.monotonic() + 15
        while True:
            info = await js.stream_info(stream)
            replicas = info.cluster.replicas if info.cluster else None
            if replicas and all(r.current and not r.offline for r in replicas):
                break
            assert time.monotonic() < deadline, f"replicas not current: {replicas}"
            await _short_pause()

        assert info.state.messages == len(acked)
        ids = []
        for seq in range(info.state.first_seq, info.state.last_seq + 1):
            msg = await js.get_msg(stream, seq=seq)
            ids.append((msg.headers or {}).get("Nats-Msg-Id"))
        assert sorted(ids) == sorted(acked)  # all present, no duplicates
        assert len(set(ids)) == len(ids)
    finally:
        await nc.close()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_testcontainers_without_docker_is_a_clean_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """No Docker engine -> DockerUnavailable (which fixtures turn into a skip), never a crash."""
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/astrabox-test/docker.sock")
    with pytest.raises(DockerUnavailable), testcontainers_nats():
        pass


@pytest.mark.anyio
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
async def test_testcontainers_fixture(nats_testcontainer: str) -> None:
    """Runs only with NATS_TESTCONTAINERS=1 and Docker; skips cleanly otherwise."""
    nc = await connect_fast(nats_testcontainer, connect_timeout=5)
    try:
        js = nc.jetstream()
        prefix = unique_prefix()
        await js.add_stream(name=prefix, subjects=[f"{prefix}.>"])
        ack = await js.publish(f"{prefix}.x", b"hello")
        assert ack.seq == 1
    finally:
        await nc.close()
