"""Every stored message of an event stream, with the server's timestamps: the invariant
checker's reads (``admin/stored_events.py`` decodes and judges what they return).

The checker judges the whole history, not only the last event per subject the projections
keep, and judges it on the time the server stored each event. A consumer delivering every
message of the stream gives both in one pass: the message metadata carries the stream
sequence and the storing time. :func:`read_stream` returns it all (Schedules, tests, small
stores); :func:`stream_batches` yields it a batch at a time, so a production store's
million Runs are read in bounded memory.

Both read up to the stream's last message as of the call and never end early: a consumer
that stops delivering (a cluster still settling after a fault) is recreated from the next
sequence a few times, then the read fails with :class:`~nats_scheduler.seam.SchedulerUnavailable`.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from datetime import datetime

import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from .errors import unavailable
from .store_reads import Stored

BATCH = 2000
"""Messages fetched per request by :func:`stream_batches`: the memory held at once."""


def _stored(msg: Msg) -> Stored:
    meta = msg.metadata
    return Stored(meta.sequence.stream, msg.subject, msg.data, msg.headers or {},
                  meta.timestamp)


def _stopped(stream: str) -> BaseException:
    return unavailable(f"stream {stream} stopped delivering before its last message",
                       nats.errors.TimeoutError())


async def read_stream(nc: Client, stream: str, subject_filter: str, *,
                      timeout: float = 5.0, attempts: int = 5) -> list[Stored]:
    """Every message of ``stream`` (whose subjects are ``subject_filter``), oldest first
    (empty when there is no such stream).

    Reads up to the stream's last sequence as of the call. A consumer that stops delivering
    before it is recreated from the next sequence, up to ``attempts`` times; then the read
    fails rather than return a truncated history.
    """
    js = nc.jetstream(timeout=timeout)
    try:
        info = await js.stream_info(stream)
    except nats.js.errors.NotFoundError:
        return []
    if not info.state.messages:
        return []
    last, found = info.state.last_seq, []
    for _ in range(attempts):
        start = found[-1].seq + 1 if found else info.state.first_seq
        found += await _read_from(js, stream, subject_filter, start, last, timeout)
        if not found or found[-1].seq >= last:
            return found
    raise _stopped(stream)


async def _read_from(js: JetStreamContext, stream: str, subject_filter: str, start: int,
                     last: int, timeout: float) -> list[Stored]:
    """Messages from sequence ``start`` up to ``last``, until delivery stops."""
    config = ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
                            opt_start_seq=start)
    sub = await js.subscribe(subject_filter, stream=stream, ordered_consumer=True,
                             config=config)
    found: list[Stored] = []
    try:
        while not found or found[-1].seq < last:
            msg = await sub.next_msg(timeout)
            found.append(_stored(msg))
            if msg.metadata.num_pending == 0:
                break
    except nats.errors.TimeoutError:
        pass  # the caller starts again from the next sequence
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
    return found


async def stream_batches(nc: Client, stream: str, subject_filter: str, *,
                         since: datetime | None = None, timeout: float = 5.0,
                         attempts: int = 5, batch: int = BATCH
                         ) -> AsyncIterator[list[Stored]]:
    """The messages of ``stream`` in batches, oldest first (from ``since`` when given).

    A pull consumer without acknowledgements (the server keeps no state per message). It
    ends at the last message stored when it was created; one that stops answering (a
    cluster settling after a fault) is recreated from the next sequence, up to ``attempts``
    times in a row, and then the read fails rather than end early.
    """
    js = nc.jetstream(timeout=timeout)
    try:
        await js.stream_info(stream)
    except nats.js.errors.NotFoundError:
        return
    next_seq: int | None = None
    failures = 0
    while True:
        sub = await js.pull_subscribe(subject_filter, stream=stream,
                                      config=_pull_config(next_seq, since))
        name: str | None = None
        try:
            info = await sub.consumer_info()
            name = info.name
            if not info.num_pending:
                return
            while True:
                try:
                    msgs = await sub.fetch(batch, timeout=timeout)
                except nats.errors.TimeoutError:
                    break  # recreated from the next sequence below
                found = [_stored(msg) for msg in msgs]
                done = bool(msgs) and msgs[-1].metadata.num_pending == 0
                if found:
                    failures = 0
                    next_seq = found[-1].seq + 1
                    yield found
                if done:
                    return
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
            if name is not None:  # else it goes by itself after its inactive threshold
                with contextlib.suppress(Exception):
                    await js.delete_consumer(stream, name)
        failures += 1
        if failures >= attempts:
            raise _stopped(stream)


def _pull_config(next_seq: int | None, since: datetime | None) -> ConsumerConfig:
    common: dict[str, object] = {"ack_policy": AckPolicy.NONE, "inactive_threshold": 30.0,
                                 "mem_storage": True}
    if next_seq is not None:
        return ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
                              opt_start_seq=next_seq, **common)  # type: ignore[arg-type]
    if since is not None:
        return ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_TIME,
                              opt_start_time=since, **common)  # type: ignore[arg-type]
    return ConsumerConfig(deliver_policy=DeliverPolicy.ALL, **common)  # type: ignore[arg-type]


__all__ = ["BATCH", "read_stream", "stream_batches"]
