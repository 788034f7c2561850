"""A rolling upgrade from the previous release to this one, as AstraBox runs it: one replica
at a time, on one server and one prefix (``tests/test_rolling_upgrade.py`` judges one
minute boundary of it, ``bench/rolling_upgrade.py`` three or more).

The steps (:func:`rolling_upgrade`):

1. Two replicas of the previous release, ``old-a`` and ``old-b`` (:mod:`.old_release`: its
   own venv, its own harness), write the store: every-minute Schedules (one of them refused
   by the handler), the history (Runs asked for now, dispatched) and an open Run (held by
   the handler at its turn, so DISPATCHING).
2. ``old-b`` is stopped and ``new-b`` (this release) started: it must read what the previous
   release wrote (the Runs listed with their Sessions and turns, the open Run as it stands).
3. ``old-a`` and ``new-b``, one replica of each release, fire the every-minute Schedules
   through ``boundaries`` real minute boundaries, both in each other's live set.
4. ``old-a`` is stopped (it gives its open Run back) and ``new-a`` started; ``new-b``
   resumes the open Run the previous release left, and the handler lets it finish.

Then every Run must be finished, every replica's projections caught up with the store, and
the invariant checker (:func:`.checking.check_store`) judges the whole history.
:class:`Outcome` keeps what each step saw and says what is wrong, part by part.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import nats.js.errors

from nats_scheduler.admin.invariants import Report
from nats_scheduler.core.events import SCHEMA_VERSION
from nats_scheduler.names import Names
from nats_scheduler.seam import RunState
from tests.providers import eventually

from .checking import check_store, read_history
from .old_release import Release, ReleaseReplica, handler_schema, imported_from
from .replicas import REPO_ROOT, ReplicaProcess, ReplicaSet, replica_set
from .scenario import FAR_CRON, FAST_REPLICA, LEASE, schedule, wait_all_finished, wait_projections
from .servers import connect_fast
from .shared_handler import SqliteRunHandler
from .trails import Boundary, Trail, boundary_problems, trails

__all__ = ["Outcome", "rolling_upgrade"]

HISTORY = "upg-history"
"""Runs asked for now through the previous release, dispatched: the history."""
OPEN = "upg-open"
"""One Run asked for now through the previous release and held at its turn: an open Run."""
HISTORY_RUNS = 3
REFUSAL = "rejected by the handler (steered)"
"""The error of a Run whose handler refuses it (the shared handler's ``fail_permanent``)."""
OLD_SCHEMA, NEW_SCHEMA = 1, SCHEMA_VERSION
"""The ``run.created`` schema each release writes (docs/architecture.md, "Events"): the
previous release's first, this checkout's current one (3: the operator's authenticated
``caller`` and the outage records, with the fields of 2)."""

T = TypeVar("T")


async def until(check: Callable[[], Awaitable[T | None] | T | None], timeout: float,
                what: str) -> T:
    """``eventually(check)``, failing with ``what`` was awaited."""
    try:
        result: T = await eventually(check, timeout=timeout, interval=0.1)
    except AssertionError:
        raise AssertionError(f"{what}: not within {timeout:.0f} s") from None
    return result


async def live_identities(url: str, prefix: str) -> set[str]:
    """The identities in the replicas bucket (every release's live replicas put theirs)."""
    nc = await connect_fast(url)
    try:
        kv = await nc.jetstream().key_value(Names(prefix).replicas_bucket)
        try:
            return set(await kv.keys())
        except nats.js.errors.NoKeysError:
            return set()
    finally:
        await nc.close()


def next_boundary(after: datetime, lead: float = 3.0) -> datetime:
    """The first whole minute at least ``lead`` seconds after ``after``: time enough for
    each replica's presence watch to count the other live (beats every second) and for the
    one just ready to have planned its Schedules."""
    at = after + timedelta(seconds=lead)
    return at.replace(second=0, microsecond=0) + timedelta(minutes=1)


@dataclass
class Outcome:
    """What a rolling upgrade saw, step by step, and the checker's report at its end."""

    release: Release
    imported: dict[str, str]
    """Where the previous release's processes import ``nats_scheduler`` and their harness."""
    same_handler: bool
    """Whether both releases' shared handlers have the same SQL schema (one file for both)."""
    deployments: list[str]
    refusals: dict[str, str]
    releases: dict[str, int] = field(default_factory=dict)
    """identity -> the ``run.created`` schema its release writes."""
    written: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The history Runs as the previous release answered them."""
    listed: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The same Runs as this release listed them, before anything else happened."""
    open_run: dict[str, Any] = field(default_factory=dict)
    """The open Run as this release read it while the previous release held it."""
    open_holders: list[str] = field(default_factory=list)
    """The processes the handler saw calling for the open Run, in order."""
    boundaries: list[datetime] = field(default_factory=list)
    followers: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """Each mixed-phase replica's projections after the boundaries (``followers``)."""
    statuses: dict[str, dict[str, Any]] = field(default_factory=dict)
    trails: dict[str, Trail] = field(default_factory=dict)
    report: Report | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    """How long each step took."""

    def old_code_problems(self) -> list[str]:
        """The previous release's replicas really ran the previous release's code."""
        problems = []
        venv = self.release.python.parents[1]
        if not Path(self.imported["nats_scheduler"]).is_relative_to(venv):
            problems.append(f"the previous release imports {self.imported['nats_scheduler']}, "
                            f"not its venv's ({venv})")
        if not Path(self.imported["replica"]).is_relative_to(self.release.harness):
            problems.append(f"the previous release runs {self.imported['replica']}")
        if not self.same_handler:
            problems.append("the releases' shared handlers have different schemas")
        for run_id in self.written:
            trail = self.trails.get(run_id)
            if trail is None or trail.types[:2] != ("run.created", "run.claimed"):
                problems.append(f"{run_id}: {trail and trail.types}, not the previous "
                                "release's run.created then run.claimed")
        return problems

    def read_problems(self) -> list[str]:
        """This release read what the previous one wrote, and resumed its open Run."""
        problems = []
        if set(self.listed) != set(self.written):
            problems.append(f"listed {sorted(self.listed)}, written {sorted(self.written)}")
        for run_id, run in self.written.items():
            seen = self.listed.get(run_id, {})
            keys = ("state", "session_id", "turn_id", "due_at", "created_at")
            if any(seen.get(k) != run[k] for k in keys):
                problems.append(f"{run_id}: written {[run[k] for k in keys]}, "
                                f"read {[seen.get(k) for k in keys]}")
        if self.open_run.get("state") != str(RunState.DISPATCHING):
            problems.append(f"the open Run read as {self.open_run.get('state')}")
        trail = self.trails.get(self.open_run.get("run_id", ""))
        if trail is None or trail.state != RunState.DISPATCHED:
            problems.append(f"the open Run ended {trail and trail.state}")
        elif trail.actors[-1] not in self.new or trail.session_id != self.open_run["session_id"]:
            problems.append(f"the open Run was finished by {trail.actors[-1]} with Session "
                            f"{trail.session_id}, not resumed by this release")
        if not self.open_holders or self.open_holders[-1] not in self.new:
            problems.append(f"the handler saw the open Run called by {self.open_holders}")
        return problems

    def firing_problems(self) -> list[str]:
        """Each mixed boundary once per Schedule, both releases firing, no poison."""
        problems = []
        for due in self.boundaries:
            problems += boundary_problems(self.boundary(due), self.deployments, self.refusals,
                                          self.releases)
        for identity, followers in self.followers.items():
            problems += [f"{identity} skipped {f['poisoned']} events on {f['stream']}: "
                         f"{f['last_poison']}" for f in followers if f["poisoned"]]
        return problems

    def boundary(self, due: datetime) -> Boundary:
        return Boundary.of(self.trails.values(), due)

    @property
    def old(self) -> set[str]:
        return {i for i, schema in self.releases.items() if schema == OLD_SCHEMA}

    @property
    def new(self) -> set[str]:
        return {i for i, schema in self.releases.items() if schema == NEW_SCHEMA}


class _Steps:
    """The steps of :func:`rolling_upgrade`, each noting what it saw in ``outcome``."""

    def __init__(self, replicas: ReplicaSet, handler: SqliteRunHandler,
                 outcome: Outcome) -> None:
        self.replicas = replicas
        self.handler = handler
        self.outcome = outcome
        self.open_run_id = ""

    def old_replica(self, identity: str) -> ReleaseReplica:
        self.outcome.releases[identity] = OLD_SCHEMA
        return ReleaseReplica.joining(self.replicas, self.outcome.release, identity)

    def new_replica(self, identity: str) -> ReplicaProcess:
        self.outcome.releases[identity] = NEW_SCHEMA
        return self.replicas.add(identity)

    async def history(self, writer: ReplicaProcess) -> None:
        """Runs asked for now through ``writer``, dispatched; then one held at its turn."""
        for n in range(HISTORY_RUNS):
            run = (await writer.send("enqueue", deployment=HISTORY,
                                     request_id=f"history-{n}"))["run"]
            self.outcome.written[run["run_id"]] = await until(
                lambda r=run["run_id"]: self.finished(writer, r), 30, f"history Run {n}")
        self.handler.set_rule(OPEN, "hang_admit")
        self.open_run_id = (await writer.send("enqueue", deployment=OPEN,
                                              request_id="open"))["run"]["run_id"]
        await self.holders(bool, "the open Run held at its turn")

    async def finished(self, replica: ReplicaProcess, run_id: str) -> dict[str, Any] | None:
        run: dict[str, Any] = (await replica.send("get_run", run_id=run_id))["run"]
        return run if run["state"] == str(RunState.DISPATCHED) else None

    async def holders(self, done: Callable[[list[str]], bool], what: str) -> None:
        """Wait until the processes held at the open Run's turn satisfy ``done``."""
        def held() -> list[str] | None:
            holders = [c.process for c in self.handler.calls(self.open_run_id)
                       if c.outcome == "hang"]
            return holders if done(holders) else None

        self.outcome.open_holders = await until(held, 30, what)

    async def read(self, reader: ReplicaProcess) -> None:
        """What this release answers about the previous release's Runs."""
        listed = (await reader.send("list_runs", deployment=HISTORY))["runs"]
        self.outcome.listed = {run["run_id"]: run for run in listed}
        self.outcome.open_run = (await reader.send("get_run", run_id=self.open_run_id))["run"]

    async def fire(self, pair: list[ReplicaProcess], boundaries: int) -> None:
        """Both live in each other's set, then ``boundaries`` minute boundaries fired."""
        url, prefix = self.replicas.url, self.replicas.prefix
        identities = {r.identity for r in pair}

        async def joined() -> bool:
            return identities <= await live_identities(url, prefix)

        await until(joined, 30, f"{sorted(identities)} live")
        due = next_boundary(datetime.now(UTC))
        for _ in range(boundaries):
            async def fired(due: datetime = due) -> bool:
                found = trails(await read_history(url, prefix))
                return Boundary.of(found.values(), due).finished(self.outcome.deployments)

            left = (due - datetime.now(UTC)).total_seconds()
            await until(fired, left + 30, f"every Schedule's Run of {due:%H:%M} finished")
            self.outcome.boundaries.append(due)
            due += timedelta(minutes=1)
        await wait_projections(pair, url, prefix)
        for replica in pair:
            self.outcome.followers[replica.identity] = (
                await replica.send("followers"))["followers"]
            self.outcome.statuses[replica.identity] = await replica.send("status")


async def rolling_upgrade(url: str, work_dir: Path, release: Release, *, boundaries: int = 1,
                          schedules: int = 16) -> Outcome:
    """Upgrade two replicas from ``release`` to this one, one at a time (the module doc)."""
    deployments = [f"upg-{n:02d}" for n in range(schedules)]
    handler = SqliteRunHandler(work_dir / "handler.db", process="upgrade")
    outcome = Outcome(release=release, imported=await asyncio.to_thread(imported_from, release),
                      same_handler=handler_schema(release.harness) == handler_schema(REPO_ROOT),
                      deployments=deployments, refusals={deployments[-1]: REFUSAL})
    handler.set_rule(deployments[-1], "fail_permanent")
    clock = time.monotonic()

    def lap(step: str) -> None:
        nonlocal clock
        outcome.seconds[step], clock = time.monotonic() - clock, time.monotonic()

    # The open Run's turn is held until the upgrade's end: no handler call may time out first
    # (the scenarios' 5 s would end it FAILED after its retries, mid-way through the boundaries).
    settings = {**FAST_REPLICA, "call_timeout": 120.0 + 60.0 * boundaries}
    async with replica_set(url, work_dir, handler.path, lease_seconds=LEASE,
                           settings=settings) as replicas:
        steps = _Steps(replicas, handler, outcome)
        old_a, old_b = steps.old_replica("old-a"), steps.old_replica("old-b")
        await asyncio.gather(old_a.start(), old_b.start())
        for spec in (*(schedule(d, "* * * * *") for d in deployments),
                     schedule(HISTORY, FAR_CRON), schedule(OPEN, FAR_CRON)):
            await old_a.send("apply", schedule=spec)
        await steps.history(old_a)
        lap("previous release writes")

        await old_b.stop()
        new_b = await steps.new_replica("new-b").start()
        await steps.read(new_b)
        lap("old-b -> new-b")

        await steps.fire([old_a, new_b], boundaries)
        lap("both releases fire")

        await old_a.stop()
        await steps.holders(lambda h: bool(h) and h[-1] in outcome.new,
                            "the open Run resumed by this release")
        handler.set_rule(OPEN, None)
        await steps.new_replica("new-a").start()
        await wait_all_finished(url, replicas.prefix)
        await wait_projections([new_b], url, replicas.prefix)
        lap("old-a -> new-a")

        outcome.trails = trails(await read_history(url, replicas.prefix))
        outcome.report = await check_store(url, replicas.prefix, handler=handler,
                                           windows=replicas.windows(), lease_seconds=LEASE,
                                           grace=5.0)
        lap("check")
    return outcome
