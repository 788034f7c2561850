"""A page of a deployment's Run history in three pipelined rounds of reads.

What a page costs on this machine is what the client does per message: a message with
headers costs nats-py about three times one without (its header parser), and every read
costs a round trip. So a page (:meth:`HistoryPages.page`) reads:

1. in one round trip together: the deployment's oldest and newest index entries (the
   retention cut and the index's density), and the cursor Run when this process does not
   hold it;
2. the index entries of a window ending at the cursor, without headers (ADR-31
   ``no_hdr``), widened only if it held too few;
3. the current state of each Run of the window, one "last message of the subject" read
   per Run, without headers, all sent at once.

A round needs what the one before it found (the window's place, the Runs' IDs), so three
is the least for a layout with one index subject per deployment: "last per subject" reads
refuse more than 1,024 subjects (a deployment's Run subjects are more) and a batch reads
forward only. Each read may be answered by a stream follower (ADR-8): the history is
read-only, and :mod:`nats_scheduler.projections.reads` merges what this process wrote itself.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta

import msgspec

from ..core import validation
from ..core.events import RunRecord, decode_run_event
from ..names import HDR_SEQUENCE
from ..ports.history import IndexEntry, Page
from .direct import Answer, Request
from .event_store import HistoryStore
from .history import SPARE, RunHistory, _index_entry, _Stored
from .history_writes import decode_entry

MAX_WINDOW = 1000
"""Index entries one window read asks for."""

LEGACY_SLACK = timedelta(minutes=2)
"""How far an index entry of a release before 0.2 may be from its Run's own key, and from
the order of the entries stored around it: those releases stamped the entry with the instant
a firing's Schedule read was proven and the Run with the instant of its create (seconds
apart under load, at most the firing's retry time), each on its own replica's clock."""

_LAST = "\U0010ffff"
"""Sorts after every Run ID: the upper end of the keys of one instant."""

_NONE = (datetime.min.replace(tzinfo=UTC), "")
"""Sorts before every key."""



def _key(record: RunRecord) -> tuple[datetime, str]:
    return (record.created_at, record.run_id)


class HistoryPages:
    """Pages of the Run history of one prefix (see the module docstring)."""

    def __init__(self, history: RunHistory) -> None:
        self._store: HistoryStore = history.store
        self._history = history
        self._names = self._store.names

    async def _read(self, requests: Sequence[Request]) -> list[Answer]:
        """Send ``requests`` together and await every answer, retried as one."""
        return await self._store.direct_many(requests)

    async def page(
        self, deployment_id: str, limit: int, before: str | None,
        known_cursor: RunRecord | None, now: datetime,
    ) -> Page:
        """Up to ``limit`` retained Runs, newest first, older than the Run ``before``; the
        cursor Run read, and where the retained history begins.

        ``known_cursor`` is this process's own state of ``before`` (read-your-writes), when
        it holds one. Raises KeyError when ``before`` is not a Run of the deployment. A
        cursor that left the history while a reader paged (retention drops the oldest
        first) gives an empty page: every Run older than it left before it.
        """
        names = self._names
        usable = validation.usable_id(deployment_id)
        if before is not None and known_cursor is None and not (
                usable and validation.usable_id(before)):
            raise KeyError(before)
        if before is not None and known_cursor is not None and (
                known_cursor.deployment_id != deployment_id):
            raise KeyError(before)
        if not usable:
            return Page([], None, None)
        index = names.index_subject(deployment_id)
        requests: list[Request] = [
            (names.index_stream, {"next_by_subj": index, "batch": 1}),
            (names.index_stream, {"multi_last": [index], "batch": 1}),
        ]
        if before is not None and known_cursor is None:
            requests.append((names.runs_stream, {
                "last_by_subj": names.run_subject(deployment_id, before), "no_hdr": True}))
        answers = await self._read(requests)
        first = await self._first_entry(index, answers[0])
        last = await self._last_entry(index, answers[1])
        oldest = None if first is None else first.seq
        cursor = known_cursor
        if before is not None:
            if cursor is None:
                cursor = _one_run(answers[2]) or await self._leader_cursor(before)
            if cursor is None or cursor.deployment_id != deployment_id or cursor.run_id != before:
                raise KeyError(before)
            if not await self._retained(cursor, first, now):
                return Page([], cursor, oldest)
        if first is None or last is None:
            return Page([], cursor, oldest)
        return Page(await self._page(deployment_id, limit, cursor, first, last), cursor, oldest)

    async def _first_entry(self, subject: str, answer: Answer) -> _Stored | None:
        """The deployment's oldest entry: the answer's, or the first of ours after it when
        the answer is a foreign message (jetstream/foreign.py)."""
        if not answer.messages:
            return None
        message = answer.messages[0]
        return _index_entry(message, self._store.foreign) or await self._history.first_ours(
            subject, int((message.headers or {}).get(HDR_SEQUENCE, 0)) + 1)

    async def _last_entry(self, subject: str, answer: Answer) -> _Stored | None:
        """The deployment's newest entry: the answer's, or the leader's last of ours when
        the answer is a foreign message."""
        if not answer.messages:
            return None
        return (_index_entry(answer.messages[0], self._store.foreign)
                or await self._history.last_ours(subject))

    async def _leader_cursor(self, run_id: str) -> RunRecord | None:
        """The cursor Run as the leader has it: a follower may not have it yet."""
        state = await self._history.run_state(self._names.run_lookup_filter(run_id))
        return None if state is None else state[1]

    async def _retained(self, record: RunRecord, first: _Stored | None, now: datetime) -> bool:
        """:meth:`RunHistory.retained`, on the oldest entry this page read already."""
        if not record.finished:
            return True
        if record.created_at < now - self._history.retention_age:
            return False
        return await self._history.retained_after(record, first)

    async def _page(
        self, deployment_id: str, limit: int, cursor: RunRecord | None,
        first: _Stored, last: _Stored,
    ) -> list[RunRecord]:
        """Windows of the index's own sequence ending at the cursor's entry, widened until
        they hold a page; their first width comes from the deployment's share of the index.

        Entries written since 0.2 are in the Runs' order (jetstream/history_writes.py): a
        page is the newest Runs of the entries before the cursor's. Older entries may be
        out of order, and off their Run's key, by up to :data:`LEGACY_SLACK`: when a window
        holds one, the entries stored after the cursor's are read too, as far as that
        tolerance reaches, and every entry that may hold a Run of the page is read.
        """
        cursor_key = _key(cursor) if cursor is not None else None
        hi = await self._history._window_end(deployment_id, cursor, last)
        gap = (last.seq - first.seq) / max(first.pending, 1)  # index sequences per entry
        width = max(limit + SPARE, int(1.25 * (limit + SPARE) * gap))
        entries: list[IndexEntry] = []
        states: dict[str, RunRecord | None] = {}
        read_from, ahead = hi, cursor is None
        while True:
            lo = max(first.seq, hi - width)
            if lo < read_from:
                await self._window(deployment_id, lo, read_from, gap, entries)
                read_from = lo
            legacy = not all(e.ordered for e in entries)
            if legacy and not ahead:
                assert cursor is not None
                await self._ahead(deployment_id, hi, last.seq,
                                  cursor.created_at + LEGACY_SLACK, entries)
                ahead = True
            page = await self._choose(deployment_id, entries, cursor_key, limit,
                                      legacy, lo <= first.seq, states)
            if page is not None:
                return page
            width *= 4

    async def _choose(
        self, deployment_id: str, entries: list[IndexEntry],
        cursor_key: tuple[datetime, str] | None, limit: int, legacy: bool,
        reached_start: bool, states: dict[str, RunRecord | None],
    ) -> list[RunRecord] | None:
        """The page, if the entries read are enough to decide it; None: read further back.

        A Run is placed by its own key, read from its state: an entry only says which Runs
        to read, and how new they may be. The newest candidates are read first, in rounds
        of about a page, until no unread candidate can outrank the page's last Run, nor
        any entry before the window.
        """
        bounds: dict[str, tuple[datetime, str]] = {}
        for entry in entries:
            if entry.ordered:
                low = high = entry.key
            else:
                low = (entry.created_at - LEGACY_SLACK, "")
                high = (entry.created_at + LEGACY_SLACK, _LAST)
            if cursor_key is not None and low >= cursor_key:
                continue  # its Run is the cursor or newer
            if high > bounds.get(entry.run_id, _NONE):
                bounds[entry.run_id] = high
        candidates = sorted(bounds, key=bounds.__getitem__, reverse=True)
        # The newest a Run of an entry before the window may be: older than the oldest
        # entry read when entries are in order; within the tolerance of the oldest stamp
        # read when they are not.
        if not entries:
            floor = None
        elif legacy:
            floor = (min(e.created_at for e in entries) + LEGACY_SLACK, _LAST)
        else:
            floor = min(e.key for e in entries)
        taken = 0
        while True:
            runs = sorted((r for run_id in candidates[:taken]
                           if (r := states.get(run_id)) is not None
                           and (cursor_key is None or _key(r) < cursor_key)),
                          key=_key, reverse=True)
            if len(runs) >= limit:
                kth = _key(runs[limit - 1])
                # every unread candidate that may still outrank the page's last Run
                wanted = list(itertools.takewhile(lambda i, kth=kth: bounds[i] >= kth,
                                                  candidates[taken:]))
                if not wanted:
                    done = reached_start or (floor is not None and floor <= kth)
                    return runs[:limit] if done else None
            elif taken >= len(candidates):
                return runs if reached_start else None
            else:
                wanted = candidates[taken:taken + limit - len(runs) + SPARE]
            await self._states(deployment_id, [i for i in wanted if i not in states], states)
            taken += len(wanted)

    async def _window(
        self, deployment_id: str, lo: int, hi: int, gap: float, into: list[IndexEntry]
    ) -> None:
        """Add the deployment's entries from index sequence ``lo`` on, up to about ``hi``.

        Read without headers, so an entry's own sequence is not known: each read asks for
        about as many entries as the range holds (``gap``: index sequences per entry) and
        reads on from the answer's last sequence while that is still inside the range. An
        entry past ``hi`` may join: Runs are placed by their keys, not their sequences.
        """
        subject = self._names.index_subject(deployment_id)
        seq = max(lo, 1)
        while seq < hi:
            expected = min(MAX_WINDOW, int((hi - seq) / max(gap, 1.0) * 1.25) + SPARE)
            (answer,) = await self._read([(self._names.index_stream, {
                "seq": seq, "next_by_subj": subject, "batch": expected, "no_hdr": True})])
            into.extend(_entries(answer))
            if len(answer.messages) < expected or not answer.last_seq:
                return
            seq = answer.last_seq + 1

    async def _ahead(
        self, deployment_id: str, seq: int, end: int, until: datetime,
        into: list[IndexEntry],
    ) -> None:
        """Add the entries stored from index sequence ``seq`` on, until one is stamped after
        ``until`` or the deployment's last (at ``end``) is read: among entries of older
        releases, a Run stored after the cursor's may still be older than it."""
        subject = self._names.index_subject(deployment_id)
        while seq <= end:
            (answer,) = await self._read([(self._names.index_stream, {
                "seq": seq, "next_by_subj": subject, "batch": MAX_WINDOW, "no_hdr": True})])
            fresh = _entries(answer)
            into.extend(fresh)
            if (len(answer.messages) < MAX_WINDOW or not answer.last_seq
                    or any(e.created_at > until for e in fresh)):
                return
            seq = answer.last_seq + 1

    async def _states(
        self, deployment_id: str, run_ids: Iterable[str], into: dict[str, RunRecord | None]
    ) -> None:
        """The current state of each Run (None: never created, or no longer retained)."""
        ids = list(run_ids)
        if not ids:
            return
        names = self._names
        answers = await self._read([
            (names.runs_stream,
             {"last_by_subj": names.run_subject(deployment_id, run_id), "no_hdr": True})
            for run_id in ids])
        for run_id, answer in zip(ids, answers, strict=True):
            record = _one_run(answer)
            if record is None and answer.messages:  # foreign: its last event of ours, alone
                state = await self._history.run_state(names.run_subject(deployment_id, run_id))
                record = None if state is None else state[1]
            into[run_id] = record if record is not None and record.run_id == run_id else None


def _entries(answer: Answer) -> list[IndexEntry]:
    """The index entries of a headerless batch, in the order stored."""
    entries = []
    for msg in answer.messages:
        try:
            entries.append(decode_entry(msg.data))
        except msgspec.DecodeError:
            continue  # not ours: never let a foreign message break a page
    return entries


def _one_run(answer: Answer) -> RunRecord | None:
    if not answer.messages:
        return None
    try:
        return decode_run_event(answer.messages[0].data).run
    except msgspec.DecodeError:
        return None  # not an event of ours: never let it break a read


class PagedHistory(RunHistory):
    """The Run history port over JetStream: the index, its retention (:class:`RunHistory`)
    and its pages (:class:`HistoryPages`)."""

    def __init__(self, store: HistoryStore) -> None:
        super().__init__(store)
        self._pages = HistoryPages(self)

    async def page(self, deployment_id: str, limit: int, before: str | None,
                   known_cursor: RunRecord | None, now: datetime) -> Page:
        return await self._pages.page(deployment_id, limit, before, known_cursor, now)
