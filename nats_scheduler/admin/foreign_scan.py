"""Foreign messages in the streams the invariant checker does not replay: named one by one.

The checker reads every Schedule and Run event and reports a message there that is not
the scheduler's own as ``foreign`` (``invariants.py``). The other stores a reader may meet
one in are scanned here: the history index, the lease and replicas buckets, the outage
records and the checkpoints. Each message is judged as the provider's readers judge it
(``jetstream/foreign.py``); the server's own markers in the buckets (a key deleted,
purged or expired) are not messages of anybody's. A batch at a time: the index holds a
small entry per retained Run, the buckets one value per key.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from ..jetstream.checkpoints import head_on, rows_on
from ..jetstream.connection import Connection
from ..jetstream.event_reads import stream_batches
from ..jetstream.foreign import (
    ForeignMessage,
    index_entry_on,
    lease_value_on,
    outage_event_on,
)
from ..jetstream.presence import replica_value_on
from ..jetstream.store_reads import Stored
from ..names import HDR_KV_OPERATION, HDR_MARKER_REASON, Names, is_kv_stream
from .invariant_report import Violation

Judge = Callable[[str, bytes], object]


def judges(names: Names) -> list[tuple[str, str, Judge]]:
    """(stream, subjects, judge) of every store scanned here."""
    def checkpoint(subject: str, data: bytes) -> object:
        return (head_on if subject == names.checkpoint_head_subject else rows_on)(subject, data)

    return [
        (names.index_stream, names.index_filter, index_entry_on),
        (names.leases_stream, names.leases_filter, lease_value_on),
        (names.replicas_stream, names.replicas_filter,
         lambda subject, data: replica_value_on(names, subject, data)),
        (names.outages_stream, names.outages_filter, outage_event_on),
        (names.checkpoints_stream, names.checkpoints_filter, checkpoint),
    ]


def _marker(stored: Stored) -> bool:
    """The server's own message in a bucket: a delete, a purge or an expiry marker."""
    headers = stored.headers
    return (headers.get(HDR_KV_OPERATION) in ("DEL", "PURGE") or HDR_MARKER_REASON in headers
            or not stored.data)


def foreign_in(stream: str, stored: Stored, judge: Judge) -> Violation | None:
    """The violation a message is, when it is not the scheduler's own; else None."""
    if is_kv_stream(stream) and _marker(stored):
        return None
    try:
        judge(stored.subject, stored.data)
    except ForeignMessage as exc:
        return Violation("foreign", f"{stored.subject}#{stored.seq}",
                         f"in {stream}: {exc.reason}")
    return None


async def scan(nc: Connection, names: Names, *,
               timeout: float = 5.0) -> AsyncIterator[list[Violation]]:
    """The foreign messages of the index, buckets, outage records and checkpoints, a
    batch of each stream at a time."""
    for stream, subjects, judge in judges(names):
        async for batch in stream_batches(nc, stream, subjects, timeout=timeout):
            found = [v for stored in batch if (v := foreign_in(stream, stored, judge))]
            if found:
                yield found


async def foreign_messages(nc: Connection, names: Names, *,
                           timeout: float = 5.0) -> list[Violation]:
    """Every foreign message of those stores (:func:`scan`), in one list."""
    return [v async for batch in scan(nc, names, timeout=timeout) for v in batch]
