"""What the fault scenarios (``tests/faults/``) and the soak (``bench/soak.py``) share.

Settings that keep leases, retries and drains short; a Schedule as the replicas' JSON; firing
and Run-now bursts driven through replica processes, remembering what each replica was told
(the due times fired and acknowledged, the Runs enqueued); waiting until every stored Run is
finished; and the closing assertion of every scenario: the invariant checker finds nothing
(``assert_clean_after_fault`` once the store and the replicas have settled after a fault).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from nats_scheduler.admin.invariants import Report, Window
from nats_scheduler.core import calendar
from nats_scheduler.core.events import RunEvent
from nats_scheduler.names import Names
from nats_scheduler.seam import RunState

from .checking import check_store, read_history
from .replicas import ReplicaError, ReplicaProcess, ReplicaSet
from .servers import stream_info
from .shared_handler import SqliteRunHandler

__all__ = ["FAR", "FAST_REPLICA", "Burst", "assert_clean_after_fault", "assert_clean_store",
           "schedule", "steered_pair", "unfinished_runs", "wait_all_finished", "wait_converged",
           "wait_projections", "without"]

LEASE = 2.0
"""Lease of the scenarios' replicas: short, so takeovers are quick."""

FAST_REPLICA: dict[str, object] = {
    "call_timeout": 5.0,
    "retry_attempts": 8,
    "retry_initial": 0.05,
    "retry_cap": 0.3,
    "drain_seconds": 2.0,
    "store_retry_seconds": 10.0,
    "connect_timeout": 5.0,
}
"""Replica settings of the scenarios (the lease is ``LEASE``): short retries; a store retry
budget that rides out a server restart or a leader election."""

FAR = datetime(2032, 2, 29, tzinfo=UTC)
"""Due times far ahead, of calendars that only have due times on 29 February: tickers never
fire them by themselves while a scenario runs (``fire`` takes any due time)."""

FAR_CRON = "*/5 * 29 2 *"


def schedule(deployment_id: str, cron: str = FAR_CRON, **extra: Any) -> dict[str, Any]:
    """A Schedule in the replica protocol's JSON."""
    return {"deployment_id": deployment_id, "cron": cron, "timezone": "UTC", "version": 1,
            "enabled": True, **extra}


def far_dues(count: int, cron: str = FAR_CRON) -> list[datetime]:
    """The first ``count`` due times of ``cron`` on ``FAR``'s day."""
    return calendar.upcoming(cron, "UTC", FAR, count)


