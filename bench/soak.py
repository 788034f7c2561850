"""A bounded soak: three replicas on a 3-node cluster under seeded random faults.

    .venv/bin/python -m bench.soak --minutes 3 [--seed 1] [--max-faults N] [--keep DIR]

Real processes throughout: a 3-node JetStream cluster (``sync_interval: always``, R3 streams)
whose routes go through a loopback proxy (so a node can be cut off), three replica processes
(``tests.harness.replica``) sharing one SQLite handler, ten Schedules due every minute (the
replicas' tickers fire them on the real clock) and Runs asked for now at random, while faults
drawn from ``FAULTS`` (seeded, one at a time, each healed before the next) hit the replicas,
the nodes and the handler. Then everything is healed, every Run must finish, every replica's
projections must catch up, and the invariant checker (``nats_scheduler.admin.invariants``)
judges the whole stored history: one Run per due time the replicas lived through, none
invented, none started after a pause, one Session per Run, no lease stolen from a live
holder, every Run finished, no impossible transition.

The report is printed; its LAST line is exactly ``soak: runs=<n> faults=<n> violations=<n>``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from nats_scheduler.admin.invariants import Report, Window
from tests.harness.checking import check_store
from tests.harness.cluster import NatsCluster
from tests.harness.proxy import TcpProxy, links_of, partitionable_cluster
from tests.harness.replicas import ReplicaError, ReplicaProcess, ReplicaSet
from tests.harness.scenario import (
    FAST_REPLICA,
    LEASE,
    schedule,
    wait_all_finished,
    wait_converged,
    wait_projections,
    without,
)
from tests.harness.shared_handler import SqliteRunHandler

SETTINGS: dict[str, object] = {**FAST_REPLICA, "replicas": 3, "store_retry_seconds": 15.0}
TICKS = [f"tick-{i}" for i in range(10)]
"""Schedules due every minute: the tickers fire them on the real clock."""
NOWS = [f"now-{i}" for i in range(4)]
"""Deployments whose Runs are asked for now (their calendar never comes due)."""
CLOCK_STEP = 60.0
"""Seconds a replica's clock is stepped (forward or back) by the clock fault."""
NODE_FREEZE = 20.0
"""Seconds a node is frozen (SIGSTOP): the long variant of tests/faults/test_faults_server.py."""
FAULTS = ("replica_kill", "replica_pause", "replica_stall", "replica_clock", "node_kill",
          "node_partition", "node_freeze", "handler_flaky")


def log(message: str) -> None:
    print(f"{datetime.now(UTC):%H:%M:%S} {message}", flush=True)


@dataclass
class Soak:
    """The running soak: cluster, proxy, replicas, handler, and what happened."""

    cluster: NatsCluster
    proxy: TcpProxy
    replicas: ReplicaSet
    handler: SqliteRunHandler
    rng: random.Random
    """Draws the faults: its own generator, so a seed gives the same sequence of faults."""
    load_rng: random.Random
    """Draws the load (timing-dependent, so kept apart from the faults' draws)."""
    faults: list[str] = field(default_factory=list)
    outages: list[tuple[datetime, datetime]] = field(default_factory=list)
    asked: int = 0
    refused: int = 0
    stopping: bool = False
    pending: set[asyncio.Task[None]] = field(default_factory=set)

    # ---------------------------------------------------------------- load

    def _usable(self) -> list[ReplicaProcess]:
        return [r for r in self.replicas.replicas if r.running and not r.paused]

    async def load(self) -> None:
        """Ask random replicas for Runs now, a few per second, until stopped."""
        n = 0
        while not self.stopping:
            usable = self._usable()
            if usable:
                n += 1
                replica = self.load_rng.choice(usable)
                task = asyncio.create_task(
                    self._ask(replica, self.load_rng.choice(NOWS), f"soak-{n}"))
                self.pending.add(task)
                task.add_done_callback(self.pending.discard)
            await asyncio.sleep(self.load_rng.uniform(0.1, 0.6))
        if self.pending:
            await asyncio.wait(self.pending, timeout=90)

    async def _ask(self, replica: ReplicaProcess, deployment: str, request_id: str) -> None:
        self.asked += 1
        try:
            answer = await replica.send("enqueue", deployment=deployment,
                                        request_id=request_id, timeout=60, check=False)
            self.refused += 0 if answer.get("ok") else 1
        except ReplicaError:  # killed or frozen mid-call: the request may or may not exist
            self.refused += 1

    # ---------------------------------------------------------------- faults

    async def faults_until(self, deadline: float, max_faults: int) -> None:
        loop = asyncio.get_running_loop()
        while len(self.faults) < max_faults:
            await asyncio.sleep(self.rng.uniform(3.0, 10.0))
            kind = self.rng.choice(FAULTS)
            duration = NODE_FREEZE if kind == "node_freeze" else self.rng.uniform(2.0, 8.0)
            left = deadline - loop.time()
            if left < 2.0:
                return
            if duration > left:
                continue  # too long for the time left: draw another one
            began = datetime.now(UTC)
            detail = await getattr(self, f"_{kind}")(duration)
            self.faults.append(kind)
            log(f"fault {len(self.faults)}: {kind} {detail} for {duration:.1f} s, healed")
            if kind.startswith("node_"):
                self.outages.append((began, datetime.now(UTC) + timedelta(seconds=LEASE)))

    def _replica(self) -> ReplicaProcess:
        return self.rng.choice(self._usable())

    async def _replica_kill(self, seconds: float) -> str:
        replica = self._replica()
        await replica.killed()
        await asyncio.sleep(seconds)
        await replica.start()
        return replica.identity

    async def _replica_pause(self, seconds: float) -> str:
        replica = self._replica()
        replica.pause()
        await asyncio.sleep(seconds)
        replica.resume()
        return replica.identity

    async def _replica_stall(self, seconds: float) -> str:
        replica = self._replica()
        await replica.stall(seconds)
        return replica.identity

    async def _replica_clock(self, seconds: float) -> str:
        replica, step = self._replica(), self.rng.choice((-CLOCK_STEP, CLOCK_STEP))
        await replica.step_clock(step)
        await asyncio.sleep(seconds)
        await replica.step_clock(-step)
        return f"{replica.identity} {step:+.0f} s"

    async def _node_kill(self, seconds: float) -> str:
        node = self.rng.randrange(len(self.cluster.nodes))
        await asyncio.to_thread(self.cluster.kill, node)
        await asyncio.sleep(seconds)
        await asyncio.to_thread(self.cluster.restart, node, 60.0)
        return self.cluster.nodes[node].server_name

    async def _node_partition(self, seconds: float) -> str:
        node = self.rng.randrange(len(self.cluster.nodes))
        self.proxy.cut(*links_of(node))
        await asyncio.sleep(seconds)
        self.proxy.heal(*links_of(node))
        return self.cluster.nodes[node].server_name

    async def _node_freeze(self, seconds: float) -> str:
        node = self.cluster.nodes[self.rng.randrange(len(self.cluster.nodes))]
        node.pause()
        try:
            await asyncio.sleep(seconds)
        finally:
            node.resume()
        return node.server_name

    async def _handler_flaky(self, seconds: float) -> str:
        deployment = self.rng.choice(NOWS)
        rule = self.rng.choice(("fail_transient:2", "slow_admit:1.5", "fail_permanent"))
        self.handler.set_rule(deployment, rule)
        await asyncio.sleep(seconds)
        self.handler.set_rule(deployment, None)
        return f"{deployment} {rule}"

    # ---------------------------------------------------------------- the end

    def windows(self) -> list[Window]:
        """Replicas' liveness, minus the node faults (no lease is judged stolen there)."""
        windows = self.replicas.windows()
        for start, end in self.outages:
            windows = without(windows, start, end)
        return windows

    async def judge(self) -> Report:
        url, prefix = self.cluster.urls, self.replicas.prefix
        await wait_converged(self.cluster.url_list, prefix, timeout=120)
        await wait_all_finished(url, prefix, timeout=120)
        await wait_projections(self._usable(), url, prefix, timeout=60)
        await self.replicas.stop_all()
        return await check_store(url, prefix, handler=self.handler, windows=self.windows(),
                                 lease_seconds=LEASE, grace=30.0, margin=2.0,
                                 skew=CLOCK_STEP + 5)


