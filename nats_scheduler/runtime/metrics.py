"""The provider's metrics: every instrument declared here, fed by the parts that know the facts.

A library publishes through the OpenTelemetry API only (``opentelemetry-api``): the meter is
``astrabox.scheduler.nats`` and everything is a no-op until the host installs an SDK and a
global ``MeterProvider``. Tests (and hosts that keep several) pass a ``MeterProvider`` to the
provider explicitly instead of touching the global one.

Counts that a dashboard sums across replicas are counters; the lateness of a firing is a
histogram; Schedules by state and Runs in flight are up-down counters moved on the event
loop (no callback reads the projections from an exporter's thread). Beside the instruments,
:class:`Metrics` keeps a plain in-process copy of the same figures (:meth:`Metrics.snapshot`),
which the admin service returns per replica in ``replica.status``, so operators see them
without a metrics pipeline. docs/operations.md ("Metrics") lists every instrument with the
alert to set on it.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from opentelemetry import metrics as otel
from opentelemetry.metrics import MeterProvider, NoOpMeterProvider

from ..core.events import ScheduleRecord
from ..release import installed_version
from ..seam import Trigger

METER_NAME = "astrabox.scheduler.nats"

Stage = Literal["stored", "started"]
"""Where a scheduled Run's lateness is measured: its create acknowledged, its first
``start_session`` called."""

StoreErrorKind = Literal["transient", "unavailable", "conflict"]
"""A store failure retried, one raised as SchedulerUnavailable, a failed conditional append."""

FailureReason = Literal["permanent", "exhausted", "paused"]
"""Why a Run ended FAILED: ``RunPermanentError``, the retry budget spent, the firing gate."""

LATENESS_WINDOW = 1000
"""The snapshot's lateness percentiles are over this many latest firings per stage."""

RECENT_FOREIGN = 20
"""The latest foreign messages ``replica.status`` names (``doctor`` shows them)."""

RECENT_LATENESS = 120
"""The latest firings per stage whose lateness ``replica.status`` returns one by one (the
console draws them): a couple of hours of an every-minute Schedule, a few KiB."""

LATENESS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
                    300.0)
"""Histogram boundaries (seconds): a healthy firing is milliseconds late, a stalled one minutes."""


@dataclass(frozen=True)
class InstrumentSpec:
    """One instrument as exported: what an operator reads in docs/operations.md."""

    name: str
    kind: Literal["counter", "histogram", "updowncounter", "gauge"]
    unit: str
    description: str
    attributes: tuple[str, ...] = ()


FIRE_LATENESS = InstrumentSpec(
    "astrabox.scheduler.fire.lateness", "histogram", "s",
    "From a scheduled Run's due time to its create being acknowledged (stage=stored) and to "
    "its first start_session call (stage=started)", ("stage",))
RUNS_CREATED = InstrumentSpec(
    "astrabox.scheduler.runs.created", "counter", "{run}",
    "Runs this process stored (a due time fired, Run now, Replay)", ("trigger",))
RUNS_DISPATCHED = InstrumentSpec(
    "astrabox.scheduler.runs.dispatched", "counter", "{run}",
    "Runs whose turn this process stored as admitted (DISPATCHED)", ("trigger",))
RUNS_FAILED = InstrumentSpec(
    "astrabox.scheduler.runs.failed", "counter", "{run}",
    "Runs this process recorded FAILED", ("trigger", "reason"))
DISPATCH_ATTEMPTS = InstrumentSpec(
    "astrabox.scheduler.dispatch.attempts", "counter", "{attempt}",
    "Attempts started (a claim stored), first attempts and retries alike", ("trigger",))
DISPATCH_RETRIES = InstrumentSpec(
    "astrabox.scheduler.dispatch.retries", "counter", "{attempt}",
    "Transient handler failures that scheduled another attempt", ("trigger",))
