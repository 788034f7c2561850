"""Takeover time after the holder of a Run is SIGKILLed: median and worst over N runs.

    .venv/bin/python bench/takeover.py [--runs 10] [--lease-seconds 5]

Real processes on a private nats-server: for each run and each kill point, two replica
processes (``tests.harness.replica``) share one SQLite handler; the first handler
call is held at the kill point (``hang_start``: before start_session returned;
``hang_admit``: between start_session and admit_turn), the holder is SIGKILLed, the hold is
lifted, and the survivor finishes the Run under the same Run ID and Session. Times are from
the kill to the server's timestamps of the survivor's ``run.claimed`` (takeover) and of
``run.dispatched`` (done). The design bound is lease + sweep interval (lease/5) + one
dispatch; the issue asks for takeover within 10 s at the default lease and within
lease + 5 s in general.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from nats_scheduler.core.events import RunClaimed
from nats_scheduler.natsserver.process import NatsServer
from nats_scheduler.settings import NatsSettings

# Run as `python bench/x.py`: sys.path[0] is bench/, so add the repo root for tests.harness.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.harness.history import run_history
from tests.harness.replicas import ReplicaSet
from tests.harness.servers import connect_fast
from tests.harness.shared_handler import SqliteRunHandler

DUE = datetime(2032, 2, 29, 3, 0, tzinfo=UTC)  # a calendar of 29 February: no real firing


async def poll(check, timeout: float):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return result
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        await asyncio.sleep(0.01)


async def one(server: NatsServer, workdir: Path, n: int, rule: str,
              lease: float) -> tuple[float, float]:
    handler = SqliteRunHandler(workdir / f"h{n}-{rule}.db", process="bench")
    prefix = f"TK{n}{rule[5].upper()}"
    async with ReplicaSet(url=server.url, prefix=prefix, handler_db=handler.path,
                          log_dir=workdir / "logs", lease_seconds=lease,
                          settings={"call_timeout": 60.0}) as replicas:
        a, b = await replicas.spawn(f"a{n}{rule}", f"b{n}{rule}")
        await a.send("apply", schedule={"deployment_id": "tk", "cron": "0 3 29 2 *",
                                        "version": 1})
        handler.set_rule("tk", rule)
        (run_id,) = (await a.send("fire", deployment="tk", dues=[DUE.isoformat()]))["runs"]
        hang = await poll(lambda: [c for c in handler.calls(run_id) if c.outcome == "hang"], 15)
        holder = a if hang[0].process == a.identity else b
        holder.kill()
        killed_at = time.time()
        await holder.wait_exit()
        handler.set_rule("tk", None)
        await poll(lambda: run_id in handler.turns(), lease + 20)
        nc = await connect_fast(server.url)
        try:
            async def done():  # type: ignore[no-untyped-def]
                events = await run_history(nc.jetstream(), prefix, "tk", run_id)
                return events if events[-1].type == "run.dispatched" else None

            events = await poll(done, 10)
        finally:
            await nc.close()
        claim = [e for e in events if isinstance(e.event, RunClaimed)][-1]
        assert claim.event.takeover_from == holder.identity
        assert len(set(handler.sessions())) == 1
        return (claim.stored_at.timestamp() - killed_at,
                events[-1].stored_at.timestamp() - killed_at)


def summary(label: str, values: list[float]) -> str:
    return (f"{label:<44} median {statistics.median(values):6.2f} s   "
            f"worst {max(values):6.2f} s   (n={len(values)})")


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--lease-seconds", type=float, default=NatsSettings().lease_seconds)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench-takeover-"))
    server = NatsServer(workdir / "nats").start()
    results: dict[str, list[tuple[float, float]]] = {"hang_start": [], "hang_admit": []}
    try:
        for n in range(args.runs):
            for rule in results:
                results[rule].append(await one(server, workdir, n, rule, args.lease_seconds))
                print(f"run {n + 1}/{args.runs} {rule}: takeover "
                      f"{results[rule][-1][0]:.2f} s, dispatched {results[rule][-1][1]:.2f} s",
                      flush=True)
    finally:
        server.stop()
    lease = args.lease_seconds
    print(f"\nlease {lease:g} s, sweep every {max(0.2, lease / 5):g} s; "
          f"bound lease + 5 s = {lease + 5:g} s")
    names = {"hang_start": "killed before start_session returned",
             "hang_admit": "killed between start_session and admit_turn"}
    for rule, values in results.items():
        print(summary(f"{names[rule]}: kill -> takeover", [v[0] for v in values]))
        print(summary(f"{names[rule]}: kill -> dispatched", [v[1] for v in values]))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