@contextlib.asynccontextmanager
async def running_soak(workdir: Path, seed: int) -> AsyncIterator[Soak]:
    """The cluster, its proxy and three replicas, all ended afterwards (by PID)."""
    proxy = TcpProxy()
    cluster = partitionable_cluster(workdir / "cluster", proxy, sync_always=True)
    try:
        await asyncio.to_thread(cluster.start, 60.0)
        handler = SqliteRunHandler(workdir / "handler.db", process="soak")
        async with ReplicaSet(url=cluster.urls, prefix=f"SOAK{seed}", handler_db=handler.path,
                              log_dir=workdir / "logs", lease_seconds=LEASE,
                              settings=SETTINGS) as replicas:
            await replicas.add("a", url=cluster.nodes[0].url).start()
            await replicas.spawn("b", "c")
            yield Soak(cluster, proxy, replicas, handler, random.Random(seed),
                       random.Random(seed + 1))
    finally:
        await asyncio.to_thread(cluster.stop)
        proxy.close()


async def soak(minutes: float, seed: int, max_faults: int, workdir: Path) -> int:
    async with running_soak(workdir, seed) as run:
        first = run.replicas.replicas[0]
        for deployment in TICKS:
            await first.send("apply", schedule=schedule(deployment, "* * * * *"))
        for deployment in NOWS:
            await first.send("apply", schedule=schedule(deployment))
        log(f"soak {minutes} min, seed {seed}, at most {max_faults} faults ({workdir})")
        deadline = asyncio.get_running_loop().time() + minutes * 60
        load = asyncio.create_task(run.load())
        await run.faults_until(deadline, max_faults)
        await asyncio.sleep(max(0.0, deadline - asyncio.get_running_loop().time()))
        run.stopping = True
        await load
        log(f"load stopped: {run.asked} Runs asked for now ({run.refused} refused or cut)")
        report = await run.judge()
    print(report.text(), flush=True)
    print(f"soak: runs={report.runs} faults={len(run.faults)} "
          f"violations={len(report.violations)}", flush=True)
    return 0 if report.ok else 1


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.soak",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=3.0, help="fault phase (default 3)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--max-faults", type=int, default=None,
                        help="at most this many faults (default: 6 per minute)")
    parser.add_argument("--keep", type=Path, default=None,
                        help="keep logs and data in this directory (default: a temporary one)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    max_faults = args.max_faults if args.max_faults is not None else int(6 * args.minutes) + 1
    began = time.monotonic()

    def run(workdir: Path) -> Awaitable[int]:
        return soak(args.minutes, args.seed, max_faults, workdir)

    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
        code = asyncio.run(run(args.keep))
    else:
        with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
            code = asyncio.run(run(Path(tmp)))
    print(f"(took {time.monotonic() - began:.0f} s)", file=sys.stderr, flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
