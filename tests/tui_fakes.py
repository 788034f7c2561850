"""A deterministic, in-memory AdminBackend for the console's snapshot and unit tests.

Fixed data around a fixed instant (Saturday 2026-03-28 12:00 UTC, the eve of Europe's
spring-forward) so that every screen has something to show: a held, a disabled, a failing,
a silently stopped and a stuck Schedule, Runs of every trigger, a replay, DST notes.
Actions change the data and push the matching events, like the real admin service, so the
console's live path is exercised; :meth:`FakeBackend.advance_run` plays a provider moving a
Run along. Behaviour against the real service is covered by tests/test_tui_live.py.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import msgspec

from nats_scheduler.admin.api import (
    AdminError,
    BulkResult,
    ClusterStatus,
    DueAccount,
    ErrorCode,
    Health,
    LatenessSummary,
    LeaseView,
    LoadAhead,
    ReplicaMetrics,
    ReplicaView,
    RunList,
    RunView,
    ScheduleDetail,
    ScheduleView,
    StoreHealth,
)
from nats_scheduler.admin.load import LoadCounter
from nats_scheduler.clock import ManualClock
from nats_scheduler.core import calendar
from nats_scheduler.core import events as ev
from nats_scheduler.core.dueaccount import Change, Outage, account, due_times_before, spans
from nats_scheduler.core.events import Hold, RunRecord, ScheduleRecord
from nats_scheduler.seam import RunPayload, RunState, Trigger

NOW = datetime(2026, 3, 28, 12, 0, tzinfo=UTC)
"""The frozen instant of every snapshot."""

REPLICA_A = "sched-a-4121-1f2e3d"
REPLICA_B = "sched-b-3377-9a8b7c"


def _lateness_series(count: int, base: float, spread: float, spikes: dict[int, float]
                     ) -> list[float]:
    """A replica's latest firings' lateness, deterministic: a ripple and a few spikes."""
    return [round(spikes.get(i, base + spread * ((i * 7) % 11) / 10), 4) for i in range(count)]


REPLICA_A_METRICS = ReplicaMetrics(
    runs_created={"schedule": 118, "run_now": 3}, runs_dispatched={"schedule": 117, "run_now": 3},
    dispatch_attempts=122, dispatch_retries=2, schedules={"active": 4, "held": 1, "disabled": 1},
    lateness={"stored": LatenessSummary(count=118, p50=0.004, p95=0.009, p99=0.012, max=0.02),
              "started": LatenessSummary(count=117, p50=0.011, p95=0.03, p99=0.041, max=0.09)},
    recent_lateness={"stored": _lateness_series(117, 0.003, 0.004, {90: 0.02}),
                     "started": _lateness_series(117, 0.008, 0.01, {40: 0.05, 90: 0.09})},
)
"""The younger replica: a quiet day (two retries, nothing failed)."""

REPLICA_B_METRICS = ReplicaMetrics(
    runs_created={"schedule": 512, "replay": 1}, runs_dispatched={"schedule": 506, "replay": 1},
    runs_failed={"schedule": 2}, dispatch_attempts=531, dispatch_retries=14, takeovers=1,
    stale_fire_reads=1, store_errors={"transient": 3},
    schedules={"active": 4, "held": 1, "disabled": 1},
    lateness={"stored": LatenessSummary(count=512, p50=0.005, p95=0.014, p99=0.031, max=1.2),
              "started": LatenessSummary(count=509, p50=0.013, p95=0.05, p99=0.24, max=6.5)},
    recent_lateness={"stored": _lateness_series(120, 0.004, 0.006, {33: 1.2}),
                     "started": _lateness_series(120, 0.01, 0.02, {33: 6.5, 34: 4.1, 80: 0.24})},
    auto_holds=1, holds_ended=2,
)
"""The older replica: it took a Run over once, two Runs failed, the store hiccuped."""


def frozen_clock() -> ManualClock:
    return ManualClock(NOW)


def _at(hours: float) -> datetime:
    """``NOW`` shifted by ``hours`` (negative: in the past)."""
    return NOW + timedelta(hours=hours)


def _schedule(dep: str, name: str, cron: str, tz: str, *, enabled: bool = True,
              hold: Hold | None = None, target: str = "agent/assistant",
              version: int = 3) -> ScheduleRecord:
    return ScheduleRecord(
        deployment_id=dep, name=name, cron=cron, timezone=tz, enabled=enabled,
        payload=RunPayload(target=target, prompt=f"Run the {name} routine and report."),
        version=version, hold=hold, updated_at=_at(-30),
    )


def _run(run_id: str, dep: str, state: RunState, *, created: datetime,
         trigger: Trigger = Trigger.SCHEDULE, attempts: int = 1, error: str | None = None,
         replay_of: str | None = None, by: str | None = None, reason: str | None = None,
         session: bool = True, holder: str | None = None) -> RunRecord:
    done = state in (RunState.DISPATCHED, RunState.FAILED)
    scheduled = trigger == Trigger.SCHEDULE
    # a scheduled Run stored a few ms after its due time, its Session asked for a few more
    # later (how many: from its ID, so the lateness drawn has some texture)
    stored = timedelta(milliseconds=4 + sum(map(ord, run_id)) % 9) if scheduled else timedelta()
    started = stored + timedelta(milliseconds=6 + sum(map(ord, run_id)) % 23)
    return RunRecord(
        run_id=run_id, deployment_id=dep, trigger=trigger,
        due_at=created if scheduled else None,
        created_at=created + stored, updated_at=created + timedelta(seconds=4 if done else 1),
        started_at=created + started if scheduled and session else None,
        state=state, payload=RunPayload(target="agent/assistant", prompt="Run the routine."),
        session_id=f"ses_{run_id[1:9]}" if session else None,
        turn_id=f"turn_{run_id[1:7]}" if state == RunState.DISPATCHED else None,
        attempts=attempts, error=error, replay_of=replay_of, requested_by=by, reason=reason,
        holder=holder,
    )


def seed_schedules() -> list[ScheduleRecord]:
    return [
        _schedule("dep-nightly-report", "nightly-report", "0 2 * * *", "Europe/Berlin",
                  target="agent/reporter"),
        _schedule("dep-hourly-sync", "hourly-sync", "0 * * * *", "UTC", target="agent/sync"),
        _schedule("dep-weekly-digest", "weekly-digest", "30 9 * * MON", "America/New_York",
                  hold=Hold(by="alice", reason="newsletter template is being rewritten",
                            at=_at(-1.75))),
        _schedule("dep-billing-close", "billing-close", "0 0 1 * *", "Asia/Tokyo",
                  enabled=False),
        _schedule("dep-minutely-ping", "minutely-ping", "*/5 * * * *", "UTC"),
        _schedule("dep-export-ledger", "export-ledger", "15 3 * * *", "Europe/London"),
        _schedule("dep-lunch-reminder", "lunch-reminder", "0 12 * * MON-FRI",
                  "Australia/Sydney"),
    ]


FAKE_FIRE_RATE = 1.0
"""Runs a fake replica starts a second: slow, so that a herd of a few dozen shows (the two
replicas start 30 within 15 s)."""


def platform_schedules() -> list[ScheduleRecord]:
    """The rest of a platform, for the load view: 60 tenant reports at 13:00 UTC (a herd),
    a dozen quarter-hourly syncs in Kolkata, hourly exports at :30 in New York."""
    return ([_schedule(f"dep-tenant-{i:02d}", f"tenant-report-{i:02d}", "0 13 * * *", "UTC")
             for i in range(60)]
            + [_schedule(f"dep-sync-{i:02d}", f"quarter-sync-{i:02d}", "*/15 * * * *",
                         "Asia/Kolkata") for i in range(12)]
            + [_schedule(f"dep-export-{i}", f"export-{i}", "30 * * * *", "America/New_York")
               for i in range(5)])


def seed_runs() -> list[RunRecord]:
    failed = RunState.FAILED
    done = RunState.DISPATCHED
    return [
        _run("s7kq2nightly0327", "dep-nightly-report", done, created=_at(-35)),
        _run("s3hx8nightly0326", "dep-nightly-report", done, created=_at(-59)),
        _run("s9ab1nightly0325", "dep-nightly-report", failed, created=_at(-83), attempts=8,
             error="the target agent did not answer (retries exhausted)"),
        _run("mr4d2replay0325x", "dep-nightly-report", done, created=_at(-80),
             trigger=Trigger.REPLAY, replay_of="s9ab1nightly0325", by="alice",
             reason="agent fixed, re-running the report"),
        _run("s1hs1hourly1100x", "dep-hourly-sync", done, created=_at(-1)),
        _run("s2hs2hourly1000x", "dep-hourly-sync", failed, created=_at(-2), attempts=3,
             error="session limit reached"),
        _run("s3hs3hourly0900x", "dep-hourly-sync", failed, created=_at(-3), attempts=1,
             error="permanent: prompt rejected", session=False),
        _run("s4hs4hourly0800x", "dep-hourly-sync", done, created=_at(-4)),
        _run("s5mp5ping1130xxx", "dep-minutely-ping", done, created=_at(-0.5)),
        _run("s6el6export0315x", "dep-export-ledger", RunState.DISPATCHING,
             created=_at(-8.75), holder=REPLICA_B),
        _run("mq7lr7lunchnow01", "dep-lunch-reminder", RunState.PENDING, created=_at(-0.02),
             trigger=Trigger.RUN_NOW, by="bob", reason="testing the new prompt", session=False,
             attempts=0),
    ]


def nightly_history(current: ScheduleRecord) -> tuple[list[Change], list[Outage]]:
    """nightly-report's last week as the store would tell it: disabled by AstraBox over
    03-22, re-enabled and held by an operator over 03-23, an outage across 03-24, Runs from
    then on, a prompt edit (the current record), and 03-28's due time without a Run."""
    day = datetime(2026, 3, 21, tzinfo=UTC)
    first = msgspec.structs.replace(current, version=1, hold=None, updated_at=_at(-30 * 24))
    hold = Hold(by="ana@ops", reason="db migration", at=day + timedelta(days=1, hours=20))
    changes = [
        Change(first.updated_at, first),
        Change(day + timedelta(hours=12), msgspec.structs.replace(first, enabled=False,
                                                                  version=2)),
        Change(day + timedelta(days=1, hours=19, minutes=50),
               msgspec.structs.replace(first, version=3)),
        Change(hold.at, msgspec.structs.replace(first, version=3, hold=hold)),
        Change(day + timedelta(days=2, hours=4, minutes=30),
               msgspec.structs.replace(first, version=3)),
        Change(current.updated_at, current),
    ]
    outage = Outage(day + timedelta(days=3, minutes=40), day + timedelta(days=3, hours=1,
                                                                          minutes=30),
                    "the last replica beat or leave")
    return changes, [outage]


