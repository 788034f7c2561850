"""Pause visibility across processes: median and worst over N runs.

    .venv/bin/python bench/pause_visibility.py [--runs 10] [--frozen]

Real processes on a private nats-server: replica ``a`` applies a Schedule; replicas ``b``
and ``c`` fire its due times as fast as they can (``fire_loop``, 4 concurrent fires each,
each its own due times). Once they stored Runs, ``a`` applies
``enabled=False`` and notes the instant ``apply`` returned. The loops keep firing for a
second more. Figures, per run, from the store itself:

- stored: server timestamp of the last ``run.created`` minus the instant ``apply`` returned
- decided: the last Run's ``created_at`` (the firing replica's clock) minus that instant
- started: the same as "stored", over the Runs that were handed to the handler (claimed);
  a Run that reached the store after the pause is recorded FAILED instead ("refused")

Negative means the last Run was stored before ``apply`` returned. The declared bound is
``pause_visibility_seconds`` (nats_scheduler/provider.py).

``--frozen`` adds a run kind where ``c`` is SIGSTOPped mid-storm just before the pause and
SIGCONTed 1.5 s after it: a create frozen between the replica's fresh check and the socket
write reaches the store late, which is why "started" is the figure the bound is about
(docs/architecture.md, "Firing and pause visibility").
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from nats_scheduler.core.events import RunClaimed, RunCreated, RunFailed
from nats_scheduler.natsserver.process import NatsServer
from nats_scheduler.provider import NatsSchedulerProvider
from nats_scheduler.runtime.firing import NOT_STARTED_AFTER_PAUSE

# Run as `python bench/x.py`: sys.path[0] is bench/, so add the repo root for tests.harness.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.harness.history import deployment_run_history
from tests.harness.replicas import ReplicaProcess, ReplicaSet
from tests.harness.servers import connect_fast
from tests.harness.shared_handler import SqliteRunHandler

FAR = datetime(2032, 2, 29, tzinfo=UTC)  # a calendar of 29 February: no real firing


async def poll(check, timeout: float):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        result = await check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        await asyncio.sleep(0.02)


def schedule(dep: str, enabled: bool, version: int) -> dict[str, object]:
    return {"deployment_id": dep, "cron": "* * 29 2 *", "enabled": enabled, "version": version}


Figures = tuple[float, float, float, int, int, int]


async def one(replicas: ReplicaSet, n: int, frozen: bool) -> Figures:
    a, b, c = replicas.replicas[:3]
    dep = f"pv{n}{'f' if frozen else ''}"
    stale_before = await _stale(b, c)
    await a.send("apply", schedule=schedule(dep, True, 1))
    for r, after in ((b, FAR), (c, FAR + timedelta(hours=12))):  # each its own due times
        await r.send("fire_loop", deployment=dep, after=after.isoformat(), concurrency=4)

    async def stored(r: ReplicaProcess) -> int:
        return int((await r.send("status"))["loop"]["stored"])

    await poll(lambda: _both(stored(b), stored(c), 20), 30)
    if frozen:
        c.pause()
    paused = await a.send("apply", schedule=schedule(dep, False, 2))
    returned_at = float(paused["returned_at"])
    if frozen:
        await asyncio.sleep(1.5)  # the experiment: a replica frozen across the pause
        c.resume()

    async def past(r: ReplicaProcess) -> bool:
        return float((await r.send("status"))["loop"]["last_started_at"]) > returned_at + 1.0

    await poll(lambda: _both(past(b), past(c), 1), 30)
    for r in (b, c):
        await r.send("stop_loop")

    async def all_finished() -> bool:
        runs = (await a.send("list_runs", deployment=dep, limit=1000))["runs"]
        return all(r["state"] in ("dispatched", "failed") for r in runs)

    await poll(all_finished, 60)
    nc = await connect_fast(replicas.url)
    try:
        events = await deployment_run_history(nc.jetstream(), replicas.prefix, dep)
    finally:
        await nc.close()
    created = {e.event.run.run_id: e for e in events if isinstance(e.event, RunCreated)}
    claimed = {e.event.run.run_id for e in events if isinstance(e.event, RunClaimed)}
    refused = {e.event.run.run_id for e in events
               if isinstance(e.event, RunFailed) and e.event.error == NOT_STARTED_AFTER_PAUSE}
    stale = await _stale(b, c) - stale_before
    return (max(e.stored_at.timestamp() for e in created.values()) - returned_at,
            max(e.event.run.created_at.timestamp() for e in created.values()) - returned_at,
            max(created[r].stored_at.timestamp() for r in claimed) - returned_at,
            len(refused), stale, len(created))


async def _stale(*replicas: ReplicaProcess) -> int:
    """Aged Schedule reads redone so far (a counter per replica process)."""
    return sum([int((await r.send("status"))["stale_fires"]) for r in replicas])


async def _both(x, y, at_least: int) -> bool:  # type: ignore[no-untyped-def]
    return all(int(v) >= at_least for v in await asyncio.gather(x, y))


def summary(label: str, values: list[float]) -> str:
    return (f"{label:<40} median {statistics.median(values) * 1000:8.1f} ms   "
            f"worst {max(values) * 1000:8.1f} ms   (n={len(values)})")


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--frozen", action="store_true")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench-pause-"))
    server = NatsServer(workdir / "nats").start()
    kinds = [False, True] if args.frozen else [False]
    results: dict[bool, list[Figures]] = {k: [] for k in kinds}
    try:
        handler = SqliteRunHandler(workdir / "handler.db", process="bench")
        async with ReplicaSet(url=server.url, prefix="PV", handler_db=handler.path,
                              log_dir=workdir / "logs") as replicas:
            await replicas.spawn("a", "b", "c")
            for n in range(args.runs):
                for kind in kinds:
                    results[kind].append(await one(replicas, n, kind))
                    stored, decided, started, refused, stale, count = results[kind][-1]
                    print(f"run {n + 1}/{args.runs}{' frozen' if kind else ''}: last Run "
                          f"stored {stored * 1000:.1f} ms, decided {decided * 1000:.1f} ms, "
                          f"started {started * 1000:.1f} ms after apply returned; "
                          f"{count} Runs, {refused} refused as late, {stale} aged reads redone",
                          flush=True)
    finally:
        server.stop()
    bound = NatsSchedulerProvider().properties.pause_visibility_seconds
    print(f"\ndeclared pause_visibility_seconds = {bound:g}")
    for kind, values in results.items():
        label = "frozen replica" if kind else "running replicas"
        print(summary(f"{label}: last Run stored", [v[0] for v in values]))
        print(summary(f"{label}: last Run decided", [v[1] for v in values]))
        print(summary(f"{label}: last Run started", [v[2] for v in values]))
        print(f"{label}: Runs refused as stored after the pause: {sum(v[3] for v in values)}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
