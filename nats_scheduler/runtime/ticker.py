"""The ticker: fire every due time of every active Schedule this process lives through.

It files each active Schedule under its next due time (one bucket per instant, a heap of
the instants) and sleeps until the earliest instant or until a Schedule changes, so its cost
is O(1) per due time and O(log n) per instant, never a scan of all Schedules. The buckets
are dicts of structs the garbage collector does not track, so a million planned Schedules
cost its full collections nothing (a heap of a million entries is a list every full
collection walks: docs/benchmarks.md, "A million Schedules, third round").

Rules (docs/contract.md, "The guarantees"; docs/design.md, "Firing"):

- No backfill: a Schedule's first due time is computed from the moment this process starts,
  or the moment the Schedule became active again. Times that passed while no process ran or
  while it was disabled/held are skipped.
- A Schedule held until an instant (``Hold.until``) is planned from that instant: its
  first due time at or after it fires, without waiting for the release to be stored
  (``ScheduleRecord.fires_at``); the release, when it comes, keeps that plan.
- Late wake-ups (an event-loop stall, a suspended VM) still fire every due time passed since
  the previous one: after firing a due time the next one is computed from that due time, not
  from "now", and fired at once if it is already past.
- One replica fires each due time: its owner among the live replicas (``owns``,
  rendezvous hashing in core/ownership.py). The others look again every ``grace`` seconds:
  a Run for it reached them (``exists``): done; they own it now (its owner left the live
  replicas): they fire it; its owner is still live: they leave it to the owner, for at most
  ``patience`` seconds after the due time, then fire it anyway (an owner live but unable to
  write). So a dead owner delays a due time by the time the others take to see it gone plus
  at most one grace, a sick one by the patience; neither loses it. A busy owner (a herd at
  the top of the hour) is not doubled by the others after a few seconds. When they race,
  the store lets one Run win (``fire_due`` is idempotent). Without ``owns`` every due time
  is this process's.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import NamedTuple

import msgspec

from ..clock import Clock
from ..core import calendar
from ..core.events import ScheduleRecord

log = logging.getLogger(__name__)


class DueTime(NamedTuple):
    """One due time of one Schedule: what the ticker hands to the firing."""

    deployment_id: str
    due: datetime


class _Calendar(msgspec.Struct, frozen=True, order=True, gc=False):
    """What a Schedule is planned on: shared by the Schedules planned on the same one."""

    cron: str
    timezone: str


class _Next(msgspec.Struct, frozen=True, gc=False):
    """A Schedule's plan and its next due time.

    The same struct is its entry in ``Ticker._current`` and in the bucket of its due time,
    so a Schedule costs one struct (a million Schedules on a large platform; ``gc=False``:
    nothing here can be in a reference cycle, so the garbage collector need not walk them).
    ``generation`` tells a plan from an earlier plan of the same Schedule (a due time left
    to its owner is dropped when the plan changed meanwhile); ``due`` is None for a plan
    with no due time ahead (in no bucket).
    """

    due: datetime | None
    generation: int
    deployment_id: str
    calendar: _Calendar


class _Fallback(NamedTuple):
    """A due time left to its owner: looked at again at ``look_at`` (every grace)."""

    look_at: datetime
    generation: int
    deployment_id: str
    due: datetime


Fire = Callable[[str, datetime], Awaitable[object]]
FireMany = Callable[[list[DueTime]], Awaitable[object]]
"""Fire several due times at once (pipelined; runtime/firing.py ``Firing.fire_many``)."""
FireObserver = Callable[[Sequence[DueTime]], None]
"""Told of the due times the ticker fires, just before it fires them (tests and benches
count what each replica fired; the provider takes one as ``fire_observer``)."""
Dues = dict[tuple[str, str, datetime], "tuple[datetime | None, _Calendar]"]
"""First due times and the shared calendar, by (cron, time zone, instant after which), for
one planning pass."""
Check = Callable[[str, datetime], bool]
"""(deployment, due time) -> bool: whether this process owns it / whether its Run exists."""

_JUST_BEFORE = timedelta(microseconds=1)
"""``next_due`` is strictly after: planned from just before a hold's end, a due time at the
end itself fires."""

OWNER_GRACE_SECONDS = 3.0
"""How often the replicas that do not own a due time look whether its owner fired it."""
COMPACT_SLACK = 1_024
"""Instants in the heap whose buckets emptied (their Schedules planned again), tolerated
beyond one per bucket before the heap is rebuilt from the buckets: a replica that runs for
months while calendars change keeps it at most twice its instants."""

SHARED_CALENDARS = 20_000
"""At most this many distinct calendars are shared between Schedules' plans."""

