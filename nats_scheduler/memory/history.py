"""The Run history in memory (the contract: :mod:`nats_scheduler.ports.history`).

Entries are kept per deployment in the order stored, each after the last by the rule the
JetStream writer follows (a later entry, a later key; a Run announced before keeps its
entry), and trimmed by the retention as the store's clock moves (the newest
``retention_runs`` per deployment, none older than ``retention_days``). A page is computed
from all of them: the reference the JetStream pages are held to.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from datetime import datetime, timedelta

from ..core.events import RunRecord
from ..ports.history import Indexed, IndexEntry, IndexPosition, Page
from .retry import retrying
from .store import Foreign, MemoryStore, last_ours

TICK = timedelta(microseconds=1)
DUPLICATE_WINDOW = timedelta(minutes=2)
"""Within it a repeated announcement finds the entry of the first (the real store's window)."""


def _key(record: RunRecord) -> tuple[datetime, str]:
    return (record.created_at, record.run_id)


class MemoryHistory:
    """The history of :class:`MemoryStore`, for one process."""

    def __init__(self, store: MemoryStore, *, retry_seconds: float = 10.0) -> None:
        self._store = store
        self._retry_seconds = retry_seconds
        self.retention_age = timedelta(days=store.retention_days)

    async def _read(self) -> None:
        """A read's moment at the store: retried through an outage for the retry budget,
        then SchedulerUnavailable (as the JetStream history's reads)."""
        await retrying("could not read the run history", self._store.operation,
                       self._retry_seconds)

    # ------------------------------------------------------------------ the entries

    def _entries(self, deployment_id: str) -> list[tuple[int, datetime, IndexEntry, str]]:
        """The deployment's retained entries, trimmed as the store's clock has moved; a
        foreign message holds its place in the retention and is skipped by every reader."""
        entries = self._store.index.get(deployment_id, [])
        cut = self._store.now() - timedelta(days=self._store.retention_days)
        keep = [e for e in entries if e[1] >= cut][-self._store.retention_runs:]
        if len(keep) != len(entries):
            self._store.index[deployment_id] = keep
        return [e for e in keep if not isinstance(e[2], Foreign)]  # type: ignore[misc]

    async def announce(self, record: RunRecord) -> IndexPosition:
        await self._store.operation()
        entries = self._entries(record.deployment_id)
        now = self._store.now()
        for seq, stored_at, entry, _ in reversed(entries):
            if entry.run_id == record.run_id and (
                    entries[-1][2].run_id == record.run_id or now - stored_at < DUPLICATE_WINDOW):
                return IndexPosition(seq, entry.created_at)  # announced before
        created = record.created_at
        if entries and created <= entries[-1][2].created_at:
            created = entries[-1][2].created_at + TICK
        self._store.index_seq += 1
        seq = self._store.index_seq
        entry = IndexEntry(run_id=record.run_id, created_at=created, ordered=True)
        self._store.index.setdefault(record.deployment_id, []).append(
            (seq, now, entry, record.run_id))
        self._entries(record.deployment_id)  # the retention by count, at once
        self._store.answered()
        return IndexPosition(seq, created)

    async def announce_many(self, records: Sequence[RunRecord]
                            ) -> list[IndexPosition | Exception]:
        results: list[IndexPosition | Exception] = []
        for record in records:
            try:
                results.append(await self.announce(record))
            except Exception as exc:
                results.append(exc)
        return results

    # ------------------------------------------------------------------ reading

    def _state(self, run_id: str) -> tuple[int, RunRecord] | None:
        last = last_ours(self._store.runs.get(run_id))
        if last is None:
            return None
        return last.seq, last.event.run  # type: ignore[union-attr]

    async def page(self, deployment_id: str, limit: int, before: str | None,
                   known_cursor: RunRecord | None, now: datetime) -> Page:
        await self._read()
        entries = self._entries(deployment_id)
        oldest = entries[0][0] if entries else None
        cursor = known_cursor
        if before is not None:
            if cursor is None:
                found = self._state(before)
                cursor = found[1] if found is not None else None
            if cursor is None or cursor.deployment_id != deployment_id:
                raise KeyError(before)
            if not self._retained(cursor, oldest, now):
                return Page([], cursor, oldest)
        runs: dict[str, RunRecord] = {}
        for _, _, entry, _ in entries:
            state = self._state(entry.run_id)
            if state is not None and state[1].deployment_id == deployment_id:
                runs[entry.run_id] = state[1]
        listed = sorted((r for r in runs.values() if self._retained(r, oldest, now)
                         and (cursor is None or _key(r) < _key(cursor))),
                        key=_key, reverse=True)
        return Page(listed[:limit], cursor, oldest)

    def _retained(self, record: RunRecord, oldest: int | None, now: datetime) -> bool:
        if not record.finished:
            return True
        if record.created_at < now - self.retention_age:
            return False
        return oldest is not None and (record.index_seq is None or record.index_seq >= oldest)

    async def retained(self, record: RunRecord, now: datetime) -> bool:
        await self._read()
        entries = self._entries(record.deployment_id)
        return self._retained(record, entries[0][0] if entries else None, now)

    async def states(self, runs: Iterable[tuple[str, str]]
                     ) -> dict[str, tuple[int, RunRecord]]:
        await self._read()
        return {run_id: state for dep, run_id in runs
                if (state := self._state(run_id)) is not None and state[1].deployment_id == dep}

    async def states_by_id(self, run_ids: Iterable[str]) -> dict[str, tuple[int, RunRecord]]:
        await self._read()
        return {run_id: state for run_id in run_ids if (state := self._state(run_id))}

    async def latest(self, deployment_ids: Iterable[str]) -> dict[str, IndexEntry]:
        await self._read()
        return {dep: entries[-1][2] for dep in deployment_ids
                if (entries := self._entries(dep))}

    async def newest(self, count: int, window: timedelta, per_read: int = 1000
                     ) -> AsyncIterator[list[tuple[str, IndexEntry]]]:
        await self._read()
        every = sorted((seq, stored_at, dep, entry) for dep in list(self._store.index)
                       for seq, stored_at, entry, _ in self._entries(dep))[-count:]
        if not every:
            return
        newest_at = every[-1][1]
        chosen = [(dep, entry) for _, stored_at, dep, entry in every
                  if stored_at >= newest_at - window]
        for start in range(0, len(chosen), max(1, per_read)):
            yield chosen[start:start + per_read]

    async def entries(self, deployment_id: str) -> list[Indexed]:
        await self._read()
        return [Indexed(seq, entry) for seq, _, entry, _ in self._entries(deployment_id)]

    async def enforce(self, deployment_ids: Iterable[str],
                      unfinished: Iterable[RunRecord]) -> int:
        """Drop the events of the deployments' finished Runs whose entry left the history."""
        await self._read()
        keep = {record.run_id for record in unfinished}
        deployments = set(deployment_ids)
        now = self._store.now()
        cut = 0
        for run_id, dep in list(self._store.run_deployments.items()):
            if dep not in deployments or run_id in keep:
                continue
            state = self._state(run_id)
            if state is None or not state[1].finished:
                continue
            entries = self._entries(dep)
            if not self._retained(state[1], entries[0][0] if entries else None, now):
                del self._store.runs[run_id]
                del self._store.run_deployments[run_id]
                cut += 1
        return cut
