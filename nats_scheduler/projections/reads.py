"""Reading Runs: one Run, a page of the history, and loading the bounded ledger.

The history lives on the server (:mod:`nats_scheduler.jetstream.history`); the ledger
(:mod:`nats_scheduler.projections.ledger`) holds what this process touched lately. Reads
combine the two so that a read after a write on the same process sees the write, even when
the history's answer came from a stream follower a moment behind.

Beside the ledger, below both of its readers: the runtime's ``get_run`` and ``list_runs``
(``runtime/wiring.py``) and the admin store reader (``admin/reader.py``), which answer by
the same code whether or not a scheduler process runs.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from datetime import datetime, timedelta

from ..clock import Clock
from ..core import validation
from ..core.events import RunRecord
from ..ports.history import RunHistory
from ..ports.runs import RunJournal
from .ledger import FAILURE_MEMORY, Ledger


class RunReads:
    """``get_run`` and ``list_runs`` over the server's history and the local ledger."""

    def __init__(self, history: RunHistory, runs: RunJournal, ledger: Ledger,
                 clock: Clock) -> None:
        self._history = history
        self._runs = runs
        self._ledger = ledger
        self._clock = clock
        self._fresh = FreshRuns(clock)
        ledger.subscribe(self._fresh.note)

    async def find(self, run_id: str) -> RunRecord | None:
        """A retained Run by ID (any deployment), or None."""
        record = self._ledger.get(run_id)
        if record is None and validation.usable_id(run_id):
            found = await self._runs.find(run_id)
            record = found[1] if found else None
        if record is None or not await self._history.retained(record, self._clock.now()):
            return None
        return record

    async def page(
        self, deployment_id: str, limit: int, before: str | None = None
    ) -> list[RunRecord]:
        """Newest first by ``created_at`` (ties: ``run_id`` descending).

        Raises KeyError when ``before`` is not a retained Run of this deployment.
        """
        now = self._clock.now()
        cursor = self._ledger.get(before) if before is not None else None
        history = await self._history.page(deployment_id, limit, before, cursor, now)
        age = self._history.retention_age
        # The server drops aged entries a little after they age: judge the age here too.
        page = [r for r in history.runs if not r.finished or r.created_at >= now - age]
        # What this process holds joins only while retained: a Run made a moment ago that
        # newer Runs already pushed out of the history stays out (unfinished ones stay in).
        known = [r for r in self._known(deployment_id, page, now)
                 if not r.finished or history.oldest_seq is None or r.index_seq is None
                 or r.index_seq >= history.oldest_seq]
        return merge(page, known, limit, history.cursor, now, min(FRESH, age))

    def _known(self, deployment_id: str, page: list[RunRecord], now: datetime
               ) -> list[RunRecord]:
        """What this process holds that may join the page (see :func:`merge`): its state of
        the page's Runs, the deployment's unfinished Runs and the ones created lately.
        Looked up by ID, never by scanning every Run held."""
        ledger = self._ledger
        ids = {r.run_id for r in page}
        ids.update(self._fresh.of(deployment_id, now))
        known = [r for run_id in ids if (r := ledger.get(run_id)) is not None]
        known.extend(r for r in ledger.unfinished()
                     if r.deployment_id == deployment_id and r.run_id not in ids)
        return known


class FreshRuns:
    """The Runs created in the last :data:`FRESH`, by deployment, as the ledger saw them.

    A page joins such a Run when the history lacks it (read from a stream follower a moment
    behind). Kept apart so a page looks up a few IDs instead of scanning every Run the
    ledger holds; bounded by the Runs created in :data:`FRESH`.
    """

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._order: deque[tuple[datetime, str, str]] = deque()
        self._by_deployment: dict[str, dict[str, datetime]] = {}

    def note(self, record: RunRecord) -> None:
        """A ledger listener: remember ``record`` while it is fresh."""
        now = self._clock.now()
        if record.created_at < now - FRESH:
            return
        runs = self._by_deployment.setdefault(record.deployment_id, {})
        if record.run_id not in runs:
            runs[record.run_id] = record.created_at
            self._order.append((record.created_at, record.deployment_id, record.run_id))
        self._expire(now)

    def of(self, deployment_id: str, now: datetime) -> list[str]:
        """The IDs of the deployment's fresh Runs."""
        self._expire(now)
        return list(self._by_deployment.get(deployment_id, ()))

    def _expire(self, now: datetime) -> None:
        cutoff = now - FRESH
        order = self._order
        while order and order[0][0] < cutoff:
            _, deployment_id, run_id = order.popleft()
            runs = self._by_deployment.get(deployment_id)
            if runs is not None:
                runs.pop(run_id, None)
                if not runs:
                    del self._by_deployment[deployment_id]


