"""One seed: a cluster's hours of Schedules, faults and AstraBox's calls, then the verdict.

Everything that varies is drawn from one ``random.Random(seed)``: the Schedules (calendars and
zones), the replicas' clock skews, every store operation's latency, every feed's delay, each
lost answer, each handler call's outcome and the plan of what happens when (AstraBox editing,
disabling, deleting Schedules, asking for Run nows and Replays; operators holding and
releasing; replicas crashing, restarting, pausing; the store going down; clocks stepping).
The event loop runs on virtual time (:mod:`.loop`), so the same seed gives the same run, event
for event (``--trace`` prints them).

At the end the replicas stop, what they held finishes, and the invariant checker (the one
``nats-scheduler check`` runs) judges the store's events against the handler's record of
calls and the windows in which replicas were alive and the store answering.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from datetime import timedelta

from ..admin.invariant_inputs import History, Options, StoredEvent, Window
from ..admin.invariant_report import Violation
from ..admin.invariants import check
from ..memory.store import Foreign, MemoryStore
from ..memory.store import StoredEvent as StoredEventOfStore
from ..names import Names
from ..seam import EnqueueRequest, RunPayload, Schedule, SchedulerError, Trigger
from .cluster import PREFIX, SIM_SETTINGS, Cluster, Replica
from .foreign_faults import ForeignFaults, judged
from .handler import SimHandler
from .loop import StoreClock

CALENDARS = [("* * * * *", 3), ("*/5 * * * *", 12), ("*/15 * * * *", 15), ("7 * * * *", 20),
             ("30 */6 * * *", 20), ("0 3 * * *", 30)]
"""Crons of the simulated Schedules and how many of every 100 use each: a few every minute,
most hourly or daily, as a platform's Schedules are."""
ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata", "Australia/Lord_Howe"]

FAULTS = ("crash", "restart", "pause", "store_down", "feed_delay", "handler_storm", "clock_step",
          "schedule_change", "hold", "run_now", "replay", "delete")
"""What the plan draws from, every kind a few times per simulated hour."""


@dataclass
class Outcome:
    """What one seed did and what the checker found."""

    seed: int
    simulated_hours: float
    runs: int
    faults: int
    violations: list[Violation]
    trace: list[str] = field(default_factory=list)
    foreign: int = 0
    """Foreign messages written (:mod:`.foreign_faults`); the checker named every one still
    stored, or ``violations`` says which it missed."""


def _schedules(rng: random.Random, count: int) -> list[Schedule]:
    crons = [cron for cron, share in CALENDARS for _ in range(share)]
    return [Schedule(f"dep-{i:04d}", f"dep-{i:04d}", crons[i % len(crons)],
                     rng.choice(ZONES), True, RunPayload("agent:sim", f"prompt {i}"), 1)
            for i in range(count)]


