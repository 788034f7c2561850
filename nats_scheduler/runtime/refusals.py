"""The Schedules this process's reconciles refused, kept until a change makes them moot.

``reconcile`` applies every Schedule it can and refuses the others one by one
(``core/refusals.py``; docs/contract.md, "When reconcile refuses Schedules"). An operator
must see which, so each refusal is logged at ERROR (the first :data:`LOGGED` of a reconcile
one line each, then one line for the rest), counted by kind in the metric
``astrabox.scheduler.schedules.refused``, and kept here for ``replica.status`` (the status
command, the console) and ``explain``.

A refusal stands until it is moot: the next reconcile replaces them all, a successful
``apply`` or ``delete`` of the deployment here clears it, and so does a new definition of it
stored by anyone (AstraBox applying it through another replica): the table tells of every
change, and a hold or a release, which leave the definition as it was, does not clear it.
At most :data:`MAX_NAMED` are kept by name; beyond, they are counted only.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence

import msgspec

from ..core.events import ScheduleRecord
from ..core.refusals import Refusal, by_kind
from ..projections.schedule_table import ScheduleTable
from ..seam import Schedule
from .metrics import Metrics

log = logging.getLogger(__name__)

MAX_NAMED = 10_000
"""Refusals kept by name (a few hundred bytes each); more are counted, not named."""

LOGGED = 20
"""Refusals of one reconcile logged one line each; one more line counts the rest."""


class _Kept(msgspec.Struct, frozen=True, gc=False):
    refusal: Refusal
    stored: ScheduleRecord | None
    """The deployment's stored Schedule when it was refused: a new definition clears it."""


def _definition(record: ScheduleRecord | None) -> Schedule | None:
    return None if record is None or record.deleted else record.definition()


class Refusals:
    """The refused Schedules of one process (see the module docstring)."""

    def __init__(self, table: ScheduleTable, metrics: Metrics, identity: str) -> None:
        self._table = table
        self._metrics = metrics
        self._identity = identity
        self._named: dict[str, _Kept] = {}
        self._unnamed: Counter[str] = Counter()
        table.subscribe_changes(self._changed)

    def replace(self, refused: Sequence[Refusal], *, given: int) -> None:
        """A reconcile's refusals in place of the last one's; logged. ``given``: how many
        Schedules the reconcile was given."""
        for kept in list(self._named.values()):
            self._drop(kept.refusal.deployment_id)
        for kind, count in self._unnamed.items():
            self._metrics.schedules_refused(kind, -count)
        self._unnamed.clear()
        self.add(refused, given=given)

    def add(self, refused: Sequence[Refusal], *, given: int | None = None) -> None:
        """Keep and log more refusals (a change refused while it was stored)."""
        for refusal in refused:
            refusal = msgspec.structs.replace(refusal, by=self._identity)
            dep = refusal.deployment_id
            self._drop(dep)
            if len(self._named) < MAX_NAMED:
                self._named[dep] = _Kept(refusal, self._table.get(dep))
            else:
                self._unnamed[refusal.kind] += 1
            self._metrics.schedules_refused(refusal.kind, +1)
        self._log(refused, given)

    def clear(self, deployment_id: str) -> None:
        """The deployment was applied or deleted: its refusal, if any, is moot."""
        if self._named:
            self._drop(deployment_id)

    def get(self, deployment_id: str) -> Refusal | None:
        kept = self._named.get(deployment_id)
        return None if kept is None else kept.refusal

    def listed(self) -> list[Refusal]:
        """The refusals kept by name, in the order they were refused."""
        return [kept.refusal for kept in self._named.values()]

    @property
    def count(self) -> int:
        """Every refusal standing, the unnamed ones included."""
        return len(self._named) + sum(self._unnamed.values())

    def _drop(self, deployment_id: str) -> None:
        kept = self._named.pop(deployment_id, None)
        if kept is not None:
            self._metrics.schedules_refused(kept.refusal.kind, -1)

    def _changed(self, _previous: ScheduleRecord | None, record: ScheduleRecord) -> None:
        """A Schedule the table took: a new definition of a refused deployment clears it."""
        if not self._named:
            return  # the usual case: one truthiness test per event
        kept = self._named.get(record.deployment_id)
        if kept is not None and _definition(record) != _definition(kept.stored):
            self._drop(record.deployment_id)

    def _log(self, refused: Sequence[Refusal], given: int | None) -> None:
        for refusal in refused[:LOGGED]:
            stored = _definition(self._table.get(refusal.deployment_id)) is not None
            log.error("reconcile refused the schedule of deployment %r (%s): %s; %s",
                      refusal.deployment_id, refusal.kind, refusal.reason,
                      "its stored schedule stays as it was" if stored
                      else "it has no schedule in the scheduler")
        if len(refused) > LOGGED:
            kinds = ", ".join(f"{k} {n}" for k, n in sorted(by_kind(refused).items()))
            of = "" if given is None else f" of {given}"
            log.error("reconcile refused %d schedules%s in all (%s), the others are applied; "
                      "`nats-scheduler status` lists the refused ones",
                      len(refused), of, kinds)