@dataclass
class Burst:
    """Fire due times and ask for Runs now through replicas; remember what was acknowledged.

    ``expected`` collects every (deployment, due time) a replica answered with a Run ID (the
    checker then demands exactly one Run for each); ``enqueued`` every Run ID ``enqueue``
    returned; ``errors`` what the replicas answered instead (a clean SchedulerUnavailable is
    allowed while a store is away; the scenario decides).
    """

    deployment: str
    expected: set[tuple[str, datetime]] = field(default_factory=set)
    enqueued: set[str] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)

    async def fire(self, replica: ReplicaProcess, dues: Iterable[datetime], *,
                   repeat: int = 1, timeout: float = 60.0) -> None:
        dues = list(dues)
        try:
            answer = await replica.send("fire", deployment=self.deployment,
                                        dues=[d.isoformat() for d in dues], repeat=repeat,
                                        timeout=timeout, check=False)
        except ReplicaError as exc:  # the replica died or did not answer
            self.errors.append(str(exc))
            return
        if not answer.get("ok"):
            self.errors.append(str(answer.get("error")))
            return
        for i, run_id in enumerate(answer["runs"]):
            if run_id is not None:
                self.expected.add((self.deployment, dues[i // repeat]))

    async def enqueue(self, replica: ReplicaProcess, request_id: str | None = None, *,
                      timeout: float = 60.0) -> None:
        try:
            answer = await replica.send("enqueue", deployment=self.deployment,
                                        request_id=request_id, timeout=timeout, check=False)
        except ReplicaError as exc:
            self.errors.append(str(exc))
            return
        if answer.get("ok"):
            self.enqueued.add(answer["run"]["run_id"])
        else:
            self.errors.append(str(answer.get("error")))

    async def waves(self, replicas: list[ReplicaProcess], dues: list[datetime], *,
                    per_wave: int = 4, tag: str = "w") -> None:
        """Every replica fires each wave's due times and asks for one Run now per wave."""
        for n in range(0, len(dues), per_wave):
            wave = dues[n:n + per_wave]
            await asyncio.gather(*(self.fire(r, wave) for r in replicas),
                                 *(self.enqueue(r, f"{tag}-{n}") for r in replicas))


async def steered_pair(
    replicas: ReplicaSet, handler: SqliteRunHandler, schedule: dict[str, Any], rule: str,
) -> tuple[ReplicaProcess, ReplicaProcess]:
    """Replicas ``a`` and ``b``, ``schedule`` applied through ``a``, and every handler call
    for its deployment steered by ``rule`` (``hang_admit``: each Run held at its turn until
    the test lifts the rule): the start of every takeover scenario."""
    a, b = await replicas.spawn("a", "b")
    await a.send("apply", schedule=schedule)
    handler.set_rule(schedule["deployment_id"], rule)
    return a, b


def without(windows: Iterable[Window], start: datetime, end: datetime) -> list[Window]:
    """``windows`` minus ``[start, end]``: a fault that cut replicas off from the store.

    A holder that cannot reach the store cannot renew its lease, so a takeover during such a
    fault is legitimate however alive the process was: the checker must not call it stolen.
    """
    out = []
    for w in windows:
        if w.end <= start or w.start >= end:
            out.append(w)
            continue
        if w.start < start:
            out.append(Window(w.start, start, w.identity))
        if w.end > end:
            out.append(Window(end, w.end, w.identity))
    return out


async def _stream_view(url: str, stream: str) -> tuple[int, str | None, bool]:
    """(last sequence, leader, every replica current) as the server at ``url`` answers."""
    info = await stream_info(url, stream)
    cluster = info.cluster
    peers = (cluster.replicas or []) if cluster is not None else []
    current = all(p.current and not p.offline for p in peers)
    return info.state.last_seq, cluster.leader if cluster is not None else None, current


async def wait_converged(urls: Iterable[str], prefix: str, timeout: float = 60.0) -> None:
    """Poll until every server answers the same about the event streams, all replicas current.

    After a partition heals or a node comes back, a server may answer from a state that has
    not caught up yet for a while; a scenario judges the history only once they all agree.
    """
    names = Names(prefix)
    streams = (names.schedules_stream, names.runs_stream, f"KV_{names.leases_bucket}")
    urls = list(urls)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        try:
            views = [[await _stream_view(url, s) for url in urls] for s in streams]
            if all(v[2] and v[1] is not None and v == per[0] for per in views for v in per):
                return
        except Exception:  # a server still electing or catching up: ask again
            views = []
        if loop.time() > deadline:
            raise AssertionError(f"the servers did not converge in {timeout} s: {views}")
        await asyncio.sleep(0.2)


async def unfinished_runs(url: str, prefix: str) -> list[str]:
    """Run IDs whose last stored event leaves them PENDING or DISPATCHING."""
    history = await read_history(url, prefix)
    last: dict[str, RunState] = {}
    for stored in history.runs:
        if isinstance(stored.event, RunEvent):
            last[stored.event.run.run_id] = stored.event.run.state
    return sorted(r for r, s in last.items() if s in (RunState.PENDING, RunState.DISPATCHING))


async def wait_all_finished(url: str, prefix: str, timeout: float = 60.0) -> None:
    """Poll the store until every stored Run is DISPATCHED or FAILED."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        try:
            left = await unfinished_runs(url, prefix)
        except Exception as exc:  # a store still coming back: look again
            left = [f"(unreadable: {type(exc).__name__})"]
        if not left:
            return
        if loop.time() > deadline:
            raise AssertionError(f"runs still unfinished after {timeout} s: {left[:10]}")
        await asyncio.sleep(0.2)


async def stream_last_seqs(url: str, prefix: str) -> dict[str, int]:
    """The last sequence of the Schedule and Run event streams."""
    history = await read_history(url, prefix)
    names = Names(prefix)
    return {names.schedules_stream: max((e.seq for e in history.schedules), default=0),
            names.runs_stream: max((e.seq for e in history.runs), default=0)}


async def wait_projections(replicas: Iterable[ReplicaProcess], url: str, prefix: str,
                           timeout: float = 30.0) -> dict[str, list[dict[str, Any]]]:
    """Poll until every running replica's projections applied every stored event.

    Projections must never stall, whatever happened (a fault, a poison event); returns each
    replica's followers as the ``followers`` command reports them.
    """
    last = await stream_last_seqs(url, prefix)
    running = [r for r in replicas if r.running]

    async def caught_up() -> dict[str, list[dict[str, Any]]] | None:
        views = {r.identity: (await r.send("followers"))["followers"] for r in running}
        done = all(f["applied_seq"] >= last[f["stream"]] for fs in views.values() for f in fs)
        return views if done else None

    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while (views := await caught_up()) is None:
        if loop.time() > deadline:
            raise AssertionError(f"projections behind the store ({last}): {await caught_up()}")
        await asyncio.sleep(0.1)
    return views


async def assert_clean_store(url: str, prefix: str, *, handler: SqliteRunHandler,
                             windows: Iterable[Window] = (),
                             expected: Iterable[tuple[str, datetime]] | None = None,
                             lease_seconds: float = LEASE, grace: float = 30.0,
                             margin: float = 2.0) -> Report:
    """The scenario's closing assertion: the checker finds no violation.

    ``expected``: the due times the scenario fired by hand (then the windows judge only
    takeovers); without it, only the tickers fired and the windows also bound due times.
    """
    report = await check_store(url, prefix, handler=handler, windows=list(windows),
                               expected=expected, lease_seconds=lease_seconds, grace=grace,
                               margin=margin, ticker_only=expected is None)
    assert report.ok, report.text()
    return report


async def assert_clean_after_fault(replicas: ReplicaSet, handler: SqliteRunHandler, *,
                                   fault: tuple[datetime, datetime],
                                   expected: Iterable[tuple[str, datetime]]) -> Report:
    """A fault scenario's closing assertion, once the store and the replicas have settled.

    Waits until every stored Run is finished and every running replica's projections applied
    every stored event (they must never stall), then the checker must find nothing, with
    ``fault`` (its start and the instant it stopped mattering) cut out of the replicas'
    liveness windows: a holder the fault cut off from the store could not renew its lease,
    so a takeover then is no theft (:func:`without`).
    """
    await wait_all_finished(replicas.url, replicas.prefix)
    await wait_projections(replicas.replicas, replicas.url, replicas.prefix)
    return await assert_clean_store(replicas.url, replicas.prefix, handler=handler,
                                    windows=without(replicas.windows(), *fault),
                                    expected=expected)