OWNER_PATIENCE_SECONDS = 30.0
"""How long after a due time the others leave it to an owner that is still live: long
enough for one replica's share of a 100,000 herd to be created (docs/benchmarks.md), short
enough that an owner live but unable to write delays its due times by half a minute."""


class Ticker:
    """Next due times, each active Schedule filed under its own (see the module docstring)."""

    def __init__(self, clock: Clock, fire: Fire, *, max_concurrent_fires: int = 256,
                 owns: Check | None = None, fire_many: FireMany | None = None,
                 batch: int = 256, max_concurrent_batches: int = 4,
                 exists: Check | None = None, grace: float = OWNER_GRACE_SECONDS,
                 patience: float = OWNER_PATIENCE_SECONDS,
                 observer: FireObserver | None = None) -> None:
        self._clock = clock
        self._fire = fire
        self._owns = owns
        self._fire_many = fire_many
        self._batch = batch
        self._batches = asyncio.Semaphore(max_concurrent_batches)
        self._exists = exists
        self._grace = timedelta(seconds=grace)
        self._patience = timedelta(seconds=max(grace, patience))
        self._observer = observer
        self._fallbacks: list[_Fallback] = []
        """Due times left to an owner, a heap by when to look again."""
        self.left_to_owner = 0
        """Due times this process left to another replica that fired them in time."""
        self.kept_for_owner = 0
        """Looks at which a due time's owner was live and still had time: left to it."""

        self._instants: list[datetime] = []
        """A heap of the instants that have a bucket (an instant whose bucket emptied stays
        until it comes up or the heap is rebuilt; one may be in it twice: the later finds
        no bucket)."""
        self._buckets: dict[datetime, dict[str, _Next]] = {}
        """The Schedules due at each instant, in the order they were planned: a Schedule
        planned again leaves its old bucket, so no entry is ever stale."""
        self._current: dict[str, _Next] = {}
        """Each planned Schedule's live plan (also in the bucket of its due time, if any)."""
        self._calendars: dict[_Calendar, _Calendar] = {}
        self._recent: dict[tuple[str, str], tuple[datetime, datetime | None]] = {}
        """Each calendar's last computed first due time and the instant it was computed
        after: it is also the first due time after any later instant before it (a first load
        of a million Schedules planned each as it arrived, one calendar computation each)."""
        self._resumes: dict[str, datetime] = {}
        """The end of its hold, for each Schedule planned from one (held until an instant):
        a few, kept apart so that the plans of a million others stay shared."""
        self._generation = 0
        self._wake = asyncio.Event()
        self._fires: set[asyncio.Task[None]] = set()
        self._limit = asyncio.Semaphore(max_concurrent_fires)
        self._running = False
        self.fired = 0

    def update(self, record: ScheduleRecord, after: datetime | None = None, *,
               dues: Dues | None = None) -> None:
        """Plan ``record`` again after a change (from the Schedule table's listener).

        ``after``: plan its first due time after this instant, not now (a replica plans
        what it loaded from the instant it started). ``dues``: first due times already
        computed, by calendar and instant, shared by the calls of one pass (see
        :meth:`plan_loaded`)."""
        known = self._current.get(record.deployment_id)
        resumes = record.resumes_at
        if not record.active and resumes is None:
            if known is not None:
                del self._current[record.deployment_id]
                self._unfile(known)
            self._resumes.pop(record.deployment_id, None)
            return
        start = after or self._clock.now()
        if (known is not None and known.calendar.cron == record.cron
                and known.calendar.timezone == record.timezone):
            planned = self._resumes.get(record.deployment_id)
            if planned == resumes:
                return  # same calendar: keep the planned due time
            if resumes is None and planned is not None and planned <= start:
                # the hold lifted at its end (its release stored now): planned from it already
                del self._resumes[record.deployment_id]
                return
        if resumes is not None:  # a due time at or after the hold's end fires
            start = max(start, resumes - _JUST_BEFORE)
        self._plan(record.deployment_id, record.cron, record.timezone, start, known, dues,
                   resumes)

    def plan_loaded(self, records: Iterable[ScheduleRecord], began: datetime,
                    dues: Dues | None = None) -> None:
        """Plan Schedules loaded at start, each from ``began`` or its last change if later:
        as :meth:`update` each, with one calendar computation per calendar and instant (a
        million loaded Schedules share a few thousand), not one per Schedule. ``dues``:
        shared by the calls that plan one load in parts."""
        dues = {} if dues is None else dues
        for record in records:
            self.update(record, max(began, record.updated_at), dues=dues)

    def _plan(self, deployment_id: str, cron: str, timezone: str, after: datetime,
              known: _Next | None, dues: Dues | None = None,
              resumes: datetime | None = None) -> None:
        """Plan a Schedule from ``after`` in place of ``known``, its live plan (None: none;
        looked up once, by :meth:`update`)."""
        key = (cron, timezone, after)
        found = None if dues is None else dues.get(key)
        if found is None:
            try:
                found = (self._next_due(cron, timezone, after), self._shared(cron, timezone))
            except ValueError:
                log.warning("schedule %s has an invalid calendar; not firing it",
                            deployment_id)
                if known is not None:
                    del self._current[deployment_id]
                    self._unfile(known)
                self._resumes.pop(deployment_id, None)
                return
            if dues is not None:
                dues[key] = found
        if resumes is None:
            self._resumes.pop(deployment_id, None)
        else:
            self._resumes[deployment_id] = resumes
        due, plan = found
        self._generation += 1
        entry = _Next(due, self._generation, deployment_id, plan)
        if known is not None:
            self._unfile(known)
        self._current[deployment_id] = entry
        self._file(entry)
        self._wake.set()

    def _file(self, entry: _Next) -> None:
        """File ``entry`` under its due time (none: nowhere)."""
        due = entry.due
        if due is None:
            return
        bucket = self._buckets.get(due)
        if bucket is None:
            bucket = self._buckets[due] = {}
            heapq.heappush(self._instants, due)
            if len(self._instants) > 2 * len(self._buckets) + COMPACT_SLACK:
                self._instants = list(self._buckets)  # emptied ones, however many changes
                heapq.heapify(self._instants)
        bucket[entry.deployment_id] = entry

    def _unfile(self, entry: _Next) -> None:
        """Take ``entry`` out of the bucket of its due time (when it is there)."""
        if entry.due is None:
            return
        bucket = self._buckets.get(entry.due)
        if bucket is not None and bucket.get(entry.deployment_id) is entry:
            del bucket[entry.deployment_id]
            if not bucket:
                del self._buckets[entry.due]  # its instant is dropped when it comes up

    def _next_due(self, cron: str, timezone: str, after: datetime) -> datetime | None:
        """``calendar.next_due``, remembered per calendar: the first due time after ``a``
        is the first after every instant from ``a`` up to it (or None after ``a``: none
        after any later instant either)."""
        key = (cron, timezone)
        recent = self._recent.get(key)
        if recent is not None:
            computed_after, due = recent
            if computed_after <= after and (due is None or after < due):
                return due
        due = calendar.next_due(cron, timezone, after)
        if recent is not None or len(self._recent) < SHARED_CALENDARS:
            self._recent[key] = (after, due)
        return due

    def _shared(self, cron: str, timezone: str) -> _Calendar:
        made = _Calendar(cron, timezone)
        found = self._calendars.get(made)
        if found is None:
            if len(self._calendars) < SHARED_CALENDARS:
                self._calendars[made] = made
            return made
        return found

    def next_due(self, deployment_id: str) -> datetime | None:
        """The planned next due time of one Schedule (for status views)."""
        known = self._current.get(deployment_id)
        return None if known is None else known.due

    @property
    def planned(self) -> int:
        return len(self._current)

    @property
    def filed(self) -> int:
        """Schedules filed under a due time: one each at most (no stale entries). Counted
        over the buckets (one per distinct instant: thousands for a million Schedules)."""
        return sum(len(bucket) for bucket in self._buckets.values())

    async def run(self) -> None:
        """Fire due times until cancelled."""
        self._running = True
        try:
            while True:
                await self._wait_for_next()
                self._fire_all_due()
        finally:
            self._running = False

    def firing_within(self, seconds: float) -> bool:
        """Whether due times are fired now or one comes within ``seconds`` (admission.py)."""
        instant, soon = self._next_instant(), self._clock.now() + timedelta(seconds=seconds)
        return bool(self._fires) or (instant is not None and instant <= soon)

    def _next_instant(self) -> datetime | None:
        firsts = ([self._instants[0]] if self._instants else []) + (
            [self._fallbacks[0].look_at] if self._fallbacks else [])
        return min(firsts) if firsts else None

    async def _wait_for_next(self) -> None:
        self._drop_stale()
        self._wake.clear()
        instant = self._next_instant()
        if instant is not None and instant <= self._clock.now():
            return
        waiters = [asyncio.create_task(self._wake.wait())]
        if instant is not None:
            waiters.append(asyncio.create_task(self._clock.sleep_until(instant)))
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()

    def _drop_stale(self) -> None:
        """Drop the first instants whose buckets emptied (their Schedules planned again)."""
        instants, buckets = self._instants, self._buckets
        while instants and not buckets.get(instants[0]):
            buckets.pop(heapq.heappop(instants), None)

    def _fire_all_due(self) -> None:
        now = self._clock.now()
        due_now = self._owned_due(now) + self._fallbacks_due(now)
        if due_now and self._observer is not None:
            self._observer(due_now)
        if self._fire_many is not None and len(due_now) > 1:
            for start in range(0, len(due_now), self._batch):
                self._spawn_batch(due_now[start:start + self._batch])
        else:
            for due_time in due_now:
                self._spawn(*due_time)

    def _owned_due(self, now: datetime) -> list[DueTime]:
        """The planned due times passed by ``now`` that this process owns; each Schedule's
        next one planned from the due time (late wake-ups fire every one), the others'
        left to their owners for the grace."""
        due_now: list[DueTime] = []
        instants = self._instants
        while instants and instants[0] <= now:
            due = heapq.heappop(instants)
            bucket = self._buckets.pop(due, None)
            if not bucket:
                continue  # emptied: its Schedules were planned again or stopped
            for entry in bucket.values():  # in the order they were planned
                if self._owns is None or self._owns(entry.deployment_id, due):
                    due_now.append(DueTime(entry.deployment_id, due))
                else:
                    heapq.heappush(self._fallbacks, _Fallback(
                        due + self._grace, entry.generation, entry.deployment_id, due))
                plan = entry.calendar
                following = msgspec.structs.replace(
                    entry, due=self._next_due(plan.cron, plan.timezone, due))
                self._current[entry.deployment_id] = following
                self._file(following)  # strictly later: another bucket (past ones next)
        return due_now

    def _fallbacks_due(self, now: datetime) -> list[DueTime]:
        """Due times left to an owner that are now this process's to fire: no Run reached
        us, and the owner left the live replicas or ran out of patience."""
        due_now: list[DueTime] = []
        waiting: list[_Fallback] = []
        while self._fallbacks and self._fallbacks[0].look_at <= now:
            left = heapq.heappop(self._fallbacks)
            known = self._current.get(left.deployment_id)
            if known is None or known.generation != left.generation:
                continue  # disabled or changed meanwhile: as for any planned due time
            if self._exists is not None and self._exists(left.deployment_id, left.due):
                self.left_to_owner += 1
                continue
            if self._owner_keeps_it(left, now):
                waiting.append(left._replace(look_at=now + self._grace))
                self.kept_for_owner += 1
                continue
            due_now.append(DueTime(left.deployment_id, left.due))
        for left in waiting:
            heapq.heappush(self._fallbacks, left)
        return due_now

    def _owner_keeps_it(self, left: _Fallback, now: datetime) -> bool:
        """Whether a live owner other than this process still has time to fire ``left``."""
        owns = self._owns
        return (owns is not None and not owns(left.deployment_id, left.due)
                and now - left.due < self._patience)

    @property
    def left_waiting(self) -> int:
        """Due times (of active Schedules or not) this process is leaving to their owners."""
        return len(self._fallbacks)

    def _spawn_batch(self, due_times: list[DueTime]) -> None:
        task = asyncio.create_task(self._fire_batch(due_times))
        self._fires.add(task)
        task.add_done_callback(self._fires.discard)

    async def _fire_batch(self, due_times: list[DueTime]) -> None:
        assert self._fire_many is not None
        async with self._batches:
            try:
                await self._fire_many(due_times)
                self.fired += len(due_times)
            except Exception:
                log.exception("firing %d due times failed", len(due_times))

    def _spawn(self, deployment_id: str, due: datetime) -> None:
        task = asyncio.create_task(self._fire_one(deployment_id, due))
        self._fires.add(task)
        task.add_done_callback(self._fires.discard)

    async def _fire_one(self, deployment_id: str, due: datetime) -> None:
        async with self._limit:
            try:
                await self._fire(deployment_id, due)
                self.fired += 1
            except Exception:
                log.exception("firing %s at %s failed", deployment_id, due.isoformat())

    async def wait_fires(self, timeout: float) -> None:
        """Wait for firings in progress (used at stop)."""
        if self._fires:
            await asyncio.wait(list(self._fires), timeout=timeout)
