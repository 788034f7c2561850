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

from collections.abc import Iterable, Sequence
from datetime import datetime

import msgspec

from ..core import validation
from ..core.events import RunRecord, decode_run_event
from .direct import Answer, Request
from .event_store import HistoryStore
from .history import SPARE, IndexEntry, RunHistory, _index_entry, _Stored

MAX_WINDOW = 1000
"""Index entries one window read asks for."""

_decode_entry = msgspec.json.Decoder(IndexEntry).decode


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
    ) -> tuple[list[RunRecord], RunRecord | None]:
        """Up to ``limit`` retained Runs, newest first, older than the Run ``before``; and
        the cursor Run read.

        ``known_cursor`` is this process's own state of ``before`` (read-your-writes), when
        it holds one. Raises KeyError when ``before`` is not a retained Run of the
        deployment.
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
            return [], None
        index = names.index_subject(deployment_id)
        requests: list[Request] = [
            (names.index_stream, {"next_by_subj": index, "batch": 1}),
            (names.index_stream, {"multi_last": [index], "batch": 1}),
        ]
        if before is not None and known_cursor is None:
            requests.append((names.runs_stream, {
                "last_by_subj": names.run_subject(deployment_id, before), "no_hdr": True}))
        answers = await self._read(requests)
        first = _one_entry(answers[0])
        last = _one_entry(answers[1])
        cursor = known_cursor
        if before is not None:
            if cursor is None:
                cursor = _one_run(answers[2]) or await self._leader_cursor(before)
            if cursor is None or cursor.deployment_id != deployment_id or cursor.run_id != before:
                raise KeyError(before)
            if not await self._retained(cursor, first, now):
                raise KeyError(before)
        if first is None or last is None:
            return [], cursor
        return await self._page(deployment_id, limit, cursor, first, last), cursor

    async def _leader_cursor(self, run_id: str) -> RunRecord | None:
        """The cursor Run as the leader has it: a follower may not have it yet."""
        stored = await self._store.last(self._names.run_lookup_filter(run_id))
        if stored is None:
            return None
        try:
            return decode_run_event(stored.data).run
        except msgspec.DecodeError:
            return None

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
        """Windows of the index's own sequence ending at the cursor, widened until they hold
        a page; their first width comes from the deployment's share of the index (as in
        :meth:`RunHistory.page`, whose order and cursor rules this keeps)."""
        cursor_key = _key(cursor) if cursor is not None else None
        hi = await self._history._window_end(deployment_id, cursor, last)
        gap = (last.seq - first.seq) / max(first.pending, 1)  # index sequences per entry
        width = max(limit + SPARE, int(1.25 * (limit + SPARE) * gap))
        entries: dict[str, IndexEntry] = {}
        states: dict[str, RunRecord | None] = {}
        read_from = hi
        while True:
            lo = max(first.seq, hi - width)
            if lo < read_from:
                await self._window(deployment_id, lo, read_from, gap, entries)
                read_from = lo
            candidates = sorted((e for e in entries.values()
                                 if cursor_key is None or e.key < cursor_key),
                                key=lambda e: e.key, reverse=True)
            reached_start = lo <= first.seq
            if len(candidates) >= limit or reached_start:
                wanted = candidates[:limit + SPARE]
                await self._states(deployment_id,
                                   [e.run_id for e in wanted if e.run_id not in states], states)
                # The order is the Runs' own (created_at, run_id): an entry is written a
                # moment before its Run, so the two keys may differ by that moment.
                runs = sorted((r for e in wanted if (r := states.get(e.run_id)) is not None),
                              key=_key, reverse=True)
                page = [r for r in runs if cursor_key is None or _key(r) < cursor_key]
                if len(page) >= limit or reached_start:
                    return page[:limit]
            width *= 4

    async def _window(
        self, deployment_id: str, lo: int, hi: int, gap: float, into: dict[str, IndexEntry]
    ) -> None:
        """Add the deployment's entries from index sequence ``lo`` on, up to about ``hi``.

        Read without headers, so an entry's own sequence is not known: each read asks for
        about as many entries as the range holds (``gap``: index sequences per entry) and
        reads on from the answer's last sequence while that is still inside the range. An
        entry past ``hi`` may join: the cursor's key, not its sequence, decides a page.
        """
        subject = self._names.index_subject(deployment_id)
        seq = max(lo, 1)
        while seq < hi:
            expected = min(MAX_WINDOW, int((hi - seq) / max(gap, 1.0) * 1.25) + SPARE)
            (answer,) = await self._read([(self._names.index_stream, {
                "seq": seq, "next_by_subj": subject, "batch": expected, "no_hdr": True})])
            for msg in answer.messages:
                try:
                    entry = _decode_entry(msg.data)
                except msgspec.DecodeError:
                    continue  # not ours: never let a foreign message break a page
                into[entry.run_id] = entry
            if len(answer.messages) < expected or not answer.last_seq:
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
            into[run_id] = record if record is not None and record.run_id == run_id else None


def _one_entry(answer: Answer) -> _Stored | None:
    return _index_entry(answer.messages[0]) if answer.messages else None


def _one_run(answer: Answer) -> RunRecord | None:
    if not answer.messages:
        return None
    try:
        return decode_run_event(answer.messages[0].data).run
    except msgspec.DecodeError:
        return None  # not an event of ours: never let it break a read
