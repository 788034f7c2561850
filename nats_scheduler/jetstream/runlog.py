"""Writing and reading Run events: the store plus read-your-writes into the ledger.

The ledger is the runtime's projection (``projections/ledger.py``); this adapter sees it
only as a :class:`RunProjection`, so the layer below never imports the one above it.

``create`` is the uniqueness constraint of a Run: the first event is appended with
``Nats-Expected-Last-Subject-Sequence: 0`` on the Run's own subject, so of all the processes
that create the same Run (every replica firing one due time; retries of one Run now), exactly
one append succeeds, however long after the first (unlike the duplicate window). Every later
event is appended on the sequence the writer last saw: the single-writer rule.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from functools import partial

import msgspec

from ..core.events import RunCreated, RunEventType, RunRecord, decode_run_event, encode
from ..names import HDR_EXPECTED_LAST_SUBJECT_SEQUENCE, HDR_MSG_ID, run_event_msg_id
from ..ports.runs import Announcement, RunProjection, Stored
from . import errors
from .acks import Outgoing
from .errors import Conflict
from .event_store import EventStore, StoredMessage
from .follower import Follower
from .foreign import ForeignMessage, reason_of, run_event_on
from .history import IndexPosition, RunHistory
from .leases import Lease, Leases

OWN_WRITES_KEPT = 100_000
"""Own writes remembered until the follower delivers them back (then forgotten)."""

OnRefused = Callable[[int, str, Exception], None]
"""Told of a followed event the projection refused: (sequence, subject, why)."""


class RunLog:
    """Append and read the events of Runs.

    ``history`` and ``leases`` are where a new Run is announced before it is stored (its
    history entry and its open key).
    """

    def __init__(
        self, store: EventStore, ledger: RunProjection, *, history: RunHistory | None = None,
        leases: Leases | None = None,
    ) -> None:
        self._store = store
        self._ledger = ledger
        self._names = store.names
        self._judge = partial(run_event_on, store.names)
        """Takes a message of a Run's subject as ours (its event), else ForeignMessage."""
        self._history = history
        self._leases = leases
        self._own: dict[str, int] = {}
        """Run subject -> sequence of this process's last write there, until followed."""
        self._writing: dict[str, list[tuple[int, bytes]]] = {}
        """Run subject -> the followed events held while a write of this process there is
        unanswered (see :meth:`followed`)."""
        self._writes: dict[str, int] = {}
        """Run subject -> how many writes of this process there are unanswered."""
        self.on_refused: OnRefused | None = None
        """Told of a held event the projection refused once it is let go (the follower's
        poison count); a refusal met at delivery is raised to the follower instead."""

    async def announce(self, run: RunRecord) -> Announcement:
        """Write the Run's history entry and open its key, before its ``run.created``.

        Returns the entry's sequence (the same for every announcer of one Run), to record on
        the Run, and the lease when this call opened the key (the creator's lease: see
        :meth:`Leases.announce`). Both writes are idempotent, so every replica firing the
        same due time may announce it. A Run announced but never stored (its creator died,
        or lost the Schedule's freshness check) leaves an entry that reads skip and a key
        that the next start closes.
        """
        # One after the other: under load the two writes cost the same either way, and
        # running them side by side cost two tasks per Run (bench/firing.py).
        position = None if self._history is None else await self._history.announce(run)
        seq = None if position is None else position.seq
        created_at = None if position is None else position.created_at
        leases = self._leases
        if leases is None:
            return Announcement(seq, None, created_at)
        lease = await self._store.retrying("could not open a run",
                                           lambda: leases.announce(run.run_id))
        return Announcement(seq, lease, created_at)

    async def announce_many(
        self, runs: Sequence[RunRecord]
    ) -> list[Announcement | Exception]:
        """:meth:`announce` for many Runs: one batch of entries and one of keys, side by side
        (two streams: two batches, each atomic while nothing races)."""
        history, leases = self._history, self._leases

        async def entries_of() -> list[IndexPosition | Exception | None]:
            if history is None:
                return [None] * len(runs)
            return list(await history.announce_many(runs))

        async def keys_of() -> list[Lease | Exception | None]:
            if leases is None:
                return [None] * len(runs)
            return await leases.announce_many([run.run_id for run in runs])

        entries, keys = await asyncio.gather(entries_of(), keys_of())
        results: list[Announcement | Exception] = []
        for entry, key in zip(entries, keys, strict=True):
            if isinstance(entry, Exception):
                results.append(entry)
            elif isinstance(key, Exception):
                results.append(key)
            elif entry is None:
                results.append(Announcement(None, key))
            else:
                results.append(Announcement(entry.seq, key, entry.created_at))
        return results

    async def create(
        self, event: RunCreated, *, msg_id: str, retry_seconds: float | None = None
    ) -> Stored:
        """Store a new Run, or find the one that already holds its ID.

        Returns what was stored, and whether THIS call created it. The second
        writer of the same Run ID gets the first writer's record. ``retry_seconds`` bounds
        the retries of the append itself (see :meth:`Store.append`).
        """
        run = event.run
        subject = self._names.run_subject(run.deployment_id, run.run_id)
        with self._write_on((subject,)):
            try:
                seq, duplicate = await self._store.append(
                    subject, encode(event), expected_seq=0, msg_id=msg_id,
                    retry_seconds=retry_seconds, judge=self._judge,
                )
            except Conflict:
                duplicate = True
                seq = 0
            if not duplicate:
                return self._created(subject, seq, run)
        return await self._stored_first(event, msg_id)

    async def create_many(
        self, events: Sequence[RunCreated], msg_ids: Sequence[str], *,
        still_fresh: Callable[[], bool] = lambda: True,
    ) -> list[Stored | Exception]:
        """:meth:`create` for many Runs, each decided once, in one atomic batch.

        Per-Run results: what was stored (and whether THIS call created it), or the
        exception that lost it. One create that loses its race (another replica stored that
        Run) refuses the whole batch and nothing of it is stored; the batch is then sent
        again as pipelined creates, each with its own answer, if ``still_fresh()`` (the
        decision behind them may still leave: runtime/firing.py); otherwise every item gets
        the refusal, to be fired again from a fresh read. A Run someone else stored first is
        read back.
        """
        subjects = [self._names.run_subject(event.run.deployment_id, event.run.run_id)
                    for event in events]
        messages: list[Outgoing] = [
            Outgoing(subject, encode(event),
                     {HDR_MSG_ID: msg_id, HDR_EXPECTED_LAST_SUBJECT_SEQUENCE: "0"})
            for subject, event, msg_id in zip(subjects, events, msg_ids, strict=True)]
        created: dict[int, Stored] = {}
        with self._write_on(subjects):
            acks = await self._store.publish_atomic_or_each(self._names.runs_stream, messages,
                                                            resend=still_fresh)
            if not isinstance(acks, Exception):
                for i, (subject, event, ack) in enumerate(zip(subjects, events, acks,
                                                              strict=True)):
                    if not isinstance(ack, Exception) and not ack.duplicate:
                        # before the held events are let go: ours is then skipped
                        created[i] = self._created(subject, ack.seq, event.run)
        if isinstance(acks, Exception):
            return [acks] * len(events)  # fired again from a fresh read, one by one
        results: list[Stored | Exception] = []
        for i, (event, ack) in enumerate(zip(events, acks, strict=True)):
            if i in created:
                results.append(created[i])
            elif isinstance(ack, Exception) and not errors.is_conflict(ack):
                results.append(ack)
            else:  # a lost race, or a resend of ours: read back what the store holds
                try:
                    results.append(await self._stored_first(event, msg_ids[i]))
                except Exception as exc:
                    results.append(exc)
        return results

    def _created(self, subject: str, seq: int, run: RunRecord) -> Stored:
        """A create this call stored: applied to the ledger at once (read your writes)."""
        self._wrote(subject, seq)
        self._ledger.apply(seq, run)
        return Stored(seq, run, True)

    async def _stored_first(self, event: RunCreated, msg_id: str) -> Stored:
        """The Run a create found already stored, read back; created by THIS process only
        when its create is exactly ``event`` (a resend whose first acknowledgement was
        lost). Two replicas announcing one due time give its Run the same key, so the Run
        alone may read the same from both: the create's writer (``actor``) tells them apart,
        one more read only then. A subject that holds only foreign messages holds no Run:
        the create is made after them (sent once: it was decided just now)."""
        run = event.run
        existing = await self.fetch(run.deployment_id, run.run_id)
        if existing is None:
            return await self.create(event, msg_id=msg_id, retry_seconds=0)
        seq, record = existing
        ours = record == run
        if ours:
            first = await self._first_ours(run.deployment_id, run.run_id)
            ours = first is not None and self._judge(first.subject, first.data) == event
        return Stored(seq, record, ours)

    async def _first_ours(self, deployment_id: str, run_id: str) -> StoredMessage | None:
        """The Run's first event (its ``run.created``), foreign messages before it skipped."""
        subject = self._names.run_subject(deployment_id, run_id)
        seq = 1
        while (message := await self._store.next(subject, seq)) is not None:
            try:
                self._judge(subject, message.data)
            except ForeignMessage:
                seq = message.seq + 1
                continue
            return message
        return None

    async def append(self, expected_seq: int, event: RunEventType) -> int:
        """Append a later event of a Run on the sequence the writer last saw.

        Raises :class:`Conflict` when someone else wrote to the Run since.
        """
        run = event.run
        subject = self._names.run_subject(run.deployment_id, run.run_id)
        with self._write_on((subject,)):
            seq, _ = await self._store.append(
                subject, encode(event), expected_seq=expected_seq,
                msg_id=run_event_msg_id(run.run_id, expected_seq, self._store.decisions.next()),
                judge=self._judge,
            )
            self._wrote(subject, seq)
            self._ledger.apply(seq, run)
        return seq

    @contextlib.contextmanager
    def _write_on(self, subjects: Sequence[str]) -> Iterator[None]:
        """While this process's write to ``subjects`` is unanswered, hold the events the
        follower delivers there (:meth:`followed`); then let them go, skipping the one the
        write stored (applied already, from the object written, not decoded again)."""
        writes, writing = self._writes, self._writing
        for subject in subjects:
            count = writes.get(subject, 0)
            writes[subject] = count + 1
            if not count:
                writing[subject] = []
        try:
            yield
        finally:
            for subject in subjects:
                count = writes.pop(subject) - 1
                if count:
                    writes[subject] = count
                    continue
                for seq, data in writing.pop(subject):
                    try:
                        self._apply_followed(seq, subject, data)
                    except Exception as exc:  # a poison event: skipped, as the follower does
                        if self.on_refused is not None:
                            self.on_refused(seq, subject, exc)

    def followed(self, seq: int, subject: str, data: bytes) -> None:
        """A Run event the follower delivers: applied to the ledger unless this process
        wrote it (applied when written).

        The followed copy of a write often arrives before the write's acknowledgement has
        said which sequence is ours; decoding and applying it then cost a tenth of a busy
        replica's CPU (docs/benchmarks.md). So an event on a subject this process is writing
        to waits until that write is answered. Holding it is safe: a Run's events have one
        writer at a time, the ledger applies by sequence (an older one is ignored), and only
        the events of that one Run wait, for as long as its write takes.
        """
        held = self._writing.get(subject)
        if held is not None:
            held.append((seq, data))
            return
        self._apply_followed(seq, subject, data)

    def _apply_followed(self, seq: int, subject: str, data: bytes) -> None:
        if self.own_event(subject, seq):
            return  # applied when this process wrote it
        try:
            event = decode_run_event(data)
        except (msgspec.DecodeError, ValueError) as exc:
            raise ForeignMessage(subject, reason_of(exc)) from exc
        # the ledger refuses an event filed under another Run's subject itself
        self._ledger.apply_event(seq, event, self._names.run_ids_of_subject(subject))

    def _wrote(self, subject: str, seq: int) -> None:
        if len(self._own) >= OWN_WRITES_KEPT:
            self._own.clear()  # the follower fell far behind: it just applies them again
        self._own[subject] = seq

    def own_event(self, subject: str, seq: int) -> bool:
        """Whether the followed event ``seq`` on ``subject`` is one this process wrote (and
        applied to the ledger when it wrote it): the follower may skip decoding it."""
        mine = self._own.get(subject)
        if mine is None or mine < seq:
            return False
        if mine == seq:
            del self._own[subject]
        return True

    async def end(self) -> int:
        """The Run events' last sequence, from the stream leader (0: none)."""
        return await self._store.last_seq(self._names.runs_stream)

    def feed(self, *, from_seq: int, on_skip: Callable[[], None] | None = None) -> Follower:
        """An ordered consumer of the Run events from ``from_seq`` on, into :meth:`followed`;
        a held event the projection refuses later counts as the consumer's skip."""
        follower = Follower(self._store, stream=self._names.runs_stream,
                            filter_subject=self._names.runs_filter, on_message=self.followed,
                            from_seq=from_seq, on_skip=on_skip, foreign=self._store.foreign)
        self.on_refused = follower.refused
        return follower

    async def first_stored_at(self, deployment_id: str, run_id: str) -> datetime | None:
        """When the stream leader stored the Run's first event (its server timestamp)."""
        first = await self._first_ours(deployment_id, run_id)
        return None if first is None else first.stored_at

    async def fetch(self, deployment_id: str, run_id: str) -> tuple[int, RunRecord] | None:
        """The stored state of a Run (leader read), also applied to the ledger: its last
        event of ours (a foreign message after it is skipped: jetstream/foreign.py)."""
        return await self._read(self._names.run_subject(deployment_id, run_id))

    async def find(self, run_id: str) -> tuple[int, RunRecord] | None:
        """A Run by ID alone, whatever its deployment (one wildcard read)."""
        return await self._read(self._names.run_lookup_filter(run_id))

    async def _read(self, subject: str) -> tuple[int, RunRecord] | None:
        tail = await self._store.tail(subject, self._judge)
        if tail.ours is None:
            return None
        record = self._judge(tail.ours.subject, tail.ours.data).run
        self._ledger.apply(tail.ours.seq, record)
        return tail.ours.seq, record
