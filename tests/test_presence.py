"""Presence against a real nats-server: replicas see each other, leave at once on stop, drop
out when they stop beating (judged on the server's timestamps of the puts, never on the
watcher's own time), and a replica always counts itself; with the server gone it keeps the
last membership it saw."""

from __future__ import annotations

import asyncio
import contextlib
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime

import msgspec
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext

from nats_scheduler.clock import Clock, ManualClock
from nats_scheduler.jetstream.presence import Presence, PresenceValue
from nats_scheduler.names import Names
from nats_scheduler.natsserver.process import NatsServer
from tests.harness.clocks import ManualElapsed
from tests.harness.servers import connect_fast, unique_prefix
from tests.providers import eventually

pytestmark = pytest.mark.anyio

SLOW_BEAT = 600.0
"""A beat so slow no member expires during a test: only a delete can remove it."""


Join = Callable[..., Awaitable[Presence]]


@pytest.fixture
async def join(nats_url: str) -> AsyncIterator[Join]:
    """Start a Presence on a connection of its own (a replica); all stopped afterwards."""
    names = Names(unique_prefix())
    started: list[tuple[Presence, Client]] = []

    async def start(identity: str, *, beat: float = SLOW_BEAT,
                    elapsed: Callable[[], float] = time.monotonic,
                    clock: Clock | None = None) -> Presence:
        nc = await connect_fast(nats_url)
        presence = await Presence.open(nc.jetstream(timeout=2.0), names, identity, replicas=1,
                                       beat_seconds=beat, elapsed=elapsed, clock=clock)
        await presence.start()
        started.append((presence, nc))
        _CONNECTIONS[presence] = nc
        return presence

    start.names = names  # type: ignore[attr-defined]
    try:
        yield start
    finally:
        for presence, nc in started:
            await presence.stop()
            with contextlib.suppress(Exception):
                await nc.close()


_CONNECTIONS: weakref.WeakKeyDictionary[Presence, Client] = weakref.WeakKeyDictionary()
"""Each started Presence's own connection (the :func:`join` fixture fills it)."""


def connection(presence: Presence) -> Client:
    """The replica's connection: a test "kills" a replica by closing it."""
    return _CONNECTIONS[presence]


async def test_replicas_see_each_other_and_a_stopped_one_leaves_at_once(join: Join) -> None:
    a, b, c = [await join(i) for i in ("replica-a", "replica-b", "replica-c")]
    everyone = ("replica-a", "replica-b", "replica-c")
    for p in (a, b, c):
        await eventually(lambda p=p: p.live() == everyone, timeout=10)
    assert a.live() is a.live()  # cached while nothing changes

    await b.stop()  # the window is 30 min: only the delete can remove it this quickly
    for p in (a, c):
        await eventually(lambda p=p: p.live() == ("replica-a", "replica-c"), timeout=10)
    assert b.live() == ("replica-b",)


async def test_the_bucket_and_a_key_as_an_operator_sees_them(join: Join) -> None:
    a = await join("replica a/1.example.com", beat=1.0)
    nc = connection(a)
    names: Names = join.names  # type: ignore[attr-defined]
    kv = await nc.jetstream().key_value(names.replicas_bucket)
    key = names.replica_key("replica a/1.example.com")
    assert await kv.keys() == [key] == ["replica=20a=2F1=2Eexample=2Ecom"]
    assert names.replica_of_key(key) == "replica a/1.example.com"
    assert names.replica_key("a=b%c") == "a=3Db=25c"  # '=' and '%' escaped too: no collisions
    value = msgspec.json.decode((await kv.get(key)).value or b"", type=PresenceValue)
    assert value.identity == "replica a/1.example.com" and value.beat_at >= value.started_at
    config = (await kv.status()).stream_info.config
    assert config.max_msgs_per_subject == 1 and config.max_age == 30.0
    assert config.name == f"KV_{names.prefix}_REPLICAS"


async def test_the_times_in_a_key_come_from_the_injected_clock(join: Join) -> None:
    """The runtime's clock, not the host's: ``started_at`` and ``beat_at`` read as the
    time the provider fires by (they are for people; liveness is judged on elapsed time)."""
    clock = ManualClock(datetime(2031, 5, 6, 7, 8, tzinfo=UTC))
    a = await join("replica-clocked", clock=clock)
    names: Names = join.names  # type: ignore[attr-defined]
    kv = await connection(a).jetstream().key_value(names.replicas_bucket)
    entry = await kv.get(names.replica_key("replica-clocked"))
    value = msgspec.json.decode(entry.value or b"", type=PresenceValue)
    assert value.started_at == value.beat_at == clock.now()


async def test_a_replica_that_stops_beating_drops_out_once_newer_puts_pass_it(
        join: Join) -> None:
    """Judged on the server's timestamps: b's key stops changing, and b drops out once a's
    own later puts are a window (3 of a's beats) newer than b's last."""
    a = await join("replica-a", beat=0.25)
    b = await join("replica-b")  # puts its key once, then never again (SLOW_BEAT)
    await eventually(lambda: a.live() == ("replica-a", "replica-b"), timeout=10)
    await connection(b).close()  # killed: its key stays, unchanged
    await eventually(lambda: a.live() == ("replica-a",), timeout=10)


