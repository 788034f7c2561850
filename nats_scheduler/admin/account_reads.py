"""The account of due times, read from the store: the facts ``core/dueaccount.py`` judges.

One page of a deployment's account costs, whatever the history's length and the number of
Schedules: one read of the Schedule's changes (an ordered consumer on its one subject), the
outage records stored since the page's oldest due time (one batched read; they are one per
outage), the Runs of the page's due times by ID (scheduled Run IDs are derived from the due
time: batched "last message per subject" reads, a thousand per request), the history
index entries in the page's span (for the Runs of other triggers) and the retention in force
(one stream-info request). The admin service answers with it for the console; the command
line and the store fallback read the same way.

All of it is read-only and allowed to the three users of ``nats-server.conf``.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import msgspec

from ..core.dueaccount import Change, Outage, account, due_times_before, refused_change, spans
from ..core.events import RunRecord, decode_schedule_event
from ..core.refusals import Refusal, refusal_note
from ..core.validation import MAX_EXPLAIN_PAGE
from ..jetstream.history import RunHistory
from ..jetstream.history_writes import decode_entry
from ..jetstream.outages import OutageLog, parse_server_time
from ..jetstream.store import Store
from ..jetstream.store_reads import Retention, every_message, index_retention
from ..names import HDR_NUM_PENDING, HDR_SEQUENCE, HDR_TIME_STAMP, Names, scheduled_run_id
from ..seam import Trigger
from .api import AdminError, DueAccount, ErrorCode
from .reader import checked

DEFAULT_WINDOW = timedelta(hours=24)
"""What ``explain`` accounts for without ``--since``: the last day."""

PAGE_MAX = MAX_EXPLAIN_PAGE
"""The most due times one page holds (the service also keeps a page within one message)."""

INDEX_SLACK = timedelta(seconds=60)
"""How far an index entry's storing time may precede its Run's ``created_at`` (the writer's
clock): the entries of a span are read from this much before it."""

_BATCH = 1000


@dataclass(frozen=True)
class Floor:
    """Where an account can start (None: anywhere) and why, and what it cannot see."""

    at: datetime | None
    why: str | None = None
    unseen: str | None = None
    """Said whenever it holds: outages are not recorded in this store."""

    def notes(self, clipped: bool) -> list[str]:
        return [n for n in (self.why if clipped else None, self.unseen) if n]


class AccountReader:
    """Pages of a deployment's account of due times, read over one store connection."""

    def __init__(self, store: Store, *, timeout: float = 5.0) -> None:
        self._store = store
        self._names: Names = store.names
        self._history = RunHistory(store)
        self._outages = OutageLog(store)
        self._timeout = timeout

    # ------------------------------------------------------------------ the facts

    async def changes(self, deployment_id: str) -> list[Change]:
        """Every stored change of the deployment's Schedule, oldest first (usually a few)."""
        subject = self._names.schedule_subject(deployment_id)
        found: list[Change] = []
        for stored in await every_message(self._store.nc, self._names.schedules_stream,
                                          subject, timeout=self._timeout):
            with contextlib.suppress(msgspec.DecodeError, msgspec.ValidationError):
                event = decode_schedule_event(stored.data)
                if event.schedule.deployment_id == deployment_id and stored.stored_at:
                    found.append(Change(stored.stored_at, event.schedule))
        return found

    async def floor(self, deployment_id: str, now: datetime) -> Floor:
        """The earliest instant the store can still account for, with why: the retention
        (by age, and by count once the deployment's history is full) and the instant
        outages began to be recorded; and a note when outages are not recorded at all."""
        floors: list[tuple[datetime, str]] = []
        retention: Retention | None = await index_retention(
            self._store.nc, self._names, timeout=self._timeout)
        if retention is not None and retention.days is not None:
            floors.append((now - timedelta(days=retention.days),
                           f"the history keeps {retention.days:g} days"))
        if retention is not None and retention.runs is not None:
            oldest = await self._oldest_when_full(deployment_id, retention.runs)
            if oldest is not None:
                floors.append((oldest, f"the history keeps the newest {retention.runs} Runs "
                                       f"of this deployment, from {_iso(oldest)} on"))
        recorded = await self._outages.created_at()
        if recorded is not None:
            floors.append((recorded, f"outages are recorded from {_iso(recorded)} on"))
        unseen = None if recorded is not None else (
            "outages are not recorded in this store: due times skipped while no scheduler "
            "process ran show as unexplained")
        if not floors:
            return Floor(None, None, unseen)
        at, why = max(floors, key=lambda f: f[0])
        return Floor(at, why, unseen)

    async def _oldest_when_full(self, deployment_id: str, keep: int) -> datetime | None:
        """The oldest retained entry's time, when the deployment holds ``keep`` entries (the
        server drops older Runs from then on); None while it holds fewer."""
        msgs = await self._store.direct_batch(self._names.index_stream, {
            "next_by_subj": self._names.index_subject(deployment_id), "batch": 1})
        if not msgs:
            return None
        if int((msgs[0].headers or {}).get(HDR_NUM_PENDING, 0)) + 1 < keep:
            return None
        with contextlib.suppress(msgspec.DecodeError, msgspec.ValidationError):
            return decode_entry(msgs[0].data).created_at
        return None

    async def outages(self, since: datetime, *, running: bool) -> list[Outage]:
        """The outages recorded since ``since``, and, unless a replica is known to be running
        (``running``), the one going on now when no replica's key is in the bucket."""
        found = [r.outage() for r in await self._outages.records(since)]
        if running:
            return found
        seen = await self._outages.replicas_seen()
        if any(not peer.left for peer in seen.values()):
            return found  # a replica put its key within the bucket's max age
        newest = max((w.at for w in await self._outages.last_writes()), default=None)
        if newest is not None:
            found.append(Outage(newest, None, "no scheduler process is running now"))
        return found

    async def runs(self, deployment_id: str, dues: list[datetime]) -> dict[datetime, RunRecord]:
        """The scheduled Runs of ``dues``, found by their derived IDs, by due time."""
        ids = {scheduled_run_id(deployment_id, due): due for due in dues}
        states = await self._history.states((deployment_id, run_id) for run_id in ids)
        return {ids[run_id]: record for run_id, (_, record) in states.items()
                if run_id in ids}

    async def other_runs(self, deployment_id: str, lo: datetime, hi: datetime
                         ) -> list[RunRecord]:
        """Runs of other triggers (Run now, Replay) created in ``[lo, hi]``, newest first."""
        subject = self._names.index_subject(deployment_id)
        request: dict[str, object] = {"start_time": _iso(lo - INDEX_SLACK),
                                      "next_by_subj": subject, "batch": _BATCH}
        wanted: list[str] = []
        while True:
            msgs = await self._store.direct_batch(self._names.index_stream, request)
            for msg in msgs:
                with contextlib.suppress(msgspec.DecodeError, msgspec.ValidationError):
                    entry = decode_entry(msg.data)
                    if not entry.run_id.startswith("s") and lo <= entry.created_at <= hi:
                        wanted.append(entry.run_id)
            last = msgs[-1] if msgs else None
            if len(msgs) < _BATCH or last is None or _stored(last) > hi + INDEX_SLACK:
                break
            request = {"seq": int((last.headers or {}).get(HDR_SEQUENCE, 0)) + 1,
                       "next_by_subj": subject, "batch": _BATCH}
        states = await self._history.states((deployment_id, run_id) for run_id in wanted)
        found = [record for _, record in states.values()
                 if record.trigger != Trigger.SCHEDULE and lo <= record.created_at <= hi]
        return sorted(found, key=lambda r: (r.created_at, r.run_id), reverse=True)

    # ------------------------------------------------------------------ a page

    async def page(self, deployment_id: str, *, now: datetime, since: datetime | None = None,
                   until: datetime | None = None, before: datetime | None = None,
                   limit: int = PAGE_MAX, running: bool = False,
                   refusal: Refusal | None = None) -> DueAccount:
        """One page of the account, newest first (``before``: the ``next_before`` of the
        page before). ``running``: the caller is a running replica (no outage now).
        ``refusal``: the deployment's standing refusal, which a replica knows in memory:
        the due times it took away are ``refused``, a note says why, and a deployment it
        left with no stored Schedule has an account all the same."""
        checked(deployment_id, "deployment ID")
        until = _aware(until, "until") or now
        since = _aware(since, "since") or until - DEFAULT_WINDOW
        before = _aware(before, "before")
        if since > until:
            raise AdminError(ErrorCode.INVALID_REQUEST,
                             f"the window starts ({_iso(since)}) after it ends ({_iso(until)})")
        if not 1 <= limit <= PAGE_MAX:
            raise AdminError(ErrorCode.INVALID_REQUEST,
                             f"limit must be between 1 and {PAGE_MAX}, not {limit}")
        # the reads of a page, two rounds of requests sent together
        changes, floor = await asyncio.gather(self.changes(deployment_id),
                                              self.floor(deployment_id, now))
        notes: list[str] = []
        if refusal is not None:
            refused = refused_change(changes, refusal)
            notes.append(refusal_note(refusal, stored=refused is not None
                                      and not refused.unstored))
            changes = changes if refused is None else [*changes, refused]
        elif not changes:
            raise AdminError(ErrorCode.NOT_FOUND, f"deployment {deployment_id!r} has no schedule")
        start = since if floor.at is None else max(since, floor.at)
        calendar = spans(changes)
        dues = due_times_before(calendar, since=start, until=until, before=before,
                                limit=limit + 1)
        shown = [due for due, _ in dues[:limit]]
        lowest = shown[-1] if len(dues) > limit else start
        top = until if before is None else min(until, before)
        runs, outages, others = await asyncio.gather(
            self.runs(deployment_id, shown),
            self.outages(min(shown, default=until), running=running),
            self.other_runs(deployment_id, lowest, top) if top >= start else _nothing())
        judged = account(calendar, runs, outages, since=start, until=until, now=now,
                         dues=dues, limit=limit)
        return DueAccount(deployment_id=deployment_id, since=start, until=until,
                          due_times=judged.due_times, other_runs=others,
                          next_before=judged.next_before,
                          notes=notes + floor.notes(clipped=start > since))


async def _nothing() -> list[RunRecord]:
    return []


def _aware(instant: datetime | None, what: str) -> datetime | None:
    """An instant with its offset; INVALID_REQUEST for one without (ambiguous)."""
    if instant is not None and instant.utcoffset() is None:
        raise AdminError(ErrorCode.INVALID_REQUEST,
                         f"{what} must name its time zone (e.g. 2030-01-01T02:00:00Z)")
    return instant


def _iso(instant: datetime) -> str:
    return instant.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _stored(msg: object) -> datetime:
    headers = getattr(msg, "headers", None) or {}
    return parse_server_time(headers.get(HDR_TIME_STAMP, "")) or datetime.max.replace(
        tzinfo=UTC)


__all__ = ["DEFAULT_WINDOW", "PAGE_MAX", "AccountReader", "Floor"]
