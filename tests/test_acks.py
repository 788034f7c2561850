"""Pipelined acknowledged publishes (jetstream/acks.py) against a real server.

Every event the provider stores goes through :class:`AckedPublisher`, so its answers must be
the ones nats-py's ``js.publish`` gives: the stored sequence, the duplicate flag, the
server's refusal as nats-py's own ``APIError`` (error codes included), no responders as
``NoStreamResponseError``, and a timeout when nothing answers, which ``js.publish_async``
alone never gives.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import nats
import nats.errors
import nats.js.errors
import pytest
from nats.aio.client import Client
from nats.js.api import StreamConfig

from nats_scheduler.jetstream import acks as acks_module
from nats_scheduler.jetstream import errors
from nats_scheduler.jetstream.acks import AckedPublisher, Outgoing
from nats_scheduler.names import HDR_EXPECTED_LAST_SUBJECT_SEQUENCE, HDR_MSG_ID
from tests.harness.servers import unique_prefix

pytestmark = pytest.mark.anyio


@pytest.fixture
async def nc(nats_url: str) -> AsyncIterator[Client]:
    """A plain nats-py connection to the session server, closed after the test."""
    nc = await nats.connect(nats_url)
    try:
        yield nc
    finally:
        await nc.close()


@pytest.fixture
async def acks(nc: Client) -> AsyncIterator[AckedPublisher]:
    """The publisher under test with the provider's timeout (2 s), closed after the test."""
    acks = AckedPublisher(nc, timeout=2.0)
    yield acks
    await acks.close()


async def new_stream(nc: Client, *, atomic: bool = False) -> str:
    """A fresh stream that takes every subject under its own name; ``atomic``: it accepts
    atomic batches (ADR-50), which a stream does not unless configured to."""
    stream = unique_prefix()
    config = StreamConfig(name=stream, subjects=[f"{stream}.>"])
    if atomic:
        config.allow_atomic = True
    await nc.jetstream().add_stream(config)
    return stream


async def test_acks_carry_sequence_duplicate_and_refusals(
        nc: Client, acks: AckedPublisher) -> None:
    stream = await new_stream(nc)
    first = await acks.publish(f"{stream}.a", b"1", {HDR_MSG_ID: "m1"})
    assert first.seq == 1 and not first.duplicate and first.stream == stream
    again = await acks.publish(f"{stream}.a", b"1", {HDR_MSG_ID: "m1"})
    assert again.duplicate and again.seq == 1
    with pytest.raises(nats.js.errors.APIError) as refused:
        await acks.publish(f"{stream}.a", b"2", {HDR_EXPECTED_LAST_SUBJECT_SEQUENCE: "0"})
    assert errors.is_conflict(refused.value)
    with pytest.raises(nats.js.errors.NoStreamResponseError):
        await acks.publish(f"{unique_prefix()}.nobody", b"x")


async def test_a_publish_nobody_acknowledges_times_out(nc: Client) -> None:
    subject = f"{unique_prefix()}.silent"
    await nc.subscribe(subject)  # a responder that never answers: no 503, no ack
    acks = AckedPublisher(nc, timeout=0.3)
    with pytest.raises(nats.errors.TimeoutError):
        await acks.publish(subject, b"x")
    assert errors.is_transient(nats.errors.TimeoutError())
    await acks.close()


async def test_many_at_once_answer_each_in_order(nc: Client, acks: AckedPublisher) -> None:
    stream = await new_stream(nc)
    await acks.publish(f"{stream}.taken", b"0")
    results = await acks.publish_many([
        Outgoing(f"{stream}.r{i}", b"x", {HDR_EXPECTED_LAST_SUBJECT_SEQUENCE: "0"})
        for i in range(300)
    ] + [Outgoing(f"{stream}.taken", b"1", {HDR_EXPECTED_LAST_SUBJECT_SEQUENCE: "0"})])
    stored = results[:300]
    assert all(not isinstance(r, Exception) for r in stored)
    assert sorted(r.seq for r in stored if not isinstance(r, Exception)) == list(
        range(2, 302))
    assert isinstance(results[300], nats.js.errors.APIError)
    assert errors.is_conflict(results[300])


