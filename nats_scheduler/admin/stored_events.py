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
from nats.js.api import DeliverPolicy

from ..core.events import decode_event
from ..names import Names
from .invariants import History, StoredEvent
from .reader import StoreReader, guarded


async def read_stream(nc: Client, stream: str, subject_filter: str, *,
                      timeout: float = 5.0) -> list[StoredEvent]:
    """Every message of ``stream`` matching ``subject_filter``, oldest first (none: [])."""
    js = nc.jetstream(timeout=timeout)
    try:
        info = await js.stream_info(stream)
    except nats.js.errors.NotFoundError:
        return []
    if not info.state.messages:
        return []
    sub = await js.subscribe(subject_filter, stream=stream, ordered_consumer=True,
                             deliver_policy=DeliverPolicy.ALL)
    found: list[StoredEvent] = []
    try:
        pending = 1
        while pending > 0:
            msg = await sub.next_msg(timeout)
            meta = msg.metadata
            found.append(_stored(meta.sequence.stream, msg.subject, meta.timestamp, msg.data))
            pending = meta.num_pending
    except nats.errors.TimeoutError:
        pass  # fewer messages match the filter than the stream holds: all were delivered
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
