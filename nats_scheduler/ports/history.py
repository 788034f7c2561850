"""The Run history: where each Run is listed, newest first, and how long it is kept.

Every Run has one entry in its deployment's history, written before the Run is stored
(announced, ``ports/runs.py``), in the Runs' own order: an entry written later has a later
key ``(created_at, run_id)``, and the key IS its Run's (the Run's ``created_at`` is its
entry's). That is what lets :meth:`RunHistory.page` list every Run exactly once to a
reader paging with ``before`` cursors, whatever the writers' clocks, pauses or retries
(docs/architecture.md, "History and retention"). Entries of releases before 0.2 are not
in order, and pages read them with a tolerance.

The history is bounded by a retention (``retention_days``, ``retention_runs``): a finished
Run is retained while it is younger than the age limit and its entry is still kept;
unfinished Runs always are. No process holds the history in memory.

Implementations: ``jetstream/history.py`` (an index stream, one subject per deployment) and
``memory/history.py``; ``tests/test_ports_contract.py`` holds both to this contract.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from datetime import datetime, timedelta
from typing import NamedTuple, Protocol

import msgspec

from ..core.events import RunRecord


class IndexEntry(msgspec.Struct, frozen=True):
    """One Run in its deployment's history (JSON on ``P.runidx.<deployment>``)."""

    run_id: str
    created_at: datetime
    ordered: bool = False
    """Written after the deployment's last entry by compare-and-set with a later
    ``created_at``, which is its Run's own (release 0.2 on): from such an entry back, the
    history is in the Runs' order. Entries of older releases lack it."""

    @property
    def key(self) -> tuple[datetime, str]:
        """The history's order: ``created_at``, then ``run_id``."""
        return (self.created_at, self.run_id)


class IndexPosition(NamedTuple):
    """Where a Run stands in its deployment's history."""

    seq: int
    """The position of the Run's entry (recorded on the Run as ``index_seq``)."""
    created_at: datetime
    """The entry's ``created_at``: the Run's own, the key it is listed by."""


class Indexed(NamedTuple):
    """An entry with its position."""

    seq: int
    entry: IndexEntry


class Page(NamedTuple):
    """A page of the history as the store holds it."""

    runs: list[RunRecord]
    """Newest first by ``(created_at, run_id)``."""
    cursor: RunRecord | None
    """The ``before`` Run, as read (or as the caller knew it)."""
    oldest_seq: int | None
    """The position of the deployment's oldest retained entry (None: none is): a finished
    Run whose entry lies below it has left the history."""


class RunHistory(Protocol):
    """The history of every deployment (the module docstring is the contract)."""

    retention_age: timedelta
    """The age limit of finished Runs."""

    async def announce(self, record: RunRecord) -> IndexPosition:
        """Write the Run's entry after its deployment's last one, in the history's order;
        its position and the key the Run must take (``record.created_at`` is the earliest
        it may be). Idempotent: a Run announced before keeps its entry and key."""
        ...

    async def announce_many(self, records: Sequence[RunRecord]
                            ) -> list[IndexPosition | Exception]:
        """:meth:`announce` for many Runs; a result per Run, in order."""
        ...

    async def page(self, deployment_id: str, limit: int, before: str | None,
                   known_cursor: RunRecord | None, now: datetime) -> Page:
        """Up to ``limit`` retained Runs, newest first, older than the Run ``before``.
        Paged to the end with each page's last Run as the next ``before``, every retained
        Run is listed exactly once. ``known_cursor``: this process's own state of ``before``,
        when it holds one. KeyError when ``before`` is not a Run of the deployment; a cursor
        that left the history (retention drops the oldest first) gives an empty page."""
        ...

    async def retained(self, record: RunRecord, now: datetime) -> bool:
        """Whether ``record`` is still part of the history (unfinished Runs always are)."""
        ...

    async def states(self, runs: Iterable[tuple[str, str]]
                     ) -> dict[str, tuple[int, RunRecord]]:
        """The current ``(position, state)`` of each ``(deployment_id, run_id)``, by Run
        ID; Runs that do not exist (or no longer do) left out."""
        ...

    async def states_by_id(self, run_ids: Iterable[str]) -> dict[str, tuple[int, RunRecord]]:
        """:meth:`states` for Runs whose deployment is not known."""
        ...

    async def latest(self, deployment_ids: Iterable[str]) -> dict[str, IndexEntry]:
        """The newest retained entry of each deployment that has one."""
        ...

    def newest(self, count: int, window: timedelta, per_read: int = 1000
               ) -> AsyncIterator[list[tuple[str, IndexEntry]]]:
        """The newest ``count`` entries of every deployment together, stored within
        ``window`` of the newest one, oldest first, in chunks of at most ``per_read``:
        ``(deployment_id, entry)``. Bounded by ``count`` whatever the history's length."""
        ...

    async def entries(self, deployment_id: str) -> list[Indexed]:
        """Every retained entry of the deployment, oldest first (the checker's)."""
        ...

    async def enforce(self, deployment_ids: Iterable[str],
                      unfinished: Iterable[RunRecord]) -> int:
        """Drop the events of the deployments' finished Runs that left the history (never
        an unfinished Run's); how many Runs were dropped. Idempotent."""
        ...
