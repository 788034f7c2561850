"""What the views keep of each deployment's history: its newest Run, its newest scheduled
Run and its FAILED Runs of the last day, without the history.

One summary per deployment is held for every Schedule, so at 100,000 Schedules this is
the ledger's largest part (docs/benchmarks.md, "A restart at 100,000 Schedules"). A
summary's newest Run is therefore kept packed in one ``bytes`` object (its stream
sequence, two timestamps, its state and trigger, its ID): about 100 bytes a deployment
where a struct of objects (the mark, its floats, a summary object holding it) took 270.
The newest scheduled Run is stored apart only where it is not the newest Run, and FAILED
Runs only for the deployments that have some. :class:`RunMark` and
:class:`DeploymentSummary` are the unpacked views callers read.
"""

from __future__ import annotations

import math
import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import msgspec

from ..core.events import RunRecord
from ..seam import RunState, Trigger

FAILURE_MEMORY = timedelta(hours=25)
"""How long a deployment's FAILED Runs stay in its summary (the views show the last 24 h)."""

MAX_FAILURES = 200
"""FAILED Runs kept per deployment summary; older ones are dropped first."""

_STATES = list(RunState)
_TRIGGERS = list(Trigger)
_STATE_INDEX = {state: i for i, state in enumerate(_STATES)}
_TRIGGER_INDEX = {trigger: i for i, trigger in enumerate(_TRIGGERS)}
_PACKED = struct.Struct("<qddBB")
"""A packed mark's head: stream sequence, created, due (NaN: none), state, trigger; the
Run ID's UTF-8 follows."""


class RunMark(msgspec.Struct, frozen=True, gc=False):
    """What a summary keeps of a Run: what the views show of it."""

    run_id: str
    state: RunState
    trigger: Trigger
    created: float
    """``created_at`` as a POSIX timestamp."""
    due: float | None
    seq: int = 0
    """The stream sequence of the state held (a newer state of the same Run replaces it)."""

    @property
    def created_at(self) -> datetime:
        return datetime.fromtimestamp(self.created, UTC)

    @property
    def due_at(self) -> datetime | None:
        return None if self.due is None else datetime.fromtimestamp(self.due, UTC)


@dataclass(slots=True)
class DeploymentSummary:
    """One deployment's summary, unpacked for a caller."""

    last: RunMark | None = None
    last_scheduled: RunMark | None = None
    failures: dict[str, RunRecord] = field(default_factory=dict)


def _pack(seq: int, record: RunRecord) -> bytes:
    due = record.due_at
    return _PACKED.pack(seq, record.created_at.timestamp(),
                        math.nan if due is None else due.timestamp(),
                        _STATE_INDEX[record.state], _TRIGGER_INDEX[record.trigger]
                        ) + record.run_id.encode()


def _unpack(packed: bytes) -> RunMark:
    seq, created, due, state, trigger = _PACKED.unpack_from(packed)
    return RunMark(packed[_PACKED.size:].decode(), _STATES[state], _TRIGGERS[trigger],
                   created, None if math.isnan(due) else due, seq)


def _newer(seq: int, record: RunRecord, held: bytes | None) -> bool:
    """Whether ``record`` (as of ``seq``) replaces the mark ``held``: a newer Run by
    (created, Run ID), or a newer state of the same Run."""
    if held is None:
        return True
    held_seq, held_created = _PACKED.unpack_from(held)[:2]
    created = record.created_at.timestamp()
    if created != held_created:
        return created > held_created
    run_id = held[_PACKED.size:].decode()
    if record.run_id != run_id:
        return record.run_id > run_id
    return seq >= held_seq


class Summaries:
    """Every deployment's summary, packed (see the module docstring)."""

    def __init__(self, shared_id: Callable[[str], str] | None = None) -> None:
        self._shared_id = shared_id or sys.intern
        """The deployment ID object to key a summary by: the Schedule table's own (one
        copy of each ID per process, not one per structure), or an interned one."""
        self._last: dict[str, bytes] = {}
        self._last_scheduled: dict[str, bytes] = {}
        """Only where the newest scheduled Run is not the newest Run."""
        self._failures: dict[str, dict[str, RunRecord]] = {}

    def note(self, seq: int, record: RunRecord) -> None:
        """Take ``record`` (its state as of stream sequence ``seq``) into its summary.

        Kept true throughout: a deployment is in ``_last_scheduled`` only when its newest
        Run is not a scheduled one and a scheduled one is known."""
        dep = self._shared_id(record.deployment_id)
        last = self._last.get(dep)
        scheduled = record.trigger == Trigger.SCHEDULE
        if _newer(seq, record, last):
            if scheduled:
                self._last_scheduled.pop(dep, None)  # the newest Run is the scheduled one
            elif last is not None and self._scheduled(last):
                self._last_scheduled[dep] = last  # it stays the newest scheduled Run
            self._last[dep] = _pack(seq, record)
        elif scheduled and _newer(seq, record, self._scheduled_mark(dep)):
            self._last_scheduled[dep] = _pack(seq, record)
        if record.state == RunState.FAILED:
            failures = self._failures.setdefault(dep, {})
            failures[record.run_id] = record
            if len(failures) > MAX_FAILURES:
                oldest = min(failures.values(), key=lambda r: r.updated_at)
                del failures[oldest.run_id]

    @staticmethod
    def _scheduled(packed: bytes) -> bool:
        return _TRIGGERS[_PACKED.unpack_from(packed)[4]] == Trigger.SCHEDULE

    def _scheduled_mark(self, dep: str) -> bytes | None:
        """The packed newest scheduled Run (None: none known)."""
        found = self._last_scheduled.get(dep)
        if found is not None:
            return found
        last = self._last.get(dep)
        return last if last is not None and self._scheduled(last) else None

    def summary(self, deployment_id: str) -> DeploymentSummary:
        """The deployment's summary (empty when none of its Runs is known)."""
        last = self._last.get(deployment_id)
        scheduled = self._scheduled_mark(deployment_id)
        return DeploymentSummary(
            last=None if last is None else _unpack(last),
            last_scheduled=None if scheduled is None else _unpack(scheduled),
            failures=dict(self._failures.get(deployment_id, {})))

    def failures(self, since: datetime, deployment_id: str | None = None) -> list[RunRecord]:
        """FAILED Runs that changed at or after ``since`` (of one deployment, or of all);
        those older than :data:`FAILURE_MEMORY` before ``since`` are forgotten on the way."""
        chosen = ([deployment_id] if deployment_id is not None else list(self._failures))
        found = []
        cutoff = since - FAILURE_MEMORY
        for dep in chosen:
            failures = self._failures.get(dep)
            if not failures:
                continue
            for run_id in [r for r, rec in failures.items() if rec.updated_at < cutoff]:
                del failures[run_id]
            if not failures:
                del self._failures[dep]
            found.extend(r for r in failures.values() if r.updated_at >= since)
        return found

    def __len__(self) -> int:
        """How many deployments have a summary."""
        return len(self._last)