def _key(record: RunRecord) -> tuple[datetime, str]:
    return (record.created_at, record.run_id)


FRESH = timedelta(seconds=5)
"""How recent a Run this process knows must be to join a page the history lacks it from:
long enough for a stream follower to catch up, far shorter than any retention."""


def merge(
    page: list[RunRecord], known: Iterable[RunRecord], limit: int, cursor: RunRecord | None,
    now: datetime, fresh_for: timedelta = FRESH,
) -> list[RunRecord]:
    """The page with what this process knows: newer states win, its own new Runs appear.

    A known Run joins the page when the page has it (its newer state wins), when it is
    unfinished (never dropped, even past retention), or when it was created in the last
    ``fresh_for`` and is newer than everything the page has (written a moment ago, read from a
    lagging follower). Only within the page's range; the result is cut to ``limit``.
    """
    by_id = {r.run_id: r for r in page}
    newest = _key(page[0]) if page else None
    for record in known:
        if cursor is not None and _key(record) >= _key(cursor):
            continue
        if page and len(page) == limit and _key(record) < _key(page[-1]):
            continue  # belongs to a later page
        current = by_id.get(record.run_id)
        fresh = record.created_at >= now - fresh_for and (newest is None or _key(record) > newest)
        joins = current is not None or not record.finished or fresh
        if joins and (current is None or record.updated_at >= current.updated_at):
            by_id[record.run_id] = record
    return sorted(by_id.values(), key=_key, reverse=True)[:limit]


async def load_ledger(
    ledger: Ledger, history: RunHistory, open_runs: Iterable[str], deployments: Iterable[str],
) -> list[str]:
    """Seed ``ledger`` with every open Run and each deployment's newest Run.

    Returns the open Run IDs that have no Run (announced, never created). Cost: a few
    batched reads, independent of the history's length.
    """
    wanted = list(open_runs)
    states = await history.states_by_id(wanted)
    for seq, record in states.values():
        ledger.apply_history(seq, record)
    await load_newest(ledger, history, deployments)
    return [run_id for run_id in wanted if run_id not in states]


async def load_newest(ledger: Ledger, history: RunHistory, deployments: Iterable[str],
                      chunk: int = 1_000) -> int:
    """Seed ``ledger`` with each deployment's newest Run (for the views' "last Run"), a
    chunk of deployments at a time; returns how many were applied."""
    ids = list(deployments)
    applied = 0
    for start in range(0, len(ids), chunk):
        latest = await history.latest(ids[start:start + chunk])
        newest = await history.states([(dep, e.run_id) for dep, e in latest.items()])
        for seq, record in newest.values():
            applied += ledger.apply_history(seq, record)
    return applied


WARM_UP_RUNS = 50_000
"""How many of the newest Runs a start loads in the background for the operator views
(failure counts, last scheduled Run): bounded whatever the history's length."""


WARM_UP_CHUNK = 100
"""Runs one warm-up read asks for. The answers to a read arrive one after the other on the
connection, so a page asked for meanwhile waits behind what is left of one chunk: 100 Runs
is a few milliseconds on a small machine (1,000 was 40 ms, a cold page 26-136 ms)."""


async def load_recent(ledger: Ledger, history: RunHistory, now: datetime) -> int:
    """Apply the newest Runs of the last day (at most ``WARM_UP_RUNS``); returns how many.

    Run in the background after start, one small batch at a time (:data:`WARM_UP_CHUNK`),
    so neither memory nor start time depend on the history, nor do the reads served
    meanwhile wait long behind it.
    """
    applied = 0
    async for chunk in history.newest(WARM_UP_RUNS, FAILURE_MEMORY + timedelta(hours=1),
                                      WARM_UP_CHUNK):
        states = await history.states([(dep, entry.run_id) for dep, entry in chunk])
        for seq, record in states.values():
            applied += ledger.apply_history(seq, record)
    return applied
