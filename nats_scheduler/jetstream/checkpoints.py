"""Checkpoints of the Schedule table: a starting replica loads one instead of a million events.

A replica's start-up replays the last event of every Schedule, one message each: at a
million Schedules that is a million messages through the client (15-30 s on a small
machine, however little each costs to apply; docs/benchmarks.md, "A million Schedules").
A checkpoint holds the whole table in a few hundred large messages: every Schedule's record
and the sequence of the event it came from, as of sequence ``S`` of the Schedule events. A
starting replica loads it, then follows the Schedule events from ``S + 1``: each Schedule's
newest event wins by its sequence, so the table is exactly what the replay would have
built (the records a checkpoint holds ARE stored events; those newer than ``S``, a writer's
own changes taken into its table before its follower delivered them, are delivered again
and ignored as not newer).

It is a cache, never the authority. One replica writes one now and then
(``runtime/checkpointing.py``); a replica reads one only at start, and any doubt means the
full replay, as before checkpoints: none written yet, a part missing or undecodable, a
Schedule stream that is not the one it was taken from, more events since it than it holds
Schedules. Layout (``names.py``), one stream ``P_CHECKPOINTS``:

    P.checkpoint.head        one JSON message per checkpoint written (the newest counts):
                             its id, ``S``, its parts and Schedules, who wrote it and when
    P.checkpoint.part.<id>   its parts, in order: MessagePack arrays of rows

The parts are written first, then the head, appended expecting the head the writer read
(``Nats-Expected-Last-Subject-Sequence``): of two replicas writing at once one wins, and
the other purges its parts. The winner purges every part stored before its own (older
checkpoints, and what a writer that died half-way left) and the older heads; the stream's
``max_age`` is the backstop.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections import deque
from collections.abc import AsyncGenerator, Iterator, Sequence
from datetime import datetime
from typing import Protocol

import msgspec

from ..core.events import ScheduleRecord
from ..names import Names, checkpoint_msg_id
from ..ports.checkpoints import (
    SCHEMA,
    CheckpointHead,
    CheckpointRow,
    CheckpointUnusable,
    Entry,
)
from .errors import Conflict
from .event_store import Judge, StoredMessage, SubjectTail
from .foreign import ForeignLog, ForeignMessage, reason_of

log = logging.getLogger(__name__)

PART_BYTES = 256 * 1024
"""About this many bytes of rows per part (a part is one message: well under the server's
max payload, as a Schedule's own event is)."""

PART_ROWS = 5_000
"""At most this many rows per part."""

READ_AHEAD = 4
"""Parts asked for ahead of the one being loaded (about a megabyte in flight)."""

ROW_FRAME_BYTES = 64
"""More than a row's MessagePack takes besides its texts: sequence, flags, numbers, time."""


class CheckpointStore(Protocol):
    """What checkpoints need of the store (the runtime's ``Store``)."""

    @property
    def names(self) -> Names: ...

    async def publish(self, subject: str, data: bytes, *, msg_id: str) -> int: ...

    @property
    def foreign(self) -> ForeignLog: ...

    async def append(self, subject: str, data: bytes, *, expected_seq: int, msg_id: str,
                     retry_seconds: float | None = None,
                     judge: Judge | None = None) -> tuple[int, bool]: ...

    async def tail(self, subject: str, judge: Judge, *, known: int = 0) -> SubjectTail: ...

    async def next(self, subject: str, from_seq: int = 1) -> StoredMessage | None: ...

    async def purge_subject(self, stream: str, subject: str, *,
                            before_seq: int | None = None) -> None: ...

    async def created(self, stream: str) -> str: ...


_encode_head = msgspec.json.Encoder().encode
_decode_head = msgspec.json.Decoder(CheckpointHead).decode
_encode_rows = msgspec.msgpack.Encoder().encode
_decode_rows = msgspec.msgpack.Decoder(list[CheckpointRow]).decode


def head_on(subject: str, data: bytes) -> CheckpointHead:
    """A checkpoint's head stored on ``subject``, or ForeignMessage (jetstream/foreign.py)."""
    try:
        return _decode_head(data)
    except (msgspec.DecodeError, ValueError) as exc:
        raise ForeignMessage(subject, reason_of(exc)) from exc


def rows_on(subject: str, data: bytes) -> list[CheckpointRow]:
    """A checkpoint's part stored on ``subject``, or ForeignMessage."""
    try:
        return _decode_rows(data)
    except (msgspec.DecodeError, ValueError) as exc:
        raise ForeignMessage(subject, reason_of(exc)) from exc


def _row_bytes(record: ScheduleRecord) -> int:
    """About what a record takes as a row (texts as UTF-8 take at most 4 bytes a char)."""
    payload = record.payload
    chars = (len(record.deployment_id) + len(record.cron) + len(record.timezone)
             + len(payload.target) + len(payload.prompt)
             + (0 if record.name == record.deployment_id else len(record.name)))
    return ROW_FRAME_BYTES + 4 * chars


def parts_of(entries: Sequence[Entry]) -> Iterator[list[CheckpointRow]]:
    """The rows of ``entries`` cut into parts of at most ``PART_ROWS`` rows and about
    ``PART_BYTES`` (one row at least), made as they are taken: a million rows are never
    held at once."""
    part: list[CheckpointRow] = []
    size = 0
    for entry in entries:
        record = entry.record
        row_size = _row_bytes(record)
        if part and (len(part) >= PART_ROWS or size + row_size > PART_BYTES):
            yield part
            part, size = [], 0
        part.append(CheckpointRow.of(entry.seq, record))
        size += row_size
    if part:
        yield part


def _drop(tasks: deque[asyncio.Task[StoredMessage | None]]) -> None:
    """Cancel reads no longer wanted (a failed one's error is the reader's no more)."""
    for task in tasks:
        if task.done():
            if not task.cancelled():
                task.exception()  # retrieved: not logged as never retrieved
        else:
            task.cancel()
    tasks.clear()


class Checkpoints:
    """The checkpoints port over the ``P_CHECKPOINTS`` stream (see the module docstring)."""

    def __init__(self, store: CheckpointStore) -> None:
        self._store = store
        self._names = store.names

    async def journal_created(self) -> str:
        return await self._store.created(self._names.schedules_stream)

    async def latest(self) -> tuple[int, CheckpointHead] | None:
        """The newest checkpoint's head with its sequence, or None (none, or not ours). A
        foreign message after it is skipped (jetstream/foreign.py): the next head is
        written after that message, on this head's sequence."""
        tail = await self._store.tail(self._names.checkpoint_head_subject, head_on)
        if tail.ours is None:
            return None
        head = head_on(tail.ours.subject, tail.ours.data)
        return (tail.ours.seq, head) if head.schema == SCHEMA else None

    async def rows(self, head: CheckpointHead) -> AsyncGenerator[list[CheckpointRow], None]:
        """Its rows, a part at a time, in order; CheckpointUnusable when a part is missing
        or not decodable (the caller then replays the Schedule events instead).

        The next ``READ_AHEAD`` parts are asked for while one is decoded and loaded (the
        server answers on its own core): a part is read from the leader as the first
        message of the parts' subject from a guessed sequence, the parts being stored one
        after the other. A guess is right exactly when its answer comes after the part
        before it (a guess is never past the part it is for); a wrong one (another writer's
        messages in between) is asked again from that part."""
        subject = self._names.checkpoint_parts_subject(head.id)
        ahead: deque[asyncio.Task[StoredMessage | None]] = deque()
        previous = count = 0

        def ask(from_seq: int) -> asyncio.Task[StoredMessage | None]:
            return asyncio.ensure_future(self._store.next(subject, from_seq))

        try:
            for index in range(head.parts):
                message = await ahead.popleft() if ahead else None
                if message is None or message.seq <= previous:  # none asked, or guessed wrong
                    _drop(ahead)
                    message = await self._store.next(subject, previous + 1)
                rows = None
                while message is not None and rows is None:
                    try:
                        rows = rows_on(subject, message.data)
                    except ForeignMessage as exc:  # not a part of ours: the next one is
                        self._store.foreign.noted("checkpoints", subject, message.seq,
                                                  exc.reason)
                        _drop(ahead)
                        message = await self._store.next(subject, message.seq + 1)
                if message is None or rows is None:
                    raise CheckpointUnusable(f"part {index + 1} of {head.parts} is missing")
                previous = message.seq
                while len(ahead) < min(READ_AHEAD, head.parts - index - 1):
                    ahead.append(ask(previous + len(ahead) + 1))
                count += len(rows)
                yield rows
        finally:
            _drop(ahead)
        if count != head.schedules:
            raise CheckpointUnusable(f"{count} Schedules where its head says {head.schedules}")

    async def write(self, entries: Sequence[Entry], *, schedules_seq: int,
                    schedules_created: str, previous: int, by: str,
                    now: datetime) -> CheckpointHead | None:
        """Store ``entries`` (every Schedule of the table with its event's sequence, taken
        when its follower had applied every event up to ``schedules_seq``) as the newest
        checkpoint; None when another writer's head came after ``previous`` (the sequence of
        the head this writer read, 0: none), and its own parts are purged again."""
        checkpoint_id = secrets.token_hex(8)
        subject = self._names.checkpoint_parts_subject(checkpoint_id)
        first = parts = 0
        try:
            for part in parts_of(entries):
                seq = await self._store.publish(subject, _encode_rows(part),
                                                msg_id=checkpoint_msg_id(checkpoint_id, parts))
                first, parts = first or seq, parts + 1
                await asyncio.sleep(0)  # a part at a time: the event loop keeps answering
            head = CheckpointHead(id=checkpoint_id, schedules_seq=schedules_seq,
                                  schedules_created=schedules_created, parts=parts,
                                  schedules=len(entries), written_at=now, by=by)
            head_seq, _ = await self._store.append(
                self._names.checkpoint_head_subject, _encode_head(head), expected_seq=previous,
                msg_id=checkpoint_msg_id(checkpoint_id, None), judge=head_on)
        except BaseException as exc:
            await self._forget(subject)
            if isinstance(exc, Conflict):
                return None  # another replica wrote one meanwhile: its checkpoint stands
            raise
        await self._drop_older(first, head_seq)
        return head

    async def _forget(self, subject: str) -> None:
        try:
            await self._store.purge_subject(self._names.checkpoints_stream, subject)
        except Exception:
            log.debug("could not purge the parts of an unfinished checkpoint", exc_info=True)

    async def _drop_older(self, first_part: int, head_seq: int) -> None:
        """Purge every part stored before this checkpoint's first, and the older heads."""
        stream = self._names.checkpoints_stream
        try:
            if first_part:
                await self._store.purge_subject(stream, self._names.checkpoint_parts_filter,
                                                before_seq=first_part)
            await self._store.purge_subject(stream, self._names.checkpoint_head_subject,
                                            before_seq=head_seq)
        except Exception:
            log.debug("could not purge older checkpoints (their max age will)", exc_info=True)