class FakeBackend:
    """The AdminBackend protocol over the fixed data above; ``calls`` records each call."""

    def __init__(self, clock: ManualClock | None = None, *, can_act: bool = True,
                 act_reason: str | None = None, platform: bool = False) -> None:
        self.clock = clock or frozen_clock()
        seeded = seed_schedules() + (platform_schedules() if platform else [])
        self.schedules = {s.deployment_id: s for s in seeded}
        self.runs = {r.run_id: r for r in seed_runs()}
        self.act_answer = (can_act, act_reason)
        self.calls: list[tuple[str, object]] = []
        self.log: list[object] = self._seed_events()
        self._queues: list[asyncio.Queue[object]] = []
        self._ids = itertools.count(1)
        self._last_stamp = NOW
        self.unavailable = False
        self.page_size = 1000
        self.page_gate: asyncio.Event | None = None
        """When set: the list's pages after the first wait for it (a slow load)."""
        self.bulk_permits: asyncio.Semaphore | None = None
        """When set: every bulk page takes one permit first (a bulk action paced by the
        test, page by page)."""

    # ------------------------------------------------------------------ helpers

    def _stamp(self) -> datetime:
        """Now, but strictly increasing: two changes at one frozen instant stay ordered."""
        self._last_stamp = max(self.clock.now(), self._last_stamp + timedelta(microseconds=1))
        return self._last_stamp

    def _check(self, name: str, arg: object = None) -> None:
        self.calls.append((name, arg))
        if self.unavailable:
            raise AdminError(ErrorCode.UNAVAILABLE, "no scheduler process is running")

    def _seed_events(self) -> list[object]:
        events: list[object] = []
        for s in self.schedules.values():
            events.append(ev.ScheduleApplied(at=s.updated_at, actor=REPLICA_A, schedule=s))
        held = self.schedules["dep-weekly-digest"]
        assert held.hold is not None
        events.append(ev.ScheduleHeld(at=held.hold.at, actor="alice", schedule=held,
                                      by="alice", reason=held.hold.reason))
        for run in sorted(self.runs.values(), key=lambda r: r.created_at)[-6:]:
            events.append(ev.RunCreated(at=run.created_at, actor=REPLICA_A, run=run))
            if run.state == RunState.FAILED:
                events.append(ev.RunFailed(at=run.updated_at, actor=REPLICA_A, run=run,
                                           error=run.error or ""))
            elif run.state == RunState.DISPATCHED:
                events.append(ev.RunDispatched(at=run.updated_at, actor=REPLICA_A, run=run,
                                               turn_id=run.turn_id or ""))
        events.sort(key=lambda e: e.at)  # type: ignore[attr-defined]
        return events

    def publish(self, event: object) -> None:
        self.log.append(event)
        for queue in list(self._queues):
            queue.put_nowait(event)

    def break_feed(self, message: str = "the connection to the scheduler broke") -> None:
        """End every open event stream with an ``unavailable`` error."""
        for queue in list(self._queues):
            queue.put_nowait(AdminError(ErrorCode.UNAVAILABLE, message))

    @property
    def feeds(self) -> int:
        """How many event streams are open (tests wait for the console to subscribe)."""
        return len(self._queues)

    def _view(self, s: ScheduleRecord) -> ScheduleView:
        runs = self._runs_of(s.deployment_id)
        since = self.clock.now() - timedelta(hours=24)
        return ScheduleView(
            deployment_id=s.deployment_id, name=s.name, cron=s.cron, timezone=s.timezone,
            enabled=s.enabled, deleted=s.deleted, version=s.version, payload=s.payload,
            hold=s.hold, state=_state(s), next_due=self._upcoming(s, 3),
            last_run_state=runs[0].state if runs else None,
            last_run_at=runs[0].created_at if runs else None,
            failures_24h=sum(1 for r in runs
                             if r.state == RunState.FAILED and r.created_at >= since),
            updated_at=s.updated_at,
        )

    def _upcoming(self, s: ScheduleRecord, count: int) -> list[datetime]:
        """As the service: of a hold with an end, the due times from the end on."""
        if not s.active and s.resumes_at is None:
            return []
        after = self.clock.now()
        if s.resumes_at is not None:
            after = max(after, s.resumes_at - timedelta(microseconds=1))
        return calendar.upcoming(s.cron, s.timezone, after, count)

    def _runs_of(self, dep: str) -> list[RunRecord]:
        runs = [r for r in self.runs.values() if r.deployment_id == dep]
        return sorted(runs, key=lambda r: (r.created_at, r.run_id), reverse=True)

    def _get(self, dep: str) -> ScheduleRecord:
        found = self.schedules.get(dep)
        if found is None or found.deleted:
            raise AdminError(ErrorCode.NOT_FOUND, f"deployment {dep!r} has no schedule")
        return found

    def _matching(self, text: str) -> list[ScheduleRecord]:
        needle = text.casefold()
        return [s for s in self.schedules.values() if not s.deleted and (
            needle in s.deployment_id.casefold() or needle in s.name.casefold())]

    # ------------------------------------------------------------------ reads

    async def list_schedules(self, filter: str | None = None) -> list[ScheduleView]:
        self._check("list_schedules", filter)
        return [self._view(s) for s in self._matching(filter or "")]

    async def schedule_pages(self, filter: str | None = None
                             ) -> AsyncIterator[list[ScheduleView]]:
        """The list in pages of ``page_size`` (by deployment ID), like the service; each
        page after the first waits for ``page_gate`` when one is set."""
        self._check("schedule_pages", filter)
        chosen = sorted(self._matching(filter or ""), key=lambda s: s.deployment_id)
        for start in range(0, max(len(chosen), 1), self.page_size):
            if start and self.page_gate is not None:
                await self.page_gate.wait()
            yield [self._view(s) for s in chosen[start:start + self.page_size]]

    async def get_schedule(self, deployment_id: str) -> ScheduleDetail:
        self._check("get_schedule", deployment_id)
        s = self._get(deployment_id)
        upcoming = self._upcoming(s, 10)
        notes = [calendar.dst_transition_near(s.timezone, t, s.cron) for t in upcoming]
        return ScheduleDetail(schedule=self._view(s), upcoming=upcoming, dst_notes=notes)

    async def list_runs(self, deployment_id: str, *, limit: int = 50,
                        before: str | None = None) -> RunList:
        self._check("list_runs", (deployment_id, limit, before))
        runs = self._runs_of(deployment_id)
        if before is not None:
            ids = [r.run_id for r in runs]
            runs = runs[ids.index(before) + 1:] if before in ids else []
        page = runs[:limit]
        more = len(runs) > limit
        return RunList(runs=[_run_view(r) for r in page],
                       next_before=page[-1].run_id if more and page else None)

    async def explain(self, deployment_id: str, *, since: datetime | None = None,
                      until: datetime | None = None, before: datetime | None = None,
                      limit: int = 500) -> DueAccount:
        """The account of due times from the fixed data (``core/dueaccount.py``)."""
        self._check("explain", (deployment_id, before, limit))
        record = self._get(deployment_id)
        now = self.clock.now()
        until = until or now
        since = since or until - timedelta(hours=24)
        changes, outages = (nightly_history(record) if deployment_id == "dep-nightly-report"
                            else ([Change(record.updated_at, record)], []))
        calendar_spans = spans(changes)
        runs = self._runs_of(deployment_id)
        by_due = {r.due_at: r for r in runs if r.due_at is not None}
        dues = due_times_before(calendar_spans, since=since, until=until, before=before,
                                limit=limit + 1)
        page = account(calendar_spans, by_due, outages, since=since, until=until, now=now,
                       dues=dues, limit=limit)
        top = until if before is None else before
        others = [_run_view(r) for r in runs if r.trigger != Trigger.SCHEDULE
                  and page.lowest <= r.created_at <= top]
        return DueAccount(deployment_id=deployment_id, since=since, until=until,
                          due_times=page.due_times, other_runs=others,
                          next_before=page.next_before)

    async def get_run(self, run_id: str) -> RunView:
        self._check("get_run", run_id)
        if run_id not in self.runs:
            raise AdminError(ErrorCode.NOT_FOUND, f"no run {run_id!r}")
        return _run_view(self.runs[run_id])

    async def cluster_status(self) -> ClusterStatus:
        self._check("cluster_status")
        now = self.clock.now()
        in_flight = [r.run_id for r in self.runs.values()
                     if r.state == RunState.DISPATCHING]
        return ClusterStatus(
            replicas=[
                ReplicaView(identity=REPLICA_A, started_at=_at(-6), now=now + timedelta(
                    milliseconds=200), in_flight=[], schedules_planned=6,
                    metrics=REPLICA_A_METRICS, server_offset=0.003, server_offset_error=0.0005),
                ReplicaView(identity=REPLICA_B, started_at=_at(-30), now=now - timedelta(
                    seconds=2.5), in_flight=in_flight, schedules_planned=6,
                    server_offset=-2.7, server_offset_error=0.0008,
                    metrics=msgspec.structs.replace(REPLICA_B_METRICS,
                                                    runs_in_flight=len(in_flight))),
            ],
            leases=[LeaseView(run_id=r, holder=REPLICA_B, expires_at=_at(-8.7))
                    for r in in_flight],
            in_flight=in_flight,
            store=StoreHealth(reachable=True, server_version="2.15.1", replicas=1,
                              leader="astrabox-demo", retention_days=90.0,
                              retention_runs=10_000),
        )

    async def health(self) -> Health:
        self._check("health")
        since = self.clock.now() - timedelta(hours=24)
        runs = sorted(self.runs.values(), key=lambda r: r.created_at, reverse=True)
        return Health(
            silent_stops=["dep-minutely-ping"],
            stuck_runs=[_run_view(r) for r in runs if r.state == RunState.DISPATCHING],
            failed_runs=[_run_view(r) for r in runs
                         if r.state == RunState.FAILED and r.created_at >= since],
        )

    async def load_ahead(self, hours: int = 24) -> LoadAhead:
        """Counted like the service (admin/load.py), by two slow replicas."""
        self._check("load_ahead", hours)
        live = [s for s in self.schedules.values() if not s.deleted]
        return LoadCounter().count(live, self.clock.now(), hours, replicas=2,
                                   rate=FAKE_FIRE_RATE)

    async def can_act(self) -> tuple[bool, str | None]:
        self._check("can_act")
        return self.act_answer

    async def events(self, *, deployment_id: str | None = None,
                     types: set[str] | None = None,
                     history: int = 100) -> AsyncIterator[object]:
        self._check("events", history)
        queue: asyncio.Queue[object] = asyncio.Queue()
        self._queues.append(queue)
        try:
            for event in self.log[-history:] if history > 0 else []:
                yield event
            while True:
                item = await queue.get()
                if isinstance(item, AdminError):
                    raise item
                yield item
        finally:
            self._queues.remove(queue)

    # ------------------------------------------------------------------ actions

    def _refuse_if_read_only(self) -> None:
        if not self.act_answer[0]:
            raise AdminError(ErrorCode.FORBIDDEN, self.act_answer[1] or "read-only user")

    def _set_hold(self, dep: str, hold: Hold | None, by: str, reason: str) -> bool:
        s = self._get(dep)
        if (s.hold is None) == (hold is None):
            return False
        new = msgspec.structs.replace(s, hold=hold, updated_at=self._stamp())
        self.schedules[dep] = new
        kind = ev.ScheduleHeld if hold else ev.ScheduleReleased
        self.publish(kind(at=new.updated_at, actor=by, schedule=new, by=by, reason=reason,
                          until=hold.until if hold else None))
        return True

    async def hold(self, deployment_id: str, *, by: str, reason: str,
                   until: datetime | None = None) -> ScheduleView:
        self._check("hold", (deployment_id, by, reason) + ((until,) if until else ()))
        self._refuse_if_read_only()
        self._set_hold(deployment_id, Hold(by=by, reason=reason, at=self._stamp(),
                                           until=until), by, reason)
        return self._view(self.schedules[deployment_id])

    async def release(self, deployment_id: str, *, by: str, reason: str) -> ScheduleView:
        self._check("release", (deployment_id, by, reason))
        self._refuse_if_read_only()
        self._set_hold(deployment_id, None, by, reason)
        return self._view(self.schedules[deployment_id])

    async def _bulk(self, name: str, text: str, by: str, reason: str, hold: bool,
                    after: str | None, limit: int | None) -> BulkResult:
        """Like the service: by deployment ID, after ``after``, ``limit`` at a time."""
        self._check(name, (text, by, reason))
        self._refuse_if_read_only()
        if self.bulk_permits is not None:
            await self.bulk_permits.acquire()
        changed, unchanged = [], []
        chosen = sorted((s for s in self._matching(text)
                         if after is None or s.deployment_id > after),
                        key=lambda s: s.deployment_id)
        page = chosen if limit is None else chosen[:limit]
        for s in page:
            new_hold = Hold(by=by, reason=reason, at=self._stamp()) if hold else None
            done = self._set_hold(s.deployment_id, new_hold, by, reason)
            (changed if done else unchanged).append(s.deployment_id)
        more = len(page) < len(chosen)
        return BulkResult(changed=changed, unchanged=unchanged, changed_count=len(changed),
                          unchanged_count=len(unchanged),
                          next_after=page[-1].deployment_id if more else None)

    async def hold_bulk(self, filter: str, *, by: str, reason: str,
                        after: str | None = None, limit: int | None = None) -> BulkResult:
        return await self._bulk("hold_bulk", filter, by, reason, True, after, limit)

    async def release_bulk(self, filter: str, *, by: str, reason: str,
                           after: str | None = None, limit: int | None = None) -> BulkResult:
        return await self._bulk("release_bulk", filter, by, reason, False, after, limit)

    def _enqueue(self, dep: str, trigger: Trigger, by: str, reason: str | None,
                 replay_of: str | None = None) -> RunView:
        s = self._get(dep)
        stamp = self._stamp()
        run = RunRecord(
            run_id=f"mfake{next(self._ids):04d}requested", deployment_id=dep, trigger=trigger,
            due_at=None, created_at=stamp, updated_at=stamp, state=RunState.PENDING,
            payload=self.runs[replay_of].payload if replay_of else s.payload,
            replay_of=replay_of, requested_by=by, reason=reason,
        )
        self.runs[run.run_id] = run
        self.publish(ev.RunCreated(at=stamp, actor=REPLICA_A, run=run))
        return _run_view(run)

    async def run_now(self, deployment_id: str, *, by: str,
                      reason: str | None = None) -> RunView:
        self._check("run_now", (deployment_id, by, reason))
        self._refuse_if_read_only()
        return self._enqueue(deployment_id, Trigger.RUN_NOW, by, reason)

    async def replay(self, run_id: str, *, by: str, reason: str | None = None) -> RunView:
        self._check("replay", (run_id, by, reason))
        self._refuse_if_read_only()
        original = self.runs.get(run_id)
        if original is None:
            raise AdminError(ErrorCode.NOT_FOUND, f"no run {run_id!r}")
        return self._enqueue(original.deployment_id, Trigger.REPLAY, by, reason, run_id)

    # ------------------------------------------------------------------ provider stand-in

    def publish_burst(self, count: int, deployment_id: str = "dep-hourly-sync") -> list[str]:
        """Push ``count`` new Runs' ``run.created`` at once, as a herd reaches the feed (the
        reads do not change: only the feed sees them). Returns their Run IDs, oldest first."""
        template = self._runs_of(deployment_id)[0]
        ids = []
        for i in range(count):
            stamp = self._stamp()
            run = msgspec.structs.replace(
                template, run_id=f"mburst{i:06d}herd", created_at=stamp, updated_at=stamp,
                state=RunState.PENDING, attempts=0, trigger=Trigger.RUN_NOW, due_at=None)
            self.publish(ev.RunCreated(at=stamp, actor=REPLICA_A, run=run))
            ids.append(run.run_id)
        return ids

    def advance_run(self, run_id: str, state: RunState, *, error: str | None = None) -> None:
        """Move a Run on like a provider would, and push the event."""
        run = self.runs[run_id]
        stamp = self._stamp()
        changes: dict[str, object] = {"state": state, "updated_at": stamp}
        if state == RunState.DISPATCHING:
            changes.update(attempts=run.attempts + 1, holder=REPLICA_A)
            kind: type[ev.RunEvent] = ev.RunClaimed
            extra: dict[str, object] = {"holder": REPLICA_A}
        elif state == RunState.DISPATCHED:
            changes.update(session_id=f"ses_{run_id[1:9]}", turn_id="turn_x", holder=None)
            kind, extra = ev.RunDispatched, {"turn_id": "turn_x"}
        else:
            changes.update(error=error or "failed", holder=None)
            kind, extra = ev.RunFailed, {"error": error or "failed"}
        new = msgspec.structs.replace(run, **changes)
        self.runs[run_id] = new
        self.publish(kind(at=stamp, actor=REPLICA_A, run=new, **extra))


def _state(s: ScheduleRecord) -> str:
    if s.deleted:
        return "deleted"
    if s.hold is not None:
        return "held"
    return "enabled" if s.enabled else "disabled"


def _run_view(r: RunRecord) -> RunView:
    return RunView(**{f: getattr(r, f) for f in RunView.__struct_fields__})


# ----------------------------------------------------------------------------- screens as text


def screen_text(app: object) -> str:
    """The current screen as plain text (what the SVG snapshot shows, without styles).

    Same rendering path as ``App.export_screenshot``, exported as text so a snapshot diff
    is readable in a review.
    """
    import io

    from rich.console import Console

    width, height = app.size  # type: ignore[attr-defined]
    console = Console(width=width, height=height, file=io.StringIO(), force_terminal=True,
                      color_system="truecolor", record=True, legacy_windows=False,
                      safe_box=False)
    screen = app.screen  # type: ignore[attr-defined]
    console.print(screen._compositor.render_update(
        full=True, screen_stack=app._background_screens))  # type: ignore[attr-defined]
    return "\n".join(line.rstrip() for line in console.export_text().splitlines())