async def test_time_passing_here_with_no_news_from_the_store_drops_nobody(join: Join) -> None:
    """A replica whose own clock runs on while it reads nothing newer from the bucket (its
    event loop busy for an hour) has no reason to think anybody stopped."""
    elapsed = ManualElapsed(1000.0)
    a = await join("replica-a", elapsed=elapsed)  # SLOW_BEAT: one put each
    await join("replica-b")
    await eventually(lambda: a.live() == ("replica-a", "replica-b"), timeout=10)
    elapsed.value += 3600.0
    assert a.live() == ("replica-a", "replica-b")


async def test_beats_keep_a_replica_live_and_it_drops_out_once_they_stop(join: Join) -> None:
    a = await join("replica-a", beat=0.25)
    b = await join("replica-b", beat=0.25)
    await eventually(lambda: a.live() == ("replica-a", "replica-b"), timeout=10)
    first_put = time.monotonic()

    def still_live_after_four_windows() -> bool:
        assert a.live() == ("replica-a", "replica-b")  # never dropped while it beats
        return time.monotonic() - first_put > 4 * a.window

    await eventually(still_live_after_four_windows, timeout=20)
    await connection(b).close()
    await eventually(lambda: a.live() == ("replica-a",), timeout=10)


async def _server_time(js: JetStreamContext, names: Names) -> datetime:
    """The server's clock, read off a scratch key it stamps (then deleted again)."""
    kv = await js.key_value(names.replicas_bucket)
    seq = await kv.put("clock-probe", b"")
    stamp = (await js.get_msg(f"KV_{names.replicas_bucket}", seq=seq, direct=False)).time
    await kv.delete("clock-probe")
    assert stamp is not None
    return stamp


async def test_a_stale_key_found_at_start_is_aged_by_the_servers_timestamps(join: Join) -> None:
    """A replica that died before we started is not counted live for a window."""
    names: Names = join.names  # type: ignore[attr-defined]
    a = await join("replica-a", beat=0.25)
    js = connection(a).jetstream(timeout=2.0)
    kv = await js.key_value(names.replicas_bucket)
    now = datetime.now(UTC)  # a replica's value, as one that died wrote it
    ghost_seq = await kv.put(names.replica_key("ghost"), msgspec.json.encode(
        PresenceValue(identity="ghost", started_at=now, beat_at=now)))
    ghost_at = (await js.get_msg(f"KV_{names.replicas_bucket}", seq=ghost_seq,
                                 direct=False)).time
    assert ghost_at is not None

    async def ghost_is_old() -> bool:
        return ((await _server_time(js, names)) - ghost_at).total_seconds() > 1.5

    await eventually(ghost_is_old, timeout=10)
    c = await join("replica-c", beat=0.4)  # window 1.2 s: the ghost (> 1.5 s) is past it
    await eventually(lambda: "replica-a" in c.live(), timeout=10)
    assert "ghost" not in c.live()
    assert c.live() == ("replica-a", "replica-c")


@pytest.mark.wall_clock
async def test_self_is_always_live_and_the_last_membership_stays_with_the_server_gone(
        tmp_path) -> None:  # type: ignore[no-untyped-def]
    """With nothing read from the store a replica cannot tell who stopped: it keeps the last
    membership it saw (the owner patience covers an owner that stopped meanwhile)."""
    server = NatsServer(tmp_path / "nats", server_name="presence")
    server.start()
    names = Names(unique_prefix())
    clients = [await connect_fast(server.url, allow_reconnect=True, max_reconnect_attempts=-1)
               for _ in range(2)]
    try:
        a, b = [await Presence.open(nc.jetstream(timeout=2.0), names, f"replica-{i}",
                                    replicas=1, beat_seconds=0.25)
                for nc, i in zip(clients, "ab", strict=True)]
        assert a.live() == ("replica-a",)  # before it has heard anything
        await a.start()
        await b.start()
        await eventually(lambda: a.live() == ("replica-a", "replica-b"), timeout=10)

        server.stop()
        failed, since = a.failed_beats, time.monotonic()
        await eventually(lambda: a.failed_beats > failed  # a beat went unanswered, and
                         and time.monotonic() - since > 2 * a.window, timeout=30)  # no news
        assert a.live() == ("replica-a", "replica-b")
        # a guard against a hang, not a performance figure: stop() bounds every call
        await asyncio.wait_for(a.stop(), 30)
        await asyncio.wait_for(b.stop(), 30)
        assert a.live() == ("replica-a",)
    finally:
        server.stop()
        for nc in clients:
            with contextlib.suppress(Exception):
                await nc.close()


async def test_a_value_that_is_not_a_replicas_is_never_a_live_replica(join: Join) -> None:
    """Foreign values under replica keys (not a replica's value, one naming another replica,
    bytes that are no JSON) are skipped: a ghost never takes a share of the due times."""
    names: Names = join.names  # type: ignore[attr-defined]
    a = await join("replica-a", beat=0.25)
    kv = await connection(a).jetstream(timeout=2.0).key_value(names.replicas_bucket)
    now = datetime.now(UTC)
    await kv.put(names.replica_key("ghost"), b'{"identity": "ghost"}')
    await kv.put(names.replica_key("copy"), msgspec.json.encode(
        PresenceValue(identity="replica-a", started_at=now, beat_at=now)))
    await kv.put(names.replica_key("garbage"), b"\xff\x00")
    b = await join("replica-b", beat=0.25)  # its replay meets them, and a's watch live
    await eventually(lambda: b.live() == ("replica-a", "replica-b"), timeout=10)
    await eventually(lambda: a.live() == ("replica-a", "replica-b"), timeout=10)
    assert sum(b.foreign.counts.values()) == 3  # what the replica counted, once each