TAKEOVERS = InstrumentSpec(
    "astrabox.scheduler.dispatch.takeovers", "counter", "{run}",
    "Claims of a Run another process was dispatching when its lease expired", ("trigger",))
STALE_FIRE_READS = InstrumentSpec(
    "astrabox.scheduler.fire.stale_reads", "counter", "{read}",
    "Schedule reads that aged past the pause-visibility bound before the create and were "
    "done again")
STALE_SCHEDULE_COPIES = InstrumentSpec(
    "astrabox.scheduler.schedules.stale_copies", "counter", "{write}",
    "Schedule changes decided on this process's copy of the Schedule that the store refused "
    "because the copy was stale, then decided again on the stored state (not conflicts)")
STORE_ERRORS = InstrumentSpec(
    "astrabox.scheduler.store.errors", "counter", "{error}",
    "Store failures: retried (kind=transient), raised as unavailable (kind=unavailable), "
    "conditional appends refused (kind=conflict)", ("kind",))
EVENTS_SKIPPED = InstrumentSpec(
    "astrabox.scheduler.events.skipped", "counter", "{event}",
    "Messages on the scheduler's subjects a reader skipped: not the scheduler's own (foreign: "
    "another writer, a newer release, damaged; counted once each), filed under another Run "
    "or Schedule, or a transition that cannot happen", ("stream",))
SCHEDULES = InstrumentSpec(
    "astrabox.scheduler.schedules", "updowncounter", "{schedule}",
    "Schedules by state as this process's table holds them: active (firing), held, disabled",
    ("state",))
SCHEDULES_REFUSED = InstrumentSpec(
    "astrabox.scheduler.schedules.refused", "updowncounter", "{schedule}",
    "Schedules this process's reconcile refused and that still stand refused (each keeps "
    "its stored definition), by kind: invalid, too_large, capacity, duplicate (alert on "
    "any)", ("kind",))
RUNS_IN_FLIGHT = InstrumentSpec(
    "astrabox.scheduler.runs.in_flight", "updowncounter", "{run}",
    "Runs this process holds the lease of right now")

DUE_SKIPPED = InstrumentSpec(
    "astrabox.scheduler.due_times.skipped", "counter", "{due_time}",
    "Due times that passed without a Run for a reason the rules give: the Schedule disabled "
    "(reason=disabled) or held (held), no provider process running (no_process: counted by "
    "the replica that records the outage), a change at that moment (schedule_change, "
    "deleted)", ("reason",))
DUE_UNEXPLAINED = InstrumentSpec(
    "astrabox.scheduler.due_times.unexplained", "counter", "{due_time}",
    "Due times of an active Schedule, with a replica running, that have no Run a minute "
    "after they passed: a broken promise (page on any)")
AUTO_HOLDS = InstrumentSpec(
    "astrabox.scheduler.schedules.auto_held", "counter", "{schedule}",
    "Schedules this process held after their scheduled Runs failed "
    "ASTRABOX_NATS_AUTO_HOLD_AFTER_FAILURES times in a row")
HOLDS_ENDED = InstrumentSpec(
    "astrabox.scheduler.schedules.holds_ended", "counter", "{schedule}",
    "Holds with an end that this process released when their end came")

CLOCK_OFFSET = InstrumentSpec(
    "astrabox.scheduler.clock.offset", "gauge", "s",
    "This host's clock minus the store's (the server's timestamps on this process's own "
    "writes): positive when the host runs ahead. Firing corrects it; a large one means NTP "
    "is broken on this host")

INSTRUMENTS = (FIRE_LATENESS, RUNS_CREATED, RUNS_DISPATCHED, RUNS_FAILED, DISPATCH_ATTEMPTS,
               DISPATCH_RETRIES, TAKEOVERS, STALE_FIRE_READS, STALE_SCHEDULE_COPIES,
               STORE_ERRORS, EVENTS_SKIPPED, SCHEDULES, SCHEDULES_REFUSED, RUNS_IN_FLIGHT,
               AUTO_HOLDS,
               HOLDS_ENDED, CLOCK_OFFSET, DUE_SKIPPED, DUE_UNEXPLAINED)
