"""Writing the Run history's index: one entry per Run, stored in the Runs' own order.

A page of ``list_runs`` is the newest Runs by ``(created_at, run_id)``, read from the index
in the order the server stored its entries (:mod:`.history_reads`). That is exact only
when the two orders are one, and the writers make them one:

- A Run is listed by its entry's key: the Run's ``created_at`` IS the ``created_at`` of
  the entry it was announced with (``runcore.indexed``), never a second reading of a clock.
  (Releases before 0.2 stamped the entry with the instant the firing's Schedule read was
  proven and the Run with the instant of its create: a burst of Runs shared one entry key,
  and a page chose its Runs by one key and cut them by the other.)
- Each entry is appended after the deployment's last one by compare-and-set
  (``Nats-Expected-Last-Subject-Sequence`` on the deployment's index subject) with a
  ``created_at`` later than that entry's (:func:`after`). However many replicas announce
  Runs of one deployment, and however their clocks disagree, a later entry has a later
  key: no writer's clock, pause or retry can put a Run out of its place.

Entries so written say so (``IndexEntry.ordered``); pages read the entries of older
releases, which do not, with a tolerance.

Within a process, the announcements of one deployment wait for the one being written and go
next, together, after the entry it wrote (:meth:`IndexWriter.announce`): a burst of one
deployment's Runs (``fire_due`` over many due times, a volley of Run nows) costs what it
cost before, not a race per Run.
Across processes a lost compare-and-set reads the deployment's last entry from the stream
leader and tries again; an entry another announcer of the same Run stored first (found by
its ``Nats-Msg-Id``, or as the last entry) is that Run's, and its key is adopted.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import NamedTuple

import msgspec

from ..core.events import RunRecord
from ..names import (
    HDR_EXPECTED_LAST_SUBJECT_SEQUENCE,
    HDR_MSG_ID,
    HDR_SEQUENCE,
    HDR_SUBJECT,
    index_msg_id,
)
from ..ports.history import IndexEntry, IndexPosition
from . import errors
from .acks import Outgoing
from .errors import Conflict
from .event_store import HistoryStore
from .foreign import index_entry_on

TICK = timedelta(microseconds=1)
"""How much later than the last entry a new one is stamped when the clock has not moved on
(or reads earlier: another replica's clock, a step back): the smallest step a ``datetime``
keeps."""

TAILS_KEPT = 4096
"""Deployments whose last entry this process remembers (the one it wrote last, or read): the
next announcement of one of them needs no read first. One a moment stale costs a lost race
(the compare-and-set refuses it), never a wrong order."""

GROUP_MAX = 100
"""Announcements of one deployment written together, at most (one atomic batch)."""

MAX_RACES = 64
"""Compare-and-sets one announcement may lose in a row (each lost one means another writer
appended to the same deployment meanwhile) before it gives up as unavailable."""

MAX_SUBJECTS = 1000
"""Subjects one "last message per subject" read asks for (the server refuses over 1,024)."""


_encode = msgspec.json.Encoder().encode
decode_entry = msgspec.json.Decoder(IndexEntry).decode


class Tail(NamedTuple):
    """A deployment's last index entry, as a writer last knew it."""

    seq: int
    entry: IndexEntry | None
    """None for a message on the subject that is not an entry of ours (jetstream/foreign.py)."""
    floor: datetime | None = None
    """When ``entry`` is None: the ``created_at`` of the last entry of ours before that
    message, which a new entry must still follow (None: not known, or none)."""


def after(tail: Tail | None, instant: datetime) -> datetime:
    """The ``created_at`` of an entry appended after ``tail``: ``instant``, unless that is
    not later than the tail's (then one :data:`TICK` after it)."""
    latest = None if tail is None else (
        tail.entry.created_at if tail.entry is not None else tail.floor)
    if latest is None or instant > latest:
        return instant
    return latest + TICK


def _entry_of(data: bytes) -> IndexEntry | None:
    try:
        return decode_entry(data)
    except msgspec.DecodeError:
        return None  # not ours: it still holds a place in the order


class _Lane:
    """The announcements of one deployment waiting in this process, and the entry the last
    group of them wrote (the next group's tail). Kept only while some wait."""

    __slots__ = ("tail", "waiting")

    def __init__(self) -> None:
        self.waiting: list[tuple[RunRecord, asyncio.Future[IndexPosition]]] = []
        self.tail: Tail | None = None


class IndexWriter:
    """Appends the index entries of new Runs, in the Runs' order (module docstring)."""

    def __init__(self, store: HistoryStore) -> None:
        self._store = store
        self._names = store.names
        self._lanes: dict[str, _Lane] = {}
        self._known: OrderedDict[str, Tail] = OrderedDict()
        """The last entry of recently written deployments (:data:`TAILS_KEPT`)."""

    async def announce(self, record: RunRecord) -> IndexPosition:
        """Store ``record``'s index entry after its deployment's last one; its position.

        ``record.created_at`` is the earliest key the entry may take (the announcer's
        clock). Idempotent: a Run announced already (by this or another process) keeps the
        entry it has, and its key. Raises ``SchedulerUnavailable`` when the store fails, or
        when other writers keep appending to the deployment first (:data:`MAX_RACES`).

        The announcements of one deployment made while one is being written wait and are
        written next, together: up to :data:`GROUP_MAX` entries as one atomic batch (one
        acknowledgement, one sync), each after the one before, the first by
        compare-and-set on the deployment's last entry (a volley of Run nows costs what it
        cost before entries were ordered, not a round trip and a sync each).
        """
        subject = self._names.index_subject(record.deployment_id)
        future: asyncio.Future[IndexPosition] = asyncio.get_running_loop().create_future()
        lane = self._lanes.get(subject)
        if lane is not None:  # a group is being written: this one joins the next
            lane.waiting.append((record, future))
            return await future
        lane = self._lanes[subject] = _Lane()
        lane.waiting.append((record, future))
        try:
            while lane.waiting:
                group, lane.waiting = lane.waiting[:GROUP_MAX], lane.waiting[GROUP_MAX:]
                await self._write_group(subject, lane, group)
        except BaseException as exc:
            for _, waiting in lane.waiting:
                if not waiting.done():
                    waiting.set_exception(errors.unavailable("could not record a run", exc))
            raise
        finally:
            del self._lanes[subject]
            self._remember(subject, lane.tail)
        return await future

    def _remember(self, subject: str, tail: Tail | None) -> None:
        known = self._known
        if tail is None:
            known.pop(subject, None)
            return
        known[subject] = tail
        known.move_to_end(subject)
        while len(known) > TAILS_KEPT:
            known.popitem(last=False)

    async def _write_group(self, subject: str, lane: _Lane,
                           group: list[tuple[RunRecord, asyncio.Future[IndexPosition]]]) -> None:
        """Write one group's entries and settle each announcement's future."""
        try:
            if lane.tail is None:
                # remembered, else as a direct get finds it: a tail a moment stale costs a
                # lost race, never a wrong order
                lane.tail = self._known.get(subject) or (
                    await self._tails([subject])).get(subject)
            chain: list[tuple[RunRecord, IndexEntry]] = []
            waiters: dict[str, list[asyncio.Future[IndexPosition]]] = {}
            tail = lane.tail
            for record, future in group:
                if tail is not None and tail.entry is not None and (
                        tail.entry.run_id == record.run_id):
                    future.set_result(IndexPosition(tail.seq, tail.entry.created_at))
                    continue  # announced before: its entry is the deployment's last
                if record.run_id in waiters:
                    waiters[record.run_id].append(future)  # the same Run twice in a group
                    continue
                before = chain[-1][1].created_at if chain else None
                at = after(tail, record.created_at) if before is None else (
                    record.created_at if record.created_at > before else before + TICK)
                chain.append((record, IndexEntry(run_id=record.run_id, created_at=at,
                                                 ordered=True)))
                waiters[record.run_id] = [future]
            positions = await self._append_chain(subject, lane, chain)
            for (record, _), position in zip(chain, positions, strict=True):
                for future in waiters[record.run_id]:
                    future.set_result(position)
        except BaseException as exc:
            for _, future in group:
                if not future.done():
                    future.set_exception(exc if isinstance(exc, Exception) else
                                         errors.unavailable("could not record a run", exc))
            if not isinstance(exc, Exception):
                raise

    async def _append_chain(self, subject: str, lane: _Lane,
                            chain: list[tuple[RunRecord, IndexEntry]]) -> list[IndexPosition]:
        """Append ``chain`` after ``lane.tail``: as one atomic batch when it holds several
        and the stream takes it, else (or when it is refused: a lost race, a Run announced
        before by another process) one by one."""
        if len(chain) > 1:
            tail = lane.tail
            messages: list[Outgoing] = [
                Outgoing(subject, _encode(entry), {HDR_MSG_ID: index_msg_id(record.run_id)})
                for record, entry in chain]
            first_headers = messages[0].headers
            assert first_headers is not None
            first_headers[HDR_EXPECTED_LAST_SUBJECT_SEQUENCE] = str(tail.seq if tail else 0)
            acks = await self._store.publish_atomic(self._names.index_stream, messages)
            if not isinstance(acks, Exception):
                lane.tail = Tail(acks[-1].seq, chain[-1][1])
                return [IndexPosition(ack.seq, entry.created_at)
                        for ack, (_, entry) in zip(acks, chain, strict=True)]
        return [await self._one(subject, lane, record) for record, _ in chain]

    async def _one(self, subject: str, lane: _Lane, record: RunRecord) -> IndexPosition:
        """One entry, by compare-and-set after ``lane.tail``, read again after a lost race."""
        tail = lane.tail
        for _ in range(MAX_RACES):
            if tail is not None and tail.entry is not None and (
                    tail.entry.run_id == record.run_id):
                lane.tail = tail
                return IndexPosition(tail.seq, tail.entry.created_at)  # announced before
            entry = IndexEntry(run_id=record.run_id,
                               created_at=after(tail, record.created_at), ordered=True)
            try:
                seq, duplicate = await self._store.append(
                    subject, _encode(entry), expected_seq=tail.seq if tail else 0,
                    msg_id=index_msg_id(record.run_id))
            except Conflict:
                tail = await self._leader_tail(subject)
                continue
            if not duplicate:
                lane.tail = Tail(seq, entry)
                return IndexPosition(seq, entry.created_at)
            # Another announcer's entry for this Run, met by its Msg-Id: the Run's.
            lane.tail = None
            return await self._adopt(subject, seq, record)
        raise errors.unavailable(
            f"could not record run {record.run_id!r} in the history of deployment "
            f"{record.deployment_id!r}: other writers kept adding runs first")

    async def announce_many(self, records: Sequence[RunRecord]) -> list[IndexPosition | Exception]:
        """:meth:`announce` for many Runs at once; a result per Run, in order.

        One read of every deployment's last entry, then rounds of one entry per deployment,
        sent together (one atomic batch where that pays, :meth:`AckedPublisher.publish_batched`),
        each appended by compare-and-set after the one before; a busy minute (one due time
        per deployment) is one round. A deployment whose compare-and-set is lost, or whose
        entry another announcer stored, goes on through :meth:`announce`.
        """
        results: list[IndexPosition | Exception | None] = [None] * len(records)
        queues: dict[str, deque[int]] = {}
        for i, record in enumerate(records):
            queues.setdefault(self._names.index_subject(record.deployment_id),
                              deque()).append(i)
        tails = {s: tail for s in queues if (tail := self._known.get(s)) is not None}
        unknown = [s for s in queues if s not in tails]
        if unknown:
            tails.update(await self._tails(unknown))
        contested: dict[str, deque[int]] = {}
        while queues:
            sent: list[tuple[str, int, IndexEntry]] = []
            messages: list[Outgoing] = []
            for subject, queue in list(queues.items()):
                i, tail = queue[0], tails.get(subject)
                if tail is not None and tail.entry is not None and (
                        tail.entry.run_id == records[i].run_id):
                    results[i] = IndexPosition(tail.seq, tail.entry.created_at)  # before
                    queue.popleft()
                    if not queue:
                        del queues[subject]
                    continue
                entry = IndexEntry(run_id=records[i].run_id,
                                   created_at=after(tail, records[i].created_at), ordered=True)
                sent.append((subject, i, entry))
                messages.append(Outgoing(subject, _encode(entry), {
                    HDR_MSG_ID: index_msg_id(records[i].run_id),
                    HDR_EXPECTED_LAST_SUBJECT_SEQUENCE: str(tail.seq if tail else 0)}))
            if not messages:
                continue
            acks = await self._store.publish_batched(self._names.index_stream, messages)
            for (subject, i, entry), ack in zip(sent, acks, strict=True):
                queue = queues[subject]
                if isinstance(ack, Exception) and not errors.is_conflict(ack):
                    for j in queue:
                        results[j] = ack
                    queue.clear()
                    tails.pop(subject, None)  # unanswered: its last entry is not known
                elif isinstance(ack, Exception) or ack.duplicate:
                    contested[subject] = queue  # lost a race, or announced before
                    del queues[subject]
                    tails.pop(subject, None)
                    continue
                else:
                    results[i] = IndexPosition(ack.seq, entry.created_at)
                    tails[subject] = Tail(ack.seq, entry)
                    queue.popleft()
                if not queue:
                    del queues[subject]

        for subject, tail in tails.items():
            self._remember(subject, tail)

        async def one_by_one(queue: deque[int]) -> None:
            for i in queue:
                try:
                    results[i] = await self.announce(records[i])
                except Exception as exc:
                    results[i] = exc

        await asyncio.gather(*(one_by_one(queue) for queue in contested.values()))
        return [r if r is not None else RuntimeError("not announced") for r in results]

    async def _adopt(self, subject: str, seq: int, record: RunRecord) -> IndexPosition:
        """The position of the entry at ``seq`` that another announcer stored for
        ``record``'s Run: its key becomes the Run's."""
        stored = await self._store.next(subject, from_seq=seq)
        entry = _entry_of(stored.data) if stored is not None and stored.seq == seq else None
        if entry is None or entry.run_id != record.run_id:
            # The duplicate window matched the Msg-Id, so this cannot be another Run's.
            raise errors.unavailable(
                f"could not find the history entry of run {record.run_id!r}")
        return IndexPosition(seq, entry.created_at)

    async def _leader_tail(self, subject: str) -> Tail | None:
        """The subject's last entry, from the stream leader (a follower may lag). When the
        last message is foreign, the entry of ours before it gives the key to follow."""
        stored = await self._store.last(subject)
        if stored is None:
            return None
        entry = _entry_of(stored.data)
        if entry is not None:
            return Tail(stored.seq, entry)
        tail = await self._store.tail(subject, index_entry_on)
        ours = None if tail.ours is None else _entry_of(tail.ours.data)
        return Tail(tail.last_seq, None, None if ours is None else ours.created_at)

    async def _tails(self, subjects: list[str]) -> dict[str, Tail]:
        """Each subject's last entry, read in batches (direct gets: a follower may answer
        a moment behind, which costs a lost compare-and-set, never a wrong order)."""
        tails: dict[str, Tail] = {}
        for start in range(0, len(subjects), MAX_SUBJECTS):
            chunk = subjects[start:start + MAX_SUBJECTS]
            for msg in await self._store.direct_batch(
                    self._names.index_stream, {"multi_last": chunk, "batch": len(chunk)}):
                headers = msg.headers or {}
                subject = headers.get(HDR_SUBJECT, "")
                if subject:
                    tails[subject] = Tail(int(headers.get(HDR_SEQUENCE, 0)),
                                          _entry_of(msg.data))
        for subject, tail in list(tails.items()):
            if tail.entry is None:  # foreign: the leader says which entry it follows
                leader = await self._leader_tail(subject)
                if leader is not None:
                    tails[subject] = leader
        return tails
