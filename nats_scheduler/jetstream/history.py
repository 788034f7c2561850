"""The Run history: its index entries, the Runs' states, and its retention.

No process holds the history in memory (docs/architecture.md, "History and retention").
Each Run gets one small entry on its deployment's index subject (``P.runidx.<deployment>``)
before its ``run.created`` is appended, in the Runs' own order (:mod:`.history_writes`).
The index stream's limits ARE the retention: the server keeps the newest ``retention_runs``
entries per deployment, none older than ``retention_days``. A Run is retained while its
entry is, or while it is unfinished; :meth:`RunHistory.enforce` purges the events of
finished Runs that fell out. Pages of ``list_runs`` are read by :mod:`.history_reads`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from functools import partial

import msgspec
from nats.aio.msg import Msg

from ..core.events import RunRecord
from ..names import (
    HDR_NUM_PENDING,
    HDR_SEQUENCE,
    HDR_SUBJECT,
    HDR_TIME_STAMP,
    untoken,
)
from ..ports.history import Indexed, IndexEntry, IndexPosition
from .event_store import HistoryStore
from .foreign import ForeignLog, ForeignMessage, index_entry_on, reason_of, run_event_on
from .history_writes import IndexWriter, decode_entry

__all__ = ["IndexEntry", "IndexPosition", "RunHistory"]

SLACK = timedelta(seconds=60)
"""How far the server's storing time of an index entry may be from its Run's ``created_at``
(the writer's clock; see docs/architecture.md on clocks). Windows are widened by it."""

SPARE = 4
"""Entries read beyond a page: an entry may have no Run (announced, never stored), and an
entry's key may differ from its Run's by the moment between them."""

MAX_BATCH = 1000
"""Messages one batched read asks for."""

MAX_SUBJECTS = 1000
"""Subjects one "last message per subject" read asks for: the server refuses a request that
matches more than 1,024 subjects ("413 Too Many Results"), wildcards included."""


class _Stored(msgspec.Struct, frozen=True):
    entry: IndexEntry
    seq: int
    stored_at: datetime
    pending: int


def _iso(instant: datetime) -> str:
    return instant.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _stored_at(msg: Msg) -> datetime:
    text = (msg.headers or {}).get(HDR_TIME_STAMP, "")
    # RFC 3339 with nanoseconds: keep microseconds for datetime.
    head, _, frac = text.rstrip("Z").partition(".")
    return datetime.fromisoformat(f"{head}.{(frac + '000000')[:6]}+00:00")


def _index_entry(msg: Msg, foreign: ForeignLog | None = None) -> _Stored | None:
    """The entry of a batched read's message (with headers), or None when it is not ours:
    never let a foreign message break a page (counted in ``foreign`` when given)."""
    headers = msg.headers or {}
    try:
        entry = decode_entry(msg.data)
    except msgspec.DecodeError as exc:
        if foreign is not None:
            foreign.noted("index", headers.get(HDR_SUBJECT, msg.subject or ""),
                          int(headers.get(HDR_SEQUENCE, 0)), reason_of(exc))
        return None
    return _Stored(entry, int(headers.get(HDR_SEQUENCE, 0)), _stored_at(msg),
                   int(headers.get(HDR_NUM_PENDING, 0)))


FOREIGN_STEP = 64
"""Entries read per request while stepping over foreign messages of an index subject."""


class RunHistory:
    """Index entries, pages and retention of the Run history of one prefix."""

    def __init__(self, store: HistoryStore) -> None:
        self._store = store
        self._names = store.names
        self._writer = IndexWriter(store)
        settings = store.settings
        self.retention_age = timedelta(days=settings.retention_days)
        self.retention_runs = settings.retention_runs
        self.purge_margin = SLACK
        """Events stored this long before the oldest retained entry are kept anyway: on a
        cluster the index and the Run events may have leaders on different nodes, whose
        clocks stamp them. On a single server one clock stamps both and it could be 0."""

    # ------------------------------------------------------------------ writing

    async def announce(self, record: RunRecord) -> IndexPosition:
        """Write the Run's index entry (before its ``run.created``), in the history's order
        (:mod:`.history_writes`): its sequence and the key the Run must take. Repeats are
        one entry: a Run announced before keeps its entry and key."""
        return await self._writer.announce(record)

    async def announce_many(self, records: Sequence[RunRecord]
                            ) -> list[IndexPosition | Exception]:
        """:meth:`announce` for many Runs at once (per-Run results)."""
        return await self._writer.announce_many(records)

    # ------------------------------------------------------------------ reading

    @property
    def store(self) -> HistoryStore:
        """The store this history reads (pages: :mod:`.history_reads`)."""
        return self._store

    async def _first(self, deployment_id: str) -> _Stored | None:
        """The deployment's oldest retained entry, with how many follow it."""
        msgs = await self._store.direct_batch(self._names.index_stream, {
            "next_by_subj": self._names.index_subject(deployment_id), "batch": 1})
        if not msgs:
            return None
        return self._entry(msgs[0]) or await self.first_ours(
            self._names.index_subject(deployment_id), _seq(msgs[0]) + 1)

    def _entry(self, msg: Msg) -> _Stored | None:
        return _index_entry(msg, self._store.foreign)

    async def first_ours(self, subject: str, seq: int) -> _Stored | None:
        """The first entry of ours on ``subject`` at or after ``seq`` (foreign messages
        stepped over: jetstream/foreign.py)."""
        while True:
            msgs = await self._store.direct_batch(self._names.index_stream, {
                "seq": seq, "next_by_subj": subject, "batch": FOREIGN_STEP})
            for msg in msgs:
                if (stored := self._entry(msg)) is not None:
                    return stored
            if len(msgs) < FOREIGN_STEP:
                return None
            seq = _seq(msgs[-1]) + 1

    async def last_ours(self, subject: str) -> _Stored | None:
        """The newest entry of ours on ``subject``: the leader says which (foreign messages
        after it skipped), a batched read gives it with its headers."""
        tail = await self._store.tail(subject, index_entry_on)
        if tail.ours is None:
            return None
        return await self.first_ours(subject, tail.ours.seq)

    async def run_state(self, subject: str) -> tuple[int, RunRecord] | None:
        """A Run's last event of ours on ``subject`` (a wildcard allowed), from the leader:
        what a batched read could not tell when the Run's last message is foreign."""
        judge = partial(run_event_on, self._names)
        tail = await self._store.tail(subject, judge)
        if tail.ours is None:
            return None
        try:
            event = run_event_on(self._names, tail.ours.subject, tail.ours.data)
        except ForeignMessage:  # pragma: no cover - the tail took it as ours
            return None
        return tail.ours.seq, event.run

    async def states(self, runs: Iterable[tuple[str, str]]) -> dict[str, tuple[int, RunRecord]]:
        """The current ``(sequence, state)`` of each ``(deployment_id, run_id)``, by Run ID.

        Runs that do not exist (or no longer do) are left out.
        """
        return await self._last_of([self._names.run_subject(dep, run) for dep, run in runs])

    async def states_by_id(self, run_ids: Iterable[str]) -> dict[str, tuple[int, RunRecord]]:
        """Like :meth:`states`, for Runs whose deployment is not known."""
        return await self._last_of([self._names.run_lookup_filter(r) for r in run_ids])

    async def _last_of(self, subjects: list[str]) -> dict[str, tuple[int, RunRecord]]:
        found: dict[str, tuple[int, RunRecord]] = {}
        foreign: list[str] = []
        for start in range(0, len(subjects), MAX_SUBJECTS):
            chunk = subjects[start:start + MAX_SUBJECTS]
            msgs = await self._store.direct_batch(self._names.runs_stream,
                                                  {"multi_last": chunk, "batch": len(chunk)})
            for msg in msgs:
                headers = msg.headers or {}
                subject = headers.get(HDR_SUBJECT, msg.subject or "")
                try:
                    record = run_event_on(self._names, subject, msg.data).run
                except ForeignMessage:
                    foreign.append(subject)  # its last event of ours is read on its own
                    continue
                found[record.run_id] = (int(headers.get(HDR_SEQUENCE, 0)), record)
        for subject in foreign:
            state = await self.run_state(subject)
            if state is not None:
                found[state[1].run_id] = state
        return found

    async def entries(self, deployment_id: str) -> list[Indexed]:
        """Every retained entry of the deployment, oldest first (a thousand per read; for
        the invariant checker, which judges pages against the whole index)."""
        subject = self._names.index_subject(deployment_id)
        found: list[Indexed] = []
        seq = 1
        while True:
            msgs = await self._store.direct_batch(self._names.index_stream, {
                "seq": seq, "next_by_subj": subject, "batch": MAX_BATCH})
            found.extend(Indexed(s.seq, s.entry) for s in map(self._entry, msgs)
                         if s is not None)
            if len(msgs) < MAX_BATCH:
                return found
            seq = int((msgs[-1].headers or {}).get(HDR_SEQUENCE, 0)) + 1

    async def _last(self, deployment_id: str) -> _Stored | None:
        """The deployment's newest entry."""
        subject = self._names.index_subject(deployment_id)
        msgs = await self._store.direct_batch(self._names.index_stream, {
            "multi_last": [subject], "batch": 1})
        if not msgs:
            return None
        return self._entry(msgs[0]) or await self.last_ours(subject)

    async def _window_end(
        self, deployment_id: str, before: RunRecord | None, last: _Stored
    ) -> int:
        """The index sequence a page's window ends before: past the deployment's newest
        entry, or past every entry stored before the cursor Run's first event (its own entry
        is among them: it was stored first)."""
        if before is not None and before.index_seq is not None:
            return before.index_seq + 1
        if before is not None:
            first_event = await self._store.next(
                self._names.run_subject(deployment_id, before.run_id))
            if first_event is not None and first_event.stored_at is not None:
                msgs = await self._store.direct_batch(self._names.index_stream, {
                    "start_time": _iso(first_event.stored_at + SLACK),
                    "next_by_subj": self._names.index_subject(deployment_id), "batch": 1})
                after = self._entry(msgs[0]) if msgs else None
                if after is not None:
                    return after.seq
        return last.seq + 1

    async def latest(self, deployment_ids: Iterable[str]) -> dict[str, IndexEntry]:
        """The newest retained entry of each deployment (one read per 1,000 deployments,
        whatever the history: the server answers "last per subject" for at most 1,024)."""
        ids = list(deployment_ids)
        latest: dict[str, IndexEntry] = {}
        for start in range(0, len(ids), MAX_SUBJECTS):
            chunk = ids[start:start + MAX_SUBJECTS]
            msgs = await self._store.direct_batch(self._names.index_stream, {
                "multi_last": [self._names.index_subject(d) for d in chunk],
                "batch": len(chunk)})
            for msg in msgs:
                subject = (msg.headers or {}).get(HDR_SUBJECT, "")
                stored = self._entry(msg) or (await self.last_ours(subject) if subject else None)
                if stored is not None and subject:
                    latest[untoken(subject.rsplit(".", 1)[-1])] = stored.entry
        return latest

    async def newest(
        self, count: int, window: timedelta, per_read: int = MAX_BATCH
    ) -> AsyncIterator[list[tuple[str, IndexEntry]]]:
        """The newest ``count`` entries of every deployment together, stored within ``window``
        of the newest one, oldest first, in chunks of at most ``per_read`` (``MAX_BATCH``).

        Bounded by ``count`` whatever the history's length: it starts ``count`` sequences
        before the index's end.
        """
        last = await self._store.last_seq(self._names.index_stream)
        if last == 0:
            return
        newest_at = await self._stored_at(last)
        per_read = max(1, min(per_read, MAX_BATCH))
        request: dict[str, object] = {"seq": max(1, last - count + 1),
                                      "next_by_subj": self._names.index_filter,
                                      "batch": per_read}
        while True:
            msgs = await self._store.direct_batch(self._names.index_stream, request)
            chunk: list[tuple[str, IndexEntry]] = []
            for msg in msgs:
                stored = self._entry(msg)
                subject = (msg.headers or {}).get(HDR_SUBJECT, "")
                if stored is None or not subject:
                    continue
                if newest_at is None or stored.stored_at >= newest_at - window:
                    chunk.append((untoken(subject.rsplit(".", 1)[-1]), stored.entry))
            if chunk:
                yield chunk
            if len(msgs) < per_read:
                return
            last_seq = int((msgs[-1].headers or {}).get(HDR_SEQUENCE, 0))
            request = {"seq": last_seq + 1, "next_by_subj": self._names.index_filter,
                       "batch": per_read}

    async def _stored_at(self, seq: int) -> datetime | None:
        """When the index message at (or after) ``seq`` was stored."""
        msgs = await self._store.direct_batch(self._names.index_stream,
                                              {"seq": seq, "batch": 1})
        return _stored_at(msgs[0]) if msgs else None

    # ------------------------------------------------------------------ retention

    async def retained(self, record: RunRecord, now: datetime) -> bool:
        """Whether ``record`` is still part of the history (unfinished Runs always are).

        A finished Run is retained while it is younger than the age limit and its index
        entry is still there. Entries are stored in order and each just before its Run's
        first event, so the entry is gone exactly when that event was stored before the
        deployment's oldest remaining entry (two reads, in the server's time).
        """
        if not record.finished:
            return True
        if record.created_at < now - self.retention_age:
            return False
        return await self.retained_after(record, await self._first(record.deployment_id))

    async def retained_after(self, record: RunRecord, first: _Stored | None) -> bool:
        """:meth:`retained` for a finished Run within the age limit, given the deployment's
        oldest index entry ``first`` (a caller that read it already saves the read)."""
        if first is None or record.created_at < first.entry.created_at - SLACK:
            return False
        if record.index_seq is not None:
            return record.index_seq >= first.seq
        event = await self._store.next(
            self._names.run_subject(record.deployment_id, record.run_id))
        return (event is not None and event.stored_at is not None
                and event.stored_at >= first.stored_at)

    async def enforce(self, deployment_ids: Iterable[str], unfinished: Iterable[RunRecord]) -> int:
        """Purge the events of finished Runs that fell out of the index; returns Runs cut.

        Per deployment the cut is its oldest retained entry: each Run's events are stored
        after its entry, so every Run with an event before the cut is past retention. What
        lies before the first event of the oldest unfinished Run goes in one purge; between
        that and the cut, finished Runs are purged one by one and unfinished ones are kept:
        unfinished Runs are never dropped.
        """
        open_runs: dict[str, set[str]] = {}
        for record in unfinished:
            open_runs.setdefault(record.deployment_id, set()).add(record.run_id)
        cut_runs = 0
        # Read once, before every index read of the pass (see _cut): not once per deployment.
        end = await self._store.last_seq(self._names.runs_stream) + 1
        for deployment_id in deployment_ids:
            oldest = await self._first(deployment_id)
            if oldest is not None and await self._begins_with(deployment_id, oldest):
                continue  # nothing stored before its oldest retained Run: nothing to cut
            cut = await self._cut(deployment_id, end, oldest)
            kept = open_runs.get(deployment_id, set())
            lowest = cut
            for run_id in kept:
                event = await self._store.next(self._names.run_subject(deployment_id, run_id))
                if event is not None:
                    lowest = min(lowest, event.seq)
            runs_filter = self._names.deployment_runs_filter(deployment_id)
            if lowest > 1:
                await self._store.purge_subject(self._names.runs_stream, runs_filter,
                                                before_seq=lowest)
            for subject in await self._subjects_between(runs_filter, lowest, cut):
                if untoken(subject.rsplit(".", 1)[-1]) not in kept:
                    await self._store.purge_subject(self._names.runs_stream, subject)
                    cut_runs += 1
        return cut_runs

    async def _begins_with(self, deployment_id: str, oldest: _Stored) -> bool:
        """Whether the deployment's first stored Run event is its oldest retained Run's.

        Then no event lies before the oldest retained Run, so the cut would purge nothing
        (a later Run's events all come after that event too, whatever the cut): a pass over
        a million deployments with short histories is one index read and this one read
        each, not a search by time and a purge request each (the idle cost at a million:
        docs/benchmarks.md, "A million Schedules, third round")."""
        msgs = await self._store.direct_batch(self._names.runs_stream, {
            "seq": 1, "next_by_subj": self._names.deployment_runs_filter(deployment_id),
            "batch": 1})
        if not msgs:
            return True  # no Run event at all
        subject = (msgs[0].headers or {}).get(HDR_SUBJECT, "")
        return subject == self._names.run_subject(deployment_id, oldest.entry.run_id)

    async def _cut(self, deployment_id: str, end: int, first: _Stored | None) -> int:
        """The first Run event sequence of the deployment that is still retained.

        Decided on the server's own trimming of the index (by count, and by age in the
        server's time), never on this process's clock: a replica whose clock runs ahead must
        not purge what the server still keeps. ``first``: the deployment's oldest retained
        index entry, read after ``end``.
        """
        # ``end`` was read before the index: a Run created after it is past it; one created
        # before had its entry written first, so an empty index means none is retained.
        if first is None:
            return end
        return await self._first_seq_at(deployment_id, first.stored_at - self.purge_margin)

    async def _subjects_between(self, runs_filter: str, lo: int, hi: int) -> set[str]:
        """The Run subjects with an event stored in ``[lo, hi)``."""
        subjects: set[str] = set()
        seq = lo
        while seq < hi:
            msgs = await self._store.direct_batch(self._names.runs_stream, {
                "seq": seq, "next_by_subj": runs_filter, "batch": MAX_BATCH})
            inside = [m for m in msgs
                      if int((m.headers or {}).get(HDR_SEQUENCE, hi)) < hi]
            subjects.update((m.headers or {}).get(HDR_SUBJECT, "") for m in inside)
            if len(inside) < MAX_BATCH:
                break
            seq = int((inside[-1].headers or {})[HDR_SEQUENCE]) + 1
        subjects.discard("")
        return subjects

    async def _first_seq_at(self, deployment_id: str, instant: datetime) -> int:
        """The stream sequence of the deployment's first Run event stored at or after
        ``instant`` (the stream's next sequence when there is none)."""
        msgs = await self._store.direct_batch(self._names.runs_stream, {
            "start_time": _iso(instant),
            "next_by_subj": self._names.deployment_runs_filter(deployment_id), "batch": 1})
        if msgs:
            return int((msgs[0].headers or {}).get(HDR_SEQUENCE, 0))
        return await self._store.last_seq(self._names.runs_stream) + 1


def _seq(msg: Msg) -> int:
    return int((msg.headers or {}).get(HDR_SEQUENCE, 0))
