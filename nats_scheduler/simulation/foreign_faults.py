"""The simulation's foreign messages: written where every port's readers look, at random.

A fault class of its own (docs/architecture.md, section 9): a message that is not the
provider's own (jetstream/foreign.py) is stored on the last event of a Schedule (and on one
AstraBox is about to change), on a Run's subject (a finished one's, and the one a due time
about to come will create), on a deployment's history index, under a Run's lease key, under
a replica's key (a live one's, whose next beat replaces it, and a fresh one) and as the
newest checkpoint head. Nothing may wedge: every promise the checker judges still holds.
And the checker must name every one still stored, and nothing else, as ``foreign``.

Drawn from a random generator of its own, so the rest of a seed's plan draws what it drew
before this fault class existed.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from ..admin.invariant_report import Violation
from ..core import calendar
from ..memory.store import Foreign, MemoryStore
from ..names import Names, scheduled_run_id
from ..seam import Schedule

TARGETS = ("schedule", "changing", "run", "future_run", "index", "lease", "replica", "head")
"""Where a foreign message goes (``changing``: on a Schedule AstraBox then changes)."""


@dataclass
class ForeignFaults:
    """Writes the foreign messages of one seed and says which the checker must name."""

    store: MemoryStore
    rng: random.Random
    names: Names
    trace: Callable[[str], None]
    injected: int = field(default=0, init=False)

    def inject(self, schedules: Sequence[Schedule], replicas: Sequence[str],
               now: datetime) -> str | None:
        """One foreign message on a target drawn at random; the deployment AstraBox should
        change next (``changing``), else None."""
        store, rng = self.store, self.rng
        target = rng.choice(TARGETS)
        dep = rng.choice(schedules).deployment_id if schedules else "dep-none"
        if target == "run" and not store.runs:
            target = "future_run"
        if target in ("schedule", "changing"):
            store.foreign_schedule(dep)
        elif target == "run":
            run_id = rng.choice(sorted(store.runs))
            store.foreign_run(store.run_deployments[run_id], run_id)
        elif target in ("future_run", "lease"):
            dep, run_id = self._next_run(schedules, now)
            if target == "lease":
                store.foreign_lease(run_id)
            else:
                store.foreign_run(dep, run_id)
        elif target == "index":
            store.foreign_index(dep)
        elif target == "replica":
            store.foreign_replica(rng.choice([*replicas, "ghost"]))
        else:
            store.foreign_checkpoint_head()
        self.injected += 1
        self.trace(f"foreign message on {target} ({dep})")
        return dep if target == "changing" else None

    def _next_run(self, schedules: Sequence[Schedule], now: datetime) -> tuple[str, str]:
        """(deployment, Run ID) of the next due time of a Schedule drawn at random: a Run
        about to be created (a made-up one when there is none)."""
        if schedules:
            schedule = self.rng.choice(schedules)
            due = calendar.next_due(schedule.cron, schedule.timezone, now)
            if due is not None:
                return schedule.deployment_id, scheduled_run_id(schedule.deployment_id, due)
        return "dep-none", f"snone{self.rng.getrandbits(32):x}"

    # ------------------------------------------------------------------ the verdict

    def stored(self) -> set[str]:
        """``subject#position`` of every foreign message the store still holds, as the
        checker names them."""
        names, store = self.names, self.store
        found = {f"{names.run_subject(store.run_deployments[run_id], run_id)}#{e.seq}"
                 for run_id, events in store.runs.items() for e in events
                 if isinstance(e.event, Foreign)}
        found |= {f"{names.schedule_subject(dep)}#{e.seq}"
                  for dep, events in store.schedules.items() for e in events
                  if isinstance(e.event, Foreign)}
        return found | {v.subject for v in self.others()}

    def others(self) -> list[Violation]:
        """The foreign messages of the index, buckets and checkpoints, as the checker's scan
        of those stores reports them (``admin/foreign_scan.py``)."""
        names, store = self.names, self.store
        found = [(names.index_subject(dep), seq, names.index_stream)
                 for dep, entries in store.index.items() for seq, _, entry, _ in entries
                 if isinstance(entry, Foreign)]
        found += [(names.lease_subject(run_id), slot.revision, names.leases_stream)
                  for run_id, slot in store.leases.items() if isinstance(slot.value, Foreign)]
        found += [(names.replica_subject(key), slot.revision, names.replicas_stream)
                  for key, slot in store.replicas.items() if slot.value != key.encode()]
        found += [(names.checkpoint_head_subject, seq, names.checkpoints_stream)
                  for seq, head in store.checkpoints.heads if isinstance(head, Foreign)]
        return [Violation("foreign", f"{subject}#{seq}", f"in {stream}: not the scheduler's")
                for subject, seq, stream in found]


def judged(violations: Sequence[Violation], expected: set[str]) -> list[Violation]:
    """The checker's violations, less the foreign messages it had to name, plus one for each
    it named wrongly or missed (every injected message still stored is named exactly once)."""
    named = {v.subject for v in violations if v.check == "foreign"}
    wrong = [Violation("foreign-unexpected", s, "named foreign but not written so")
             for s in sorted(named - expected)]
    missed = [Violation("foreign-missed", s, "written foreign but not named")
              for s in sorted(expected - named)]
    return [v for v in violations if v.check != "foreign"] + wrong + missed