class Scenario:
    """One seed's cluster, plan and verdict."""

    def __init__(self, seed: int, *, replicas: int = 3, hours: float = 1.0,
                 schedules: int = 100, trace: bool = False, foreign: bool = True) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        random.seed(seed)  # the runtime's own jitter (retry backoff) draws from it
        self.hours = hours
        self.lines: list[str] = []
        self._tracing = trace
        rng = self.rng
        self._time = asyncio.get_running_loop().time
        self.store = MemoryStore(clock=StoreClock(self._time),
                                 latency=lambda: rng.uniform(0.0005, 0.004),
                                 feed_delay=lambda: self._feed_delay * rng.random(),
                                 lose_answer=lambda: rng.random() < 0.002,
                                 trace=self.trace if trace else None)
        self._feed_delay = 0.01
        self.handler = SimHandler(random.Random(rng.random()), self.store.now,
                                  trace=self.trace if trace else (lambda line: None))
        self.cluster = Cluster(self.store, self.handler, now=self.store.now, trace=self.trace,
                               time=self._time)
        self.store.gate = self.cluster.gate
        for _ in range(replicas):
            self.cluster.add(skew=rng.choice([0.0, 0.0, rng.uniform(-30, 30)]))
        self.schedules = _schedules(rng, schedules)
        self.faults = 0
        self._outages: list[tuple[float, float]] = []
        self._versions = {s.deployment_id: 1 for s in self.schedules}
        self.foreign = ForeignFaults(self.store, random.Random(f"foreign {seed}"),
                                     Names(PREFIX), self.trace) if foreign else None

    def trace(self, line: str) -> None:
        if self._tracing:
            self.lines.append(f"{self._time():12.6f} {line}")

    # ------------------------------------------------------------------ the run

    async def run(self) -> Outcome:
        for replica in self.cluster.replicas:
            await self._back(replica)
        end = self.hours * 3600.0
        loop = asyncio.get_running_loop()
        plan = sorted((self.rng.uniform(30.0, end - 60.0), self.rng.choice(FAULTS))
                      for _ in range(max(1, int(self.hours * 12))))
        foreign = None if self.foreign is None else asyncio.ensure_future(
            self._foreign_messages(end))
        for at, kind in plan:
            await asyncio.sleep(max(0.0, at - loop.time()))
            await self._fault(kind)
        await asyncio.sleep(max(0.0, end - loop.time()))
        if foreign is not None:
            await foreign
        self.store.down_for(0.0)
        for replica in self.cluster.replicas:
            self.cluster.resume(replica)
            if replica.provider is None:
                await self._back(replica)
        self._feed_delay = 0.01
        await asyncio.sleep(120.0)  # what is in flight finishes; no fault any more
        for replica in self.cluster.replicas:
            await self.cluster.stop(replica)
        return self._verdict()

    async def _foreign_messages(self, end: float) -> None:
        """The foreign messages of this seed, at times of their own (:mod:`.foreign_faults`),
        a few per simulated hour; one on a Schedule AstraBox changes right after."""
        assert self.foreign is not None
        rng, loop = self.foreign.rng, asyncio.get_running_loop()
        for at in sorted(rng.uniform(30.0, end - 60.0)
                         for _ in range(max(1, int(self.hours * 12)))):
            await asyncio.sleep(max(0.0, at - loop.time()))
            changing = self.foreign.inject(
                self.schedules, [r.identity for r in self.cluster.replicas], self.store.now())
            if changing is not None:
                await self._change(changing, rng)

    async def _change(self, dep: str, rng: random.Random) -> None:
        """AstraBox edits ``dep`` through a live replica (drawn from ``rng``)."""
        running = [r for r in self.cluster.running if r.provider is not None
                   and r.resumed is not None and r.resumed.is_set()]
        index = next((i for i, s in enumerate(self.schedules) if s.deployment_id == dep), None)
        if not running or index is None:
            return
        replica, old = rng.choice(running), self.schedules[index]
        self._versions[dep] += 1
        schedule = Schedule(dep, dep, rng.choice([c for c, _ in CALENDARS]), old.timezone,
                            old.enabled, old.payload, self._versions[dep])
        self.schedules[index] = schedule
        try:
            await replica.call(replica.provider.apply(schedule))  # type: ignore[union-attr]
        except SchedulerError as exc:
            self.trace(f"astrabox change {dep} refused: {type(exc).__name__}")

    async def _reconcile(self, replica: Replica) -> None:
        """AstraBox at a replica's start: every stored Schedule, as it stands."""
        assert replica.provider is not None
        try:
            await replica.call(replica.provider.reconcile(self.schedules))
        except SchedulerError as exc:
            self.trace(f"reconcile on {replica.identity} refused: {exc}")

    def _live(self) -> Replica | None:
        running = [r for r in self.cluster.running if r.resumed is not None
                   and r.resumed.is_set()]
        return self.rng.choice(running) if running else None

    async def _fault(self, kind: str) -> None:
        rng, cluster = self.rng, self.cluster
        self.faults += 1
        replica = rng.choice(cluster.replicas)
        self.trace(f"fault {kind} {replica.identity}")
        if kind == "crash" and replica.provider is not None:
            await cluster.crash(replica)
            asyncio.get_running_loop().call_later(
                rng.uniform(5.0, 300.0), lambda r=replica: asyncio.ensure_future(self._back(r)))
        elif kind == "restart" and replica.provider is not None:
            await cluster.stop(replica)
            await self._back(replica)
        elif kind == "pause":
            cluster.pause(replica)
            asyncio.get_running_loop().call_later(rng.uniform(1.0, 25.0), cluster.resume,
                                                  replica)
        elif kind == "store_down":
            seconds = rng.uniform(1.0, 20.0)
            now = asyncio.get_running_loop().time()
            self._outages.append((now, now + seconds))
            self.store.down_for(seconds)
        elif kind == "feed_delay":
            self._feed_delay = rng.uniform(0.5, 5.0)
            asyncio.get_running_loop().call_later(rng.uniform(10.0, 120.0),
                                                  setattr, self, "_feed_delay", 0.01)
        elif kind == "handler_storm":
            self.handler.behaviour = type(self.handler.behaviour)(transient=0.5)
            asyncio.get_running_loop().call_later(
                rng.uniform(10.0, 120.0), setattr, self.handler, "behaviour",
                type(self.handler.behaviour)())
        elif kind == "clock_step":
            replica.clock.skew += rng.uniform(-120.0, 120.0)
        else:
            await self._astrabox(kind)

    async def _back(self, replica: Replica) -> None:
        """Start ``replica`` again, as a supervisor restarts AstraBox: a start that fails
        (the store down) is tried again a little later."""
        try:
            await self.cluster.start(replica)
        except SchedulerError:
            asyncio.get_running_loop().call_later(
                self.rng.uniform(5.0, 30.0), lambda: asyncio.ensure_future(self._back(replica)))
            return
        await self._reconcile(replica)

    async def _astrabox(self, kind: str) -> None:
        """AstraBox (or an operator) acting through a live replica."""
        rng, replica = self.rng, self._live()
        if replica is None or replica.provider is None:
            return
        provider = replica.provider
        index = rng.randrange(len(self.schedules))
        schedule = self.schedules[index]
        dep = schedule.deployment_id
        try:
            if kind == "schedule_change":
                self._versions[dep] += 1
                cron = rng.choice([c for c, _ in CALENDARS])
                schedule = Schedule(dep, dep, cron, schedule.timezone,
                                    rng.random() < 0.8, schedule.payload, self._versions[dep])
                self.schedules[index] = schedule
                await replica.call(provider.apply(schedule))
            elif kind == "delete":
                await replica.call(provider.delete(dep))
                self.schedules.pop(index)
            elif kind == "hold":
                await replica.call(provider.hold(dep, by="sim", reason="simulated hold"))
                asyncio.get_running_loop().call_later(
                    rng.uniform(30.0, 600.0), lambda: asyncio.ensure_future(self._release(dep)))
            elif kind == "run_now":
                await self._enqueue(replica, EnqueueRequest(
                    dep, Trigger.RUN_NOW, request_id=f"now-{rng.getrandbits(48)}"))
            elif kind == "replay":
                runs = await replica.call(provider.list_runs(dep, limit=5))
                if runs:
                    await self._enqueue(replica, EnqueueRequest(
                        dep, Trigger.REPLAY, replay_of=runs[0].run_id,
                        request_id=f"replay-{rng.getrandbits(48)}"))
        except SchedulerError as exc:
            self.trace(f"astrabox {kind} {dep} refused: {type(exc).__name__}")

    async def _enqueue(self, replica: Replica, request: EnqueueRequest) -> None:
        """AstraBox's request, and at once the same again at another live replica (a retry
        after a time-out): one ``request_id``, so one Run between the two calls."""
        others = [r for r in self.cluster.running if r is not replica
                  and r.resumed is not None and r.resumed.is_set()]
        callers = [replica, *others[:1]]
        outcomes = await asyncio.gather(
            *(r.call(r.provider.enqueue(request)) for r in callers if r.provider is not None),
            return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException) and not isinstance(outcome, SchedulerError):
                raise outcome
        refused = [o for o in outcomes if isinstance(o, SchedulerError)]
        if refused:
            raise refused[0]

    async def _release(self, dep: str) -> None:
        replica = self._live()
        if replica is None or replica.provider is None:
            return
        try:
            await replica.call(replica.provider.release(dep, by="sim", reason="done"))
        except SchedulerError as exc:
            self.trace(f"release {dep} refused: {type(exc).__name__}")

    # ------------------------------------------------------------------ the verdict

    def _windows(self) -> list[Window]:
        """The replicas' windows, cut where the store did not answer."""
        windows = self.cluster.windows()
        epoch = self.store.now() - timedelta(seconds=asyncio.get_running_loop().time())
        for start, end in self._outages:
            cut_start = epoch + timedelta(seconds=start)
            cut_end = epoch + timedelta(seconds=end + float(SIM_SETTINGS["store_retry_seconds"]))
            pieces = []
            for w in windows:
                if w.end <= cut_start or w.start >= cut_end:
                    pieces.append(w)
                    continue
                if w.start < cut_start:
                    pieces.append(Window(w.start, cut_start, w.identity))
                if w.end > cut_end:
                    pieces.append(Window(cut_end, w.end, w.identity))
            windows = pieces
        return windows

    def _verdict(self) -> Outcome:
        names = Names(PREFIX)
        runs = [_stored(e, names.run_subject(self.store.run_deployments[run_id], run_id))
                for run_id, events in self.store.runs.items() for e in events]
        runs.sort(key=lambda e: e.seq)
        schedules = sorted((_stored(e, names.schedule_subject(dep))
                            for dep, events in self.store.schedules.items() for e in events),
                           key=lambda e: e.seq)
        history = History(PREFIX, runs, schedules,
                          {run_id: slot.value for run_id, slot in self.store.leases.items()
                           if not isinstance(slot.value, Foreign)},
                          read_at=self.store.now(),
                          foreign=[] if self.foreign is None else self.foreign.others())
        report = check(history, Options(
            calls=self.handler.calls, windows=self.cluster.windows(), grace=120.0, margin=5.0,
            lease_seconds=float(SIM_SETTINGS["lease_seconds"])))
        violations = list(report.violations)
        if self.foreign is not None:
            violations = judged(violations, self.foreign.stored())
        return Outcome(self.seed, self.hours, len(self.store.runs), self.faults, violations,
                       self.lines, 0 if self.foreign is None else self.foreign.injected)


def _stored(stored: StoredEventOfStore, subject: str) -> StoredEvent:
    """A journal's stored event as the checker reads it (a foreign one does not decode)."""
    if isinstance(stored.event, Foreign):
        return StoredEvent(stored.seq, subject, stored.stored_at, None, stored.event.why)
    return StoredEvent(stored.seq, subject, stored.stored_at, stored.event)