"""Every instrument the provider exports (docs/operations.md lists the same)."""


@dataclass(frozen=True)
class Lateness:
    """Percentiles (seconds) of the latest :data:`LATENESS_WINDOW` firings of one stage."""

    count: int
    p50: float
    p95: float
    p99: float
    max: float


@dataclass(frozen=True)
class Snapshot:
    """The figures of one process since it started, as plain values."""

    runs_created: dict[str, int] = field(default_factory=dict)
    runs_dispatched: dict[str, int] = field(default_factory=dict)
    runs_failed: dict[str, int] = field(default_factory=dict)
    dispatch_attempts: int = 0
    dispatch_retries: int = 0
    takeovers: int = 0
    stale_fire_reads: int = 0
    stale_schedule_copies: int = 0
    store_errors: dict[str, int] = field(default_factory=dict)
    events_skipped: dict[str, int] = field(default_factory=dict)
    schedules: dict[str, int] = field(default_factory=dict)
    runs_in_flight: int = 0
    lateness: dict[str, Lateness] = field(default_factory=dict)
    due_times_skipped: dict[str, int] = field(default_factory=dict)
    due_times_unexplained: int = 0
    auto_holds: int = 0
    holds_ended: int = 0
    recent_lateness: dict[str, list[float]] = field(default_factory=dict)
    """The latest :data:`RECENT_LATENESS` firings' lateness per stage, oldest first."""
    schedules_refused: dict[str, int] = field(default_factory=dict)
    """Schedules refused by a reconcile and still standing, by kind."""
    foreign: list[str] = field(default_factory=list)
    """The latest foreign messages its readers skipped, oldest first (at most
    :data:`RECENT_FOREIGN`): ``<subject>#<sequence> (<stream kind>): <why>``."""


def _schedule_state(record: ScheduleRecord) -> str | None:
    if record.deleted:
        return None
    if record.hold is not None:
        return "held"
    return "active" if record.enabled else "disabled"


def _percentile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


