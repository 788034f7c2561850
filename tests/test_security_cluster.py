"""The 3-node cluster variant (cluster/node-*.conf, ``just cluster``), started as committed.

The node files include ``nats-server.conf`` and repeat its JetStream limits (a later
``jetstream`` block replaces the included one whole), so a test keeps them in agreement;
another runs the three files (only ports and data dirs substituted) with the provider R3.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from nats_scheduler.admin.doctor import Status, run_doctor
from nats_scheduler.natsserver.config import (
    CLUSTER_DIR,
    REPO_CONFIG,
    ConfiguredNatsServer,
    cluster_nodes,
    node_ports,
    start_nodes,
    stop_nodes,
)
from nats_scheduler.natsserver.process import free_ports
from nats_scheduler.seam import RunPayload, RunState, Schedule
from nats_scheduler.settings import NatsSettings
from tests.providers import eventually, running
from tests.security_support import PASSWORDS

pytestmark = pytest.mark.anyio

NODE_FILES = sorted(CLUSTER_DIR.glob("node-*.conf"))


def setting(text: str, key: str) -> str:
    match = re.search(rf"^\s*{key}:\s*(\S+)\s*$", text, re.MULTILINE)
    assert match, key
    return match.group(1)


def test_node_files_agree_with_the_main_config() -> None:
    main = REPO_CONFIG.read_text("utf-8")
    assert len(NODE_FILES) == 3
    texts = [p.read_text("utf-8") for p in NODE_FILES]
    ports = [node_ports(t) for t in texts]
    cluster_ports = sorted(p[2] for p in ports)
    for text in texts:
        assert 'include "../nats-server.conf"' in text
        assert setting(text, "sync_interval") == "always"
        for key in ("max_memory_store", "max_file_store"):
            assert setting(text, key) == setting(main, key)
        routes = sorted(int(p) for p in re.findall(r"nats-route://127\.0\.0\.1:(\d+)", text))
        assert routes == cluster_ports
    assert len({setting(t, "server_name") for t in texts}) == 3
    assert len({p for trio in ports for p in trio}) == 9


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[list[ConfiguredNatsServer]]:
    used = sorted({p for path in NODE_FILES for p in node_ports(path.read_text("utf-8"))})
    mapping = dict(zip(used, free_ports(len(used)), strict=True))
    nodes = cluster_nodes(tmp_path / "cluster", ports=mapping, passwords=PASSWORDS)
    start_nodes(nodes)
    try:
        yield nodes
    finally:
        stop_nodes(nodes)


async def test_the_cluster_runs_the_provider_r3_with_fsync(
    cluster: list[ConfiguredNatsServer],
) -> None:
    urls = ",".join(n.url for n in cluster)
    async with running(urls, "SCHED", user="scheduler", password=PASSWORDS["scheduler"],
                       replicas=3, store_retry_seconds=12.0) as provider:
        await provider.apply(Schedule("dep-r3", "n", "0 3 1 1 *", "UTC", True,
                                      RunPayload("t", "p")))
        run = await provider.fire_due("dep-r3", datetime(2031, 1, 1, 3, tzinfo=UTC))
        assert run is not None

        async def dispatched() -> bool:
            return (await provider.get_run(run.run_id)).state == RunState.DISPATCHED

        await eventually(dispatched, timeout=15)
    report = await run_doctor(
        NatsSettings(url=urls, user="operator", password=PASSWORDS["operator"],
                     server_sync_always=True),
        monitor_url=",".join(n.http_url for n in cluster))
    assert report.get("replication").status == Status.OK, report.lines()
    assert "R3" in report.get("replication").detail
    durability = report.get("durability")
    assert durability.status == Status.OK and "3 node(s)" in durability.detail
