"""The single nats-server killed (SIGKILL) and restarted mid-burst, and frozen (SIGSTOP) for
a few seconds across a due time, with ``sync_interval: always``.

Replica processes fire due times and ask for Runs now throughout; the store's retry budget
(10 s here) outlasts the outage, so every call returns and nothing acknowledged is lost.
(SIGKILL of the server process alone would not lose acknowledged writes even with the
default sync interval: they are in the OS page cache, which survives the process. What the
default risks is an OS crash or power loss: docs/failure-modes.md.) The 20 s freeze is in
the soak (``bench/soak.py``); here it is 3 s, to keep the suite fast.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from nats_scheduler.natsserver.process import NatsServer
from tests.harness.replicas import ReplicaSet
from tests.harness.scenario import (
    LEASE,
    Burst,
    assert_clean_after_fault,
    far_dues,
    schedule,
)
from tests.harness.shared_handler import SqliteRunHandler
from tests.providers import eventually

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

FREEZE = 3.0
"""Seconds the server is frozen: more than a lease, well inside the store retry budget."""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[NatsServer]:
    with NatsServer(tmp_path / "nats", server_name="durable", sync_always=True) as server:
        yield server


@pytest.fixture
def replica_url(server: NatsServer) -> str:
    """The ``replicas`` connect to this module's own server, the one the tests kill."""
    return server.url


@pytest.mark.wall_clock
async def test_server_killed_and_restarted_mid_burst_loses_and_doubles_nothing(
    server: NatsServer, replicas: ReplicaSet, handler: SqliteRunHandler,
) -> None:
    a, b = await replicas.spawn("a", "b")
    await a.send("apply", schedule=schedule("burst"))
    burst = Burst("burst")
    task = asyncio.create_task(burst.waves([a, b], far_dues(24), per_wave=4))
    await eventually(lambda: len(burst.expected) >= 8, timeout=30)
    killed_at = datetime.now(UTC)
    await asyncio.to_thread(server.kill)
    await asyncio.to_thread(server.start)
    await asyncio.wait_for(task, 120)
    settled_at = datetime.now(UTC) + timedelta(seconds=LEASE)

    assert burst.errors == [], burst.errors[:3]
    assert len(burst.expected) == 24 and len(burst.enqueued) == 6
    await assert_clean_after_fault(replicas, handler, fault=(killed_at, settled_at),
                                   expected=burst.expected)


@pytest.mark.wall_clock
async def test_server_frozen_across_a_due_time_fires_it_once_when_it_wakes(
    server: NatsServer, replicas: ReplicaSet, handler: SqliteRunHandler,
) -> None:
    a, b = await replicas.spawn("a", "b")
    await a.send("apply", schedule=schedule("frozen"))
    dues = far_dues(4)
    burst = Burst("frozen")
    await burst.fire(a, dues[:1])  # a Run in the store before the freeze
    frozen_at = datetime.now(UTC)
    server.pause()
    try:
        # both replicas fire the next due times and ask for a Run while nothing answers
        calls = asyncio.gather(*(burst.fire(r, dues[1:], repeat=2) for r in (a, b)),
                               *(burst.enqueue(r, "during") for r in (a, b)))
        await asyncio.sleep(FREEZE)  # the fault's duration, not a wait for a condition
    finally:
        server.resume()
    await asyncio.wait_for(calls, 60)
    thawed_at = datetime.now(UTC) + timedelta(seconds=LEASE)

    assert burst.errors == [], burst.errors[:3]
    assert {due for _, due in burst.expected} == set(dues)
    assert len(burst.enqueued) == 1  # one request ID, two replicas: one Run
    await assert_clean_after_fault(replicas, handler, fault=(frozen_at, thawed_at),
                                   expected=burst.expected)
