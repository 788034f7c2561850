"""Each Run's stored trail, and what a rolling upgrade's minute boundaries must show.

Pure: a :class:`~nats_scheduler.admin.invariants.History` (read by
:func:`~.checking.read_history`) goes in, :class:`Trail` per Run and :class:`Boundary`
figures come out, and :func:`boundary_problems` says in words what is wrong with one
boundary. The rolling-upgrade test asserts on those words and ``bench/rolling_upgrade.py``
prints them and the figures, so both judge a boundary the same way.

Which release wrote a Run shows in the store itself: this release's creator stores its claim
in ``run.created`` (schema 2), the previous release stored ``run.created`` (schema 1,
PENDING) and then a ``run.claimed`` of its own.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from nats_scheduler.admin.invariants import History
from nats_scheduler.core.events import RunCreated, RunEvent
from nats_scheduler.seam import RunState

__all__ = ["Boundary", "Trail", "boundary_problems", "trails"]


@dataclass(frozen=True)
class Trail:
    """One Run as the store holds it: who created it, with which schema, and its events."""

    run_id: str
    deployment_id: str
    due_at: datetime | None
    creator: str
    schema: int
    created_at: datetime
    """The server's timestamp of the ``run.created``."""
    types: tuple[str, ...]
    actors: tuple[str, ...]
    state: RunState
    session_id: str | None
    error: str | None

    @property
    def finished(self) -> bool:
        return self.state in (RunState.DISPATCHED, RunState.FAILED)


def trails(history: History) -> dict[str, Trail]:
    """Every Run whose ``run.created`` was read, by Run ID (undecodable messages left to the
    invariant checker, which reports them)."""
    found: dict[str, Trail] = {}
    for stored in history.runs:
        event = stored.event
        if not isinstance(event, RunEvent):
            continue
        run = event.run
        before = found.get(run.run_id)
        if before is None:
            if not isinstance(event, RunCreated):
                continue
            found[run.run_id] = Trail(
                run.run_id, run.deployment_id, run.due_at, event.actor, event.schema,
                stored.stored_at, (stored.type,), (event.actor,), run.state, run.session_id,
                run.error)
            continue
        found[run.run_id] = Trail(
            before.run_id, before.deployment_id, before.due_at, before.creator, before.schema,
            before.created_at, (*before.types, stored.type), (*before.actors, event.actor),
            run.state, run.session_id, run.error)
    return found


@dataclass(frozen=True)
class Boundary:
    """The Runs of one minute boundary: how many per deployment, who made them, how late."""

    due: datetime
    runs: tuple[Trail, ...]

    @classmethod
    def of(cls, all_trails: Iterable[Trail], due: datetime) -> Boundary:
        return cls(due, tuple(t for t in all_trails if t.due_at == due))

    def per_deployment(self) -> Counter[str]:
        return Counter(t.deployment_id for t in self.runs)

    def creators(self) -> Counter[str]:
        return Counter(t.creator for t in self.runs)

    def states(self) -> Counter[str]:
        return Counter(str(t.state) for t in self.runs)

    def lateness(self, creators: Collection[str]) -> tuple[float, float] | None:
        """Median and worst seconds from the due time to the stored create, over the Runs
        created by ``creators``; None when they created none."""
        late = [(t.created_at - self.due).total_seconds() for t in self.runs
                if t.creator in creators]
        return (statistics.median(late), max(late)) if late else None

    def finished(self, deployments: Collection[str]) -> bool:
        """Whether every deployment has a Run here and every Run here is finished."""
        return (set(self.per_deployment()) >= set(deployments)
                and all(t.finished for t in self.runs))


def boundary_problems(boundary: Boundary, deployments: Collection[str],
                      refusals: Mapping[str, str], releases: Mapping[str, int]) -> list[str]:
    """What is wrong with one boundary fired by replicas of two releases, in words.

    Exactly one Run per deployment; each DISPATCHED, or FAILED with the handler's own
    refusal where ``refusals`` (deployment -> the handler's error) says the handler refuses;
    each created by one of ``releases`` (identity -> the schema its release writes) through
    that release's own write path; and Runs created by both releases, each firing its share.
    """
    when = boundary.due.strftime("%H:%M")
    problems = [f"{when} {dep}: {n} Runs" for dep, n in sorted(boundary.per_deployment().items())
                if n != 1]
    problems += [f"{when} {dep}: no Run" for dep in sorted(deployments)
                 if dep not in boundary.per_deployment()]
    for t in boundary.runs:
        refusal = refusals.get(t.deployment_id)
        if refusal is None and t.state != RunState.DISPATCHED:
            problems.append(f"{when} {t.deployment_id}: {t.state} ({t.error})")
        if refusal is not None and (t.state != RunState.FAILED or refusal not in (t.error or "")):
            problems.append(f"{when} {t.deployment_id}: {t.state} ({t.error}), not the "
                            f"handler's refusal")
        schema = releases.get(t.creator)
        if schema is None:
            problems.append(f"{when} {t.deployment_id}: created by {t.creator}, no replica")
        elif t.schema != schema:
            problems.append(f"{when} {t.deployment_id}: {t.creator} stored schema {t.schema}, "
                            f"its release writes {schema}")
        elif schema == 1 and "run.claimed" not in t.types:
            problems.append(f"{when} {t.deployment_id}: {t.creator}'s Run has no run.claimed")
    schemas = {releases.get(c) for c in boundary.creators()}
    if len(set(releases.values()) - schemas) > 0:
        problems.append(f"{when}: Runs created only by {sorted(boundary.creators())}")
    return problems
