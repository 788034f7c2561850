"""Pipelined acknowledged publishes (jetstream/acks.py) against a real server.

Every event the provider stores goes through :class:`AckedPublisher`, so its answers must be
the ones nats-py's ``js.publish`` gives: the stored sequence, the duplicate flag, the
server's refusal as nats-py's own ``APIError`` (error codes included), no responders as
``NoStreamResponseError``, and a timeout when nothing answers, which ``js.publish_async``
alone never gives.
"""

from __future__ import annotations

import nats
import nats.errors
import nats.js.errors
import pytest
from nats.js.api import StreamConfig

from nats_scheduler.jetstream import errors
from nats_scheduler.jetstream.acks import AckedPublisher
from nats_scheduler.names import HDR_EXPECTED_LAST_SUBJECT_SEQUENCE, HDR_MSG_ID
from tests.harness.servers import unique_prefix

pytestmark = pytest.mark.anyio


async def test_acks_carry_sequence_duplicate_and_refusals(nats_url: str) -> None:
    nc = await nats.connect(nats_url)
    stream = unique_prefix()
    try:
        await nc.jetstream().add_stream(StreamConfig(name=stream, subjects=[f"{stream}.>"]))
        acks = AckedPublisher(nc, timeout=2.0)
        first = await acks.publish(f"{stream}.a", b"1", {HDR_MSG_ID: "m1"})
        assert first.seq == 1 and not first.duplicate and first.stream == stream
        again = await acks.publish(f"{stream}.a", b"1", {HDR_MSG_ID: "m1"})
        assert again.duplicate and again.seq == 1
        with pytest.raises(nats.js.errors.APIError) as refused:
            await acks.publish(f"{stream}.a", b"2", {HDR_EXPECTED_LAST_SUBJECT_SEQUENCE: "0"})
        assert errors.is_conflict(refused.value)
        with pytest.raises(nats.js.errors.NoStreamResponseError):
            await acks.publish(f"{unique_prefix()}.nobody", b"x")
        await acks.close()
    finally:
        await nc.close()


async def test_a_publish_nobody_acknowledges_times_out(nats_url: str) -> None:
    nc = await nats.connect(nats_url)
    subject = f"{unique_prefix()}.silent"
    try:
        await nc.subscribe(subject)  # a responder that never answers: no 503, no ack
        acks = AckedPublisher(nc, timeout=0.3)
        with pytest.raises(nats.errors.TimeoutError):
            await acks.publish(subject, b"x")
        assert errors.is_transient(nats.errors.TimeoutError())
        await acks.close()
    finally:
        await nc.close()


async def test_many_at_once_answer_each_in_order(nats_url: str) -> None:
    nc = await nats.connect(nats_url)
    stream = unique_prefix()
    try:
        await nc.jetstream().add_stream(StreamConfig(name=stream, subjects=[f"{stream}.>"]))
        acks = AckedPublisher(nc, timeout=2.0)
        await acks.publish(f"{stream}.taken", b"0")
        results = await acks.publish_many([
            (f"{stream}.r{i}", b"x", {HDR_EXPECTED_LAST_SUBJECT_SEQUENCE: "0"})
            for i in range(300)
        ] + [(f"{stream}.taken", b"1", {HDR_EXPECTED_LAST_SUBJECT_SEQUENCE: "0"})])
        stored = results[:300]
        assert all(not isinstance(r, Exception) for r in stored)
        assert sorted(r.seq for r in stored if not isinstance(r, Exception)) == list(
            range(2, 302))
        assert isinstance(results[300], nats.js.errors.APIError)
        assert errors.is_conflict(results[300])
        await acks.close()
    finally:
        await nc.close()
