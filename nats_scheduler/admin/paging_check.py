"""The history's own invariant: paging lists every retained Run of a deployment exactly once.

``list_runs`` promises a deployment's Runs newest first; a reader pages with ``before``
cursors. That promise is about the whole walk, not one page (a history whose every page
looked right once lost three quarters of its Runs read page after page). This check walks
a deployment's history the way a client does (the store reader's ``list_runs``, the code
every replica pages with) and compares the walk with what the deployment's index holds,
read whole and independently of the pages: each Run with a retained entry is listed, once,
newest first by ``(created_at, run_id)``, every page full but the last.

A production store has many deployments, so ``nats-scheduler check`` walks a sample
(:class:`PagingSample`: reservoir sampling over the Run events it streams, so a busy
deployment is likelier to be walked, seeded so a check repeats). The cost is per sampled
deployment: its index read whole (at most ``retention_runs`` entries, a thousand per read),
its Runs' states (a thousand per read) and the walk (a page per ``PAGE_SIZE`` Runs); memory
is one deployment's Run IDs and keys at a time.

The store may be live: Runs made during the walk are newer than its first page (a Run's
key is its index entry's, written in order) and are not expected; Runs that retention drops
during the walk may be listed or not. A Run whose state is past the retention age, or that
was announced but never stored, is not expected either.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable
from datetime import datetime, timedelta
from itertools import pairwise

from ..core.events import RunRecord
from .invariant_report import Violation
from .reader import StoreReader, guarded

PAGING_SAMPLE = 10
"""Deployments ``nats-scheduler check`` walks by default."""

PAGE_SIZE = 100
"""Runs per page of the check's walk."""

SHOWN = 5
"""Run IDs a violation names at most (the count says how many more)."""

MARGIN = timedelta(seconds=5)
"""An empty walk expects the Runs made at least this long before it began (writers stamp
Runs with the store's clock as they estimate it: a moment off)."""


class PagingSample:
    """A seeded reservoir of deployment IDs, fed one per Run event streamed."""

    def __init__(self, size: int = PAGING_SAMPLE, seed: int = 0) -> None:
        self.size = size
        self._rng = random.Random(seed)
        self._seen = 0
        self._chosen: list[str] = []

    def note(self, deployment_id: str) -> None:
        if self.size <= 0:
            return
        self._seen += 1
        if len(self._chosen) < self.size:
            if deployment_id not in self._chosen:
                self._chosen.append(deployment_id)
            return
        slot = self._rng.randrange(self._seen)
        if slot < self.size and deployment_id not in self._chosen:
            self._chosen[slot] = deployment_id

    @property
    def deployments(self) -> list[str]:
        return sorted(self._chosen)


def _key(run: RunRecord) -> tuple[datetime, str]:
    return (run.created_at, run.run_id)


def _ids(runs: Iterable[RunRecord]) -> str:
    ids = sorted(r.run_id for r in runs)
    more = f" and {len(ids) - SHOWN} more" if len(ids) > SHOWN else ""
    return ", ".join(ids[:SHOWN]) + more


async def check_paging(reader: StoreReader, deployments: Iterable[str], *,
                       page_size: int = PAGE_SIZE) -> list[Violation]:
    """Walk each deployment's history and judge it (module docstring)."""
    violations: list[Violation] = []
    for deployment_id in deployments:
        violations += await check_deployment(reader, deployment_id, page_size=page_size)
    return violations


async def check_deployment(reader: StoreReader, deployment_id: str, *,
                           page_size: int = PAGE_SIZE) -> list[Violation]:
    """The paging violations of one deployment's history."""
    began = reader.clock.now()
    pages: list[list[RunRecord]] = []
    before: str | None = None
    while True:
        page = await reader.list_runs(deployment_id, limit=page_size, before=before)
        pages.append(list(page.runs))
        if not page.next_before:
            break
        before = page.next_before
    found: list[Violation] = []

    def broken(detail: str) -> None:
        found.append(Violation("paging", deployment_id, detail))

    listed = [run for page in pages for run in page]
    sizes = [len(page) for page in pages]
    if any(size < page_size for size in sizes[:-1]):
        broken(f"a page before the last is short (page sizes {sizes})")
    counts = Counter(run.run_id for run in listed)
    twice = [run for run in listed if counts[run.run_id] > 1]
    if twice:
        broken(f"listed more than once: {_ids({r.run_id: r for r in twice}.values())}")
    keys = [_key(run) for run in listed]
    if any(a <= b for a, b in pairwise(keys)):
        broken("listed out of order (not newest first by created_at, then run_id)")
    horizon = keys[0] if keys else (began - MARGIN, "")
    expected = await retained_runs(reader, deployment_id, began)
    missing = [run for run in expected if _key(run) <= horizon and run.run_id not in counts]
    if missing:
        broken(f"{len(missing)} retained runs never listed when paging: {_ids(missing)}")
    return found


async def retained_runs(reader: StoreReader, deployment_id: str, now: datetime
                        ) -> list[RunRecord]:
    """The deployment's Runs whose index entry is retained, read whole: every entry of its
    index subject, then each Run's current state (unfinished ones, and finished ones within
    the age limit)."""
    history, _ = reader.reads()
    entries = await guarded("the run history", lambda: history.entries(deployment_id))
    if not entries:
        return []
    oldest = entries[0].seq
    states = await guarded("runs", lambda: history.states(
        (deployment_id, stored.entry.run_id) for stored in entries))
    age = history.retention_age
    return [record for _, record in states.values()
            if record.deployment_id == deployment_id
            and (record.index_seq is None or record.index_seq >= oldest)
            and (not record.finished or record.created_at >= now - age)]