class Metrics:
    """The instruments of one provider process, and the plain copy of what they counted."""

    def __init__(self, meter_provider: MeterProvider | None = None) -> None:
        if meter_provider is not None:
            meter = meter_provider.get_meter(METER_NAME, installed_version())
        else:
            meter = otel.get_meter(METER_NAME, installed_version())
        self._latency = meter.create_histogram(
            FIRE_LATENESS.name, FIRE_LATENESS.unit, FIRE_LATENESS.description,
            explicit_bucket_boundaries_advisory=LATENESS_BUCKETS)
        self._counters = {spec.name: meter.create_counter(spec.name, spec.unit, spec.description)
                          for spec in INSTRUMENTS if spec.kind == "counter"}
        self._gauges = {spec.name: meter.create_up_down_counter(spec.name, spec.unit,
                                                                 spec.description)
                        for spec in INSTRUMENTS if spec.kind == "updowncounter"}
        self._offset = meter.create_gauge(CLOCK_OFFSET.name, CLOCK_OFFSET.unit,
                                          CLOCK_OFFSET.description)
        self._counts: Counter[tuple[str, str]] = Counter()
        self._lateness: dict[str, deque[float]] = {
            stage: deque(maxlen=LATENESS_WINDOW) for stage in ("stored", "started")}
        self._schedules: Counter[str] = Counter()
        self._refused: Counter[str] = Counter()
        self._foreign: deque[str] = deque(maxlen=RECENT_FOREIGN)
        self._in_flight = 0
        self._live = True

    @classmethod
    def disabled(cls) -> Metrics:
        """Metrics that export nothing (parts built without a provider, e.g. in unit tests)."""
        return cls(NoOpMeterProvider())

    # ------------------------------------------------------------------ facts

    def fire_lateness(self, stage: Stage, due_at: datetime, now: datetime) -> None:
        """A scheduled Run's due time reached ``stage`` at ``now``."""
        seconds = max(0.0, (now - due_at).total_seconds())
        self._latency.record(seconds, {"stage": stage})
        self._lateness[stage].append(seconds)

    def run_created(self, trigger: Trigger) -> None:
        self._count(RUNS_CREATED, trigger.value, {"trigger": trigger.value})

    def run_dispatched(self, trigger: Trigger) -> None:
        self._count(RUNS_DISPATCHED, trigger.value, {"trigger": trigger.value})

    def run_failed(self, trigger: Trigger, reason: FailureReason) -> None:
        self._count(RUNS_FAILED, trigger.value, {"trigger": trigger.value, "reason": reason})

    def attempt(self, trigger: Trigger, *, takeover: bool) -> None:
        """A claim was stored; ``takeover``: it names the previous holder (``takeover_from``)."""
        self._count(DISPATCH_ATTEMPTS, "", {"trigger": trigger.value})
        if takeover:
            self._count(TAKEOVERS, "", {"trigger": trigger.value})

    def retry(self, trigger: Trigger) -> None:
        self._count(DISPATCH_RETRIES, "", {"trigger": trigger.value})

    def auto_hold(self) -> None:
        """This process stored the hold of a Schedule whose Runs kept failing."""
        self._count(AUTO_HOLDS, "", {})

    def hold_ended(self) -> None:
        """This process stored the release of a hold whose end came."""
        self._count(HOLDS_ENDED, "", {})

    def stale_fire_read(self) -> None:
        self._count(STALE_FIRE_READS, "", {})

    def stale_schedule_copy(self) -> None:
        """A Schedule change decided on this process's stale copy was refused, to be decided
        again on the stored state: the copy's cost, counted apart from real conflicts."""
        self._count(STALE_SCHEDULE_COPIES, "", {})

    def store_error(self, kind: StoreErrorKind) -> None:
        self._count(STORE_ERRORS, kind, {"kind": kind})

    def event_skipped(self, stream: str) -> None:
        """A reader skipped a message on the scheduler's subjects: one that is not its own
        (jetstream/foreign.py), or a projection's refusal (``stream``: the stream's kind,
        ``schedules``, ``runs``, ``index``, ``leases``, ``replicas``, ``outages``,
        ``checkpoints``)."""
        self._count(EVENTS_SKIPPED, stream, {"stream": stream})

    def foreign_message(self, stream: str, what: str) -> None:
        """A reader skipped a foreign message (jetstream/foreign.py), once each: counted as
        :meth:`event_skipped`, and named among the latest."""
        self.event_skipped(stream)
        self._foreign.append(what)

    def due_times_skipped(self, reason: str, count: int = 1) -> None:
        """``count`` due times passed without a Run, for ``reason`` (``core/dueaccount.py``)."""
        if count > 0:
            self._count(DUE_SKIPPED, reason, {"reason": reason}, count)

    def due_times_unexplained(self, count: int = 1) -> None:
        """``count`` due times passed the grace without a Run and without a reason."""
        if count > 0:
            self._count(DUE_UNEXPLAINED, "", {}, count)

    def clock_offset(self, seconds: float) -> None:
        """This host's clock minus the store's, as the newest estimate has it."""
        self._offset.set(seconds)

    def schedules_refused(self, kind: str, delta: int) -> None:
        """``delta`` more (or fewer) Schedules stand refused for ``kind``."""
        if not self._live or not delta:
            return
        self._refused[kind] += delta
        self._gauges[SCHEDULES_REFUSED.name].add(delta, {"kind": kind})

    def in_flight(self, delta: int) -> None:
        """This process took (+1) or gave up (-1) the lease of a Run."""
        if not self._live:
            return
        self._in_flight += delta
        self._gauges[RUNS_IN_FLIGHT.name].add(delta)

    def _count(self, spec: InstrumentSpec, key: str, attributes: Mapping[str, str],
               amount: int = 1) -> None:
        self._counters[spec.name].add(amount, attributes)
        self._counts[(spec.name, key)] += amount

    # ------------------------------------------------------------------ Schedules

    def watch_schedules(
        self, records: list[ScheduleRecord],
        subscribe: Callable[[Callable[[ScheduleRecord | None, ScheduleRecord], None]], None],
    ) -> None:
        """Count ``records`` by state, then follow every change ``subscribe`` reports with
        the record it replaced (no state is kept per Schedule: a million Schedules)."""
        for record in records:
            self.schedule_changed(None, record)
        subscribe(self.schedule_changed)

    def schedule_changed(self, previous: ScheduleRecord | None, record: ScheduleRecord) -> None:
        """Move one Schedule between the state counts (O(1): called on every event)."""
        if not self._live:
            return
        old = None if previous is None else _schedule_state(previous)
        new = _schedule_state(record)
        if old != new:
            self._move(old, -1)
            self._move(new, +1)

    def _move(self, state: str | None, delta: int) -> None:
        if state is not None:
            self._schedules[state] += delta
            self._gauges[SCHEDULES.name].add(delta, {"state": state})

    def stop(self) -> None:
        """At stop: take this process's Schedules and Runs out of the shared gauges.

        The up-down counters may be shared with other providers of the process (the global
        meter provider), so what this one added is subtracted; later changes are ignored.
        """
        for state, count in self._schedules.items():
            self._gauges[SCHEDULES.name].add(-count, {"state": state})
        self._schedules.clear()
        for kind, count in self._refused.items():
            self._gauges[SCHEDULES_REFUSED.name].add(-count, {"kind": kind})
        self._refused.clear()
        self._gauges[RUNS_IN_FLIGHT.name].add(-self._in_flight)
        self._in_flight = 0
        self._live = False

    # ------------------------------------------------------------------ snapshot

    def snapshot(self) -> Snapshot:
        """The figures as plain values (for ``replica.status``)."""

        def by_key(spec: InstrumentSpec) -> dict[str, int]:
            return {key: n for (name, key), n in self._counts.items() if name == spec.name}

        def total(spec: InstrumentSpec) -> int:
            return sum(by_key(spec).values())

        return Snapshot(
            runs_created=by_key(RUNS_CREATED),
            runs_dispatched=by_key(RUNS_DISPATCHED),
            runs_failed=by_key(RUNS_FAILED),
            dispatch_attempts=total(DISPATCH_ATTEMPTS),
            dispatch_retries=total(DISPATCH_RETRIES),
            takeovers=total(TAKEOVERS),
            stale_fire_reads=total(STALE_FIRE_READS),
            stale_schedule_copies=total(STALE_SCHEDULE_COPIES),
            store_errors=by_key(STORE_ERRORS),
            events_skipped=by_key(EVENTS_SKIPPED),
            schedules={state: n for state, n in self._schedules.items() if n},
            runs_in_flight=self._in_flight,
            lateness={stage: summary for stage, samples in self._lateness.items()
                      if (summary := _summary(samples)) is not None},
            due_times_skipped=by_key(DUE_SKIPPED),
            due_times_unexplained=total(DUE_UNEXPLAINED),
            auto_holds=total(AUTO_HOLDS),
            holds_ended=total(HOLDS_ENDED),
            recent_lateness={stage: [round(x, 4) for x in itertools.islice(
                samples, max(0, len(samples) - RECENT_LATENESS), None)]
                for stage, samples in self._lateness.items() if samples},
            schedules_refused={kind: n for kind, n in self._refused.items() if n},
            foreign=list(self._foreign),
        )


def _summary(samples: deque[float]) -> Lateness | None:
    if not samples:
        return None
    ordered = sorted(samples)
    return Lateness(count=len(ordered), p50=_percentile(ordered, 0.5),
                    p95=_percentile(ordered, 0.95), p99=_percentile(ordered, 0.99),
                    max=ordered[-1])
