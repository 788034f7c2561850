"""Read every stored Schedule and Run event of a prefix, with the server's timestamps.

The invariant checker (:mod:`.invariants`) judges the whole history, not only the last
event per subject the projections keep, and judges it on the time the server stored each
event. An ordered consumer delivering every message of the stream (``DeliverPolicy.ALL``)
gives both in one pass: the message metadata carries the stream sequence and the storing
time. A message that does not decode is kept (as ``event=None`` with the reason), because
reporting it is one of the checks.
"""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime

import msgspec
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy

from ..core.events import decode_event
from ..names import Names
from .invariants import History, StoredEvent
from .reader import StoreReader, guarded


async def read_stream(nc: Client, stream: str, subject_filter: str, *,
                      timeout: float = 5.0, attempts: int = 5) -> list[StoredEvent]:
    """Every message of ``stream`` (whose subjects are ``subject_filter``), oldest first.

    Reads up to the stream's last sequence as of the call. A consumer that stops delivering
    before it (a cluster still settling after a fault) is recreated from the next sequence,
    up to ``attempts`` times; then the read fails rather than return a truncated history.
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
    raise nats.errors.TimeoutError


async def _read_from(js: JetStreamContext, stream: str, subject_filter: str, start: int,
                     last: int, timeout: float) -> list[StoredEvent]:
    """Messages from sequence ``start`` up to ``last``, until delivery stops."""
    config = ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
                            opt_start_seq=start)
    sub = await js.subscribe(subject_filter, stream=stream, ordered_consumer=True,
                             config=config)
    found: list[StoredEvent] = []
    try:
        while not found or found[-1].seq < last:
            msg = await sub.next_msg(timeout)
            meta = msg.metadata
            found.append(_stored(meta.sequence.stream, msg.subject, meta.timestamp, msg.data))
            if meta.num_pending == 0:
                break
    except nats.errors.TimeoutError:
        pass  # the caller starts again from the next sequence
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
    return found


def _stored(seq: int, subject: str, stored_at: datetime, data: bytes) -> StoredEvent:
    try:
        event = decode_event(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        return StoredEvent(seq, subject, stored_at, None, str(exc)[:200])
    return StoredEvent(seq, subject, stored_at, event)


async def load_history(nc: Client, prefix: str = "SCHED", *, timeout: float = 5.0) -> History:
    """Every Schedule and Run event of ``prefix`` and the stored leases.

    Engine and connection failures become the admin's clean UNAVAILABLE error.
    """
    names = Names(prefix)
    read_at = datetime.now(UTC)
    runs = await guarded("run events", lambda: read_stream(
        nc, names.runs_stream, names.runs_filter, timeout=timeout))
    schedules = await guarded("schedule events", lambda: read_stream(
        nc, names.schedules_stream, names.schedules_filter, timeout=timeout))
    leases = await StoreReader(nc, prefix, timeout=timeout).leases()
    return History(prefix=prefix, runs=runs, schedules=schedules, leases=leases,
                   read_at=read_at)