@pytest.fixture
def small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Atomic batches from two messages on (the provider starts at ``ATOMIC_MIN``)."""
    monkeypatch.setattr(acks_module, "ATOMIC_MIN", 2)


@pytest.mark.usefixtures("small_batches")
async def test_an_atomic_batch_stores_all_with_one_answer_or_nothing(
        nc: Client, acks: AckedPublisher) -> None:
    """ADR-50: contiguous sequences from one acknowledgement; one lost race stores nothing;
    ``publish_batched`` then sends the batch again one by one, each getting its own answer."""
    stream = await new_stream(nc, atomic=True)
    js = nc.jetstream()
    new = {HDR_EXPECTED_LAST_SUBJECT_SEQUENCE: "0"}
    stored = await acks.publish_atomic([Outgoing(f"{stream}.{s}", b"x", new) for s in "abc"])
    assert not isinstance(stored, Exception)
    assert [a.seq for a in stored] == [1, 2, 3]
    # "b" exists: the whole batch is refused, "d" and "e" are not stored
    refused = await acks.publish_atomic([Outgoing(f"{stream}.{s}", b"y", new) for s in "dbe"])
    assert isinstance(refused, nats.js.errors.APIError) and errors.is_conflict(refused)
    assert (await js.stream_info(stream)).state.last_seq == 3
    # split: each one alone; "b" refused, the others stored
    split = await acks.publish_batched(stream, [Outgoing(f"{stream}.{s}", b"y", new)
                                                for s in "dbe"])
    assert errors.is_conflict(split[1]) and acks.batches_split == 1
    assert [a.seq for a in (split[0], split[2])] == [4, 5]  # type: ignore[union-attr]


@pytest.mark.usefixtures("small_batches")
async def test_a_stream_without_atomic_batches_is_written_one_by_one(
        nc: Client, acks: AckedPublisher) -> None:
    stream = await new_stream(nc)
    first = await acks.publish_batched(stream, [Outgoing(f"{stream}.a", b"1", None)] * 2)
    assert [a.seq for a in first] == [1, 2]  # type: ignore[union-attr]
    assert stream in acks.not_atomic
    again = await acks.publish_batched(stream, [Outgoing(f"{stream}.a", b"1", None)] * 2)
    assert [a.seq for a in again] == [3, 4]  # type: ignore[union-attr]
    assert acks.batches_split == 1  # not tried again


@pytest.mark.usefixtures("small_batches")
async def test_grouped_publishes_of_many_tasks_share_a_batch_and_keep_their_answers(
        nc: Client, acks: AckedPublisher) -> None:
    """Publishes made by many tasks in one turn of the loop go as one atomic batch; when
    one of them loses its race, every other still gets its own stored answer."""
    import asyncio

    stream = await new_stream(nc, atomic=True)
    new = {HDR_EXPECTED_LAST_SUBJECT_SEQUENCE: "0"}
    seqs = await asyncio.gather(*(acks.publish_grouped(stream, f"{stream}.{i}", b"x", new)
                                  for i in range(10)))
    assert sorted(a.seq for a in seqs) == list(range(1, 11))
    assert (acks.batches_atomic, acks.batches_split) == (1, 0)
    results = await asyncio.gather(
        *(acks.publish_grouped(stream, f"{stream}.{i}", b"y", new) for i in (3, 10, 11)),
        return_exceptions=True)
    assert errors.is_conflict(results[0])  # type: ignore[arg-type]
    assert [r.seq for r in results[1:]] == [11, 12]  # type: ignore[union-attr]
    assert acks.batches_split == 1


async def test_fewer_than_the_minimum_go_as_pipelined_publishes(
        nc: Client, acks: AckedPublisher) -> None:
    stream = await new_stream(nc, atomic=True)
    small = await acks.publish_batched(stream, [Outgoing(f"{stream}.a", b"1", None)] * 3)
    big = await acks.publish_batched(
        stream, [Outgoing(f"{stream}.a", b"1", None)] * acks_module.ATOMIC_MIN)
    assert [a.seq for a in small] == [1, 2, 3]  # type: ignore[union-attr]
    assert big[-1].seq == 3 + acks_module.ATOMIC_MIN  # type: ignore[union-attr]
    assert (acks.batches_atomic, acks.batches_split) == (1, 0)
