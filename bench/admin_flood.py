"""A due time in the middle of an admin flood starts as late as it would without one.

    .venv/bin/python bench/admin_flood.py                          # 1,000 Schedules, 4 rounds
    .venv/bin/python bench/admin_flood.py --schedules 10000 --rounds 6 --concurrency 2000

One provider in this process (its admin service on, as in production; a ManualClock, so a
due time comes exactly when the bench moves the clock there) holds N ``* * * * *``
Schedules. Each round fires three due times, in an order rotated from round to round:

- ``quiet``: nothing else runs;
- ``admin``: during a flood of the provider's admin service;
- ``stand-in``: during the same flood sent to a stand-in service in another process, which
  answers every request busy at once: the host as busy (the flood's client, the server's
  routing) with the provider left alone. The reference that tells what the admin service
  itself costs the firing (``admin`` against it) from what the flood costs the machine
  (it against ``quiet``).

Each due time's ``start_session`` lateness is printed (the instant the handler was called,
minus the instant the clock was moved; p50/p99/max over the N Runs), with the ratios of the
same round, and their medians over the rounds.

The flood comes from another process (a child mode of this script, as operators' consoles
and scripts are elsewhere): ``--concurrency`` requests in flight at all times, spread evenly
over every read endpoint (``schedules.list``, ``.get``, ``.explain``, ``.load``,
``runs.list``, ``runs.get``, ``cluster.status``, ``health``), each with ``--timeout``; each
answer sends the next request, a busy one after its ``retry_after`` as ``AdminClient`` waits
(``--hammer``: at once). It starts a second before the due time and stops once every Run of
it started. The child counts what came back: results, busy answers (``unavailable`` with
``retry_after``), other errors, timeouts and "no responders"; the bench prints them.

The admin service serves on the provider's own connection here (no login of its own), so
the flood's messages share the socket with the firing's; ``--service-login`` gives it a
connection of its own, as ``ASTRABOX_NATS_SERVICE_USER`` and the shipped
``nats-server.conf`` do.
``--loop-share 0`` lifts the admin service's cap on the event loop (``admin/admission.py``):
what the cap buys. ``--whole-list N`` measures what it costs when nothing floods: the whole
Schedule list of N Schedules read by a plain client, with the cap and without, alternating.

Nothing is asserted; the figures and the ratios are printed (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import statistics
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime, timedelta

import nats
import nats.errors

# Run as `python bench/admin_flood.py`: sys.path[0] is bench/, where firing.py is.
from firing import InstantHandler, apply_all, minute_schedule, pct, poll, settings_for, spread
from nats.aio.msg import Msg

from nats_scheduler import ManualClock, NatsSchedulerProvider
from nats_scheduler.admin.admission import BUSY_MESSAGE, BUSY_RETRY_AFTER, LOOP_BURST
from nats_scheduler.admin.client import AdminClient
from nats_scheduler.admin.service import AdminService
from nats_scheduler.names import SERVICE_NAME
from nats_scheduler.natsserver.process import NatsServer
from nats_scheduler.seam import EnqueueRequest, RunPayload, Schedule, Trigger

PREFIX = "FLOOD"
STANDIN = "STANDIN"
"""The stand-in service's prefix: the flood of the reference goes there."""
START = datetime(2030, 6, 1, 12, 0, 30, tzinfo=UTC)
BOUNDARY_TIMEOUT = 120.0
LEAD = 1.0
"""Seconds the flood runs before the due time."""
KINDS = ("quiet", "stand-in", "admin")
SETTLE = 0.5
"""Seconds without a new request that make the service idle after a flood."""
BUSY = json.dumps({"error": {"code": "unavailable", "message": BUSY_MESSAGE,
                             "retry_after": BUSY_RETRY_AFTER}}).encode()


def read_requests(dep: str, run_id: str) -> list[tuple[str, dict[str, object]]]:
    return [("schedules.list", {}), ("schedules.get", {"deployment_id": dep}),
            ("schedules.explain", {"deployment_id": dep}), ("schedules.load", {}),
            ("runs.list", {"deployment_id": dep}), ("runs.get", {"run_id": run_id}),
            ("cluster.status", {}), ("health", {})]


# ----------------------------------------------------------------------------- children


async def flood_main(url: str, prefix: str, dep: str, run_id: str, concurrency: int,
                     timeout: float, polite: bool) -> None:
    """The flood: keep ``concurrency`` requests in flight until stdin closes; print the
    tally as one JSON line."""
    connections = [await nats.connect(url) for _ in range(4)]
    kinds = read_requests(dep, run_id)
    tally: Counter[str] = Counter()
    stop = asyncio.Event()

    async def worker(n: int) -> None:
        endpoint, body = kinds[n % len(kinds)]
        nc = connections[n % len(connections)]
        data = json.dumps(body).encode()
        subject = f"{prefix}.admin.{endpoint}"
        while not stop.is_set():
            try:
                msg = await nc.request(subject, data, timeout=timeout)
            except nats.errors.NoRespondersError:
                tally["no responders"] += 1
                await asyncio.sleep(0.1)
                continue
            except nats.errors.TimeoutError:
                tally["timeout"] += 1
                continue
            error = json.loads(msg.data).get("error") if msg.data.startswith(b"{") else None
            outcome = ("result" if error is None else
                       "busy" if error.get("retry_after") is not None else "error")
            tally[outcome] += 1
            if outcome == "busy" and polite:
                await asyncio.sleep(error["retry_after"] * random.uniform(0.75, 1.25))

    tasks = [asyncio.create_task(worker(n)) for n in range(concurrency)]
    began = time.monotonic()
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    stop.set()
    await asyncio.wait(tasks, timeout=timeout + 1)
    seconds = time.monotonic() - began
    for nc in connections:
        await nc.close()
    print(json.dumps({"seconds": seconds, "tally": tally}), flush=True)


async def standin_main(url: str) -> None:
    """The stand-in service: every request under ``STANDIN.admin.`` answered busy at once."""
    nc = await nats.connect(url)

    async def answer(msg: Msg) -> None:
        await msg.respond(BUSY)

    await nc.subscribe(f"{STANDIN}.admin.>", queue="standin", cb=answer)
    await nc.flush()
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await nc.close()
    print("{}", flush=True)


class Child:
    """A child process of this script (a flood or the stand-in), stopped by closing stdin."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    @classmethod
    async def start(cls, *argv: str) -> Child:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, __file__, *argv, stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE)
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
        assert line.strip() == b"ready", line
        return cls(proc)

    async def stop(self) -> dict[str, object]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        out = await asyncio.wait_for(self.proc.stdout.read(), 60)
        await self.proc.wait()
        return json.loads(out.decode().strip().splitlines()[-1])  # type: ignore[no-any-return]


# ----------------------------------------------------------------------------- the rounds


async def fire(provider: NatsSchedulerProvider, clock: ManualClock, handler: InstantHandler,
               due: datetime, count: int) -> list[float]:
    """Move the clock to ``due``; the start lateness of its ``count`` Runs (seconds)."""
    origin = time.time()
    clock.set(due)
    done = await poll(lambda: handler.per_due[due.isoformat()] >= count
                      and provider.ledger.unfinished_count() == 0, BOUNDARY_TIMEOUT)
    if not done:
        print(f"  {due:%H:%M}: only {handler.per_due[due.isoformat()]} of {count} started")
    return [wall - origin for due_at, wall in handler.starts.values()
            if due_at == due.timestamp()]


async def settle(service: AdminService) -> float:
    """Wait until the service has answered every request the flood left queued (its count
    of requests received unchanged for half a second); the seconds that took."""
    began = time.monotonic()
    stats_subject = f"$SRV.STATS.{SERVICE_NAME}.{service.service.id}"
    last = -1
    while True:
        msg = await service.nc.request(stats_subject, b"", timeout=30)
        count = sum(e["num_requests"] for e in json.loads(msg.data)["endpoints"])
        if count == last:
            return time.monotonic() - began - SETTLE
        last = count
        await asyncio.sleep(SETTLE)


def _tally(report: dict[str, object]) -> str:
    tally: dict[str, int] = report["tally"]  # type: ignore[assignment]
    seconds: float = report["seconds"]  # type: ignore[assignment]
    total = sum(tally.values())
    return (f"{total:,} answers in {seconds:.1f} s ({total / seconds:,.0f}/s): "
            + ", ".join(f"{k} {v:,}" for k, v in sorted(tally.items())))


def _ratio(a: list[float], b: list[float], q: float) -> float:
    return pct(a, q) / pct(b, q)


async def main(args: argparse.Namespace) -> None:
    clock = ManualClock(START)
    with tempfile.TemporaryDirectory() as tmp, NatsServer(
            tmp, sync_always=args.sync == "always").start() as server:
        login = ({"service_user": "admin-service", "service_password": "bench"}
                 if args.service_login else {})  # the server here takes any login
        provider = NatsSchedulerProvider(
            settings_for(server.url, PREFIX, args.schedules, **login), clock=clock)
        handler = InstantHandler()
        provider.configure()
        await provider.start(handler)
        standin = await Child.start("--standin", server.url)
        service = provider.runtime.admin if provider.runtime else None
        assert isinstance(service, AdminService)
        if args.loop_share is not None:  # 0: no cap (what a share costs the firing)
            service.share.share = args.loop_share or math.inf
        try:
            await apply_all(provider, [minute_schedule(i) for i in range(args.schedules)])
            dep = minute_schedule(0).deployment_id
            run = await provider.enqueue(EnqueueRequest(dep, Trigger.RUN_NOW))
            await poll(lambda: provider.ledger.unfinished_count() == 0, 30)
            print(f"{args.schedules:,} Schedules due every minute, one replica "
                  f"(sync {args.sync}); flood: {args.concurrency:,} requests in flight over "
                  f"8 read endpoints, timeout {args.timeout:g} s, "
                  f"{'at once' if args.hammer else 'after retry_after'} after a busy answer; "
                  f"the admin service's loop share {service.share.share:g}, on "
                  f"{'its own' if service.service.own_connection else 'the provider'} "
                  "connection")
            due = START.replace(second=0) + timedelta(minutes=1)
            rounds: list[dict[str, list[float]]] = []
            kinds = tuple(k for k in KINDS if k in args.kinds.split(","))
            for r in range(args.rounds):
                figures: dict[str, list[float]] = {}
                for kind in kinds[r % len(kinds):] + kinds[:r % len(kinds)]:
                    flood = None
                    # the clock where it stands while the flood runs: the due time LEAD
                    # seconds ahead (the replica sees it coming, as on a real clock)
                    clock.set(due - timedelta(seconds=LEAD))
                    if kind != "quiet":
                        flood = await Child.start(
                            "--flood", server.url, PREFIX if kind == "admin" else STANDIN,
                            dep, run.run_id, str(args.concurrency), str(args.timeout),
                            "hammer" if args.hammer else "polite")
                        await asyncio.sleep(LEAD)  # the flood under way before the due time
                    figures[kind] = await fire(provider, clock, handler, due, args.schedules)
                    print(f"round {r + 1} {due:%H:%M} {kind}: start lateness "
                          f"{spread(figures[kind])}")
                    if flood is not None:
                        print(f"  the flood: {_tally(await flood.stop())}")
                        settled = await settle(service)
                        print(f"  the service idle again {settled:.1f} s after the flood "
                              "stopped")
                    due += timedelta(minutes=1)
                rounds.append(figures)
                if len(figures) < len(KINDS):
                    continue
                print(f"  same round: admin/quiet p50 "
                      f"{_ratio(figures['admin'], figures['quiet'], 50):.2f}x, "
                      f"admin/stand-in p50 "
                      f"{_ratio(figures['admin'], figures['stand-in'], 50):.2f}x, "
                      f"stand-in/quiet p50 "
                      f"{_ratio(figures['stand-in'], figures['quiet'], 50):.2f}x")
            print(f"medians over {len(rounds)} rounds:")
            for kind in kinds:
                print(f"  {kind}: p50 "
                      f"{statistics.median(pct(f[kind], 50) for f in rounds) * 1000:,.0f} ms, "
                      f"p99 {statistics.median(pct(f[kind], 99) for f in rounds) * 1000:,.0f} "
                      "ms")
            for a, b in (("admin", "quiet"), ("admin", "stand-in"), ("stand-in", "quiet")):
                if a not in kinds or b not in kinds:
                    continue
                print(f"  {a}/{b}: p50 "
                      f"{statistics.median(_ratio(f[a], f[b], 50) for f in rounds):.2f}x, "
                      f"p99 {statistics.median(_ratio(f[a], f[b], 99) for f in rounds):.2f}x")
        finally:
            await standin.stop()
            await provider.stop()


async def whole_list(args: argparse.Namespace) -> None:
    """``--whole-list N``: the price of the loop share when nothing floods. N Schedules;
    a plain ``AdminClient`` reads the whole Schedule list (page after page, as the console
    does), alternately with the shipped share and with it lifted, ``--rounds`` times each."""
    clock = ManualClock(START)
    with tempfile.TemporaryDirectory() as tmp, NatsServer(tmp).start() as server:
        provider = NatsSchedulerProvider(settings_for(server.url, PREFIX, args.whole_list),
                                         clock=clock)
        provider.configure()
        await provider.start(InstantHandler())
        nc = await nats.connect(server.url)
        try:
            await provider.reconcile([Schedule(f"d-{i:06d}", f"daily {i}",
                                               f"{i % 60} {i % 24} * * *", "UTC", True,
                                               RunPayload("agent", "report"), 1)
                                      for i in range(args.whole_list)])
            service = provider.runtime.admin if provider.runtime else None
            assert isinstance(service, AdminService)
            shipped = service.share.share
            client = AdminClient(nc, PREFIX, timeout=30.0)
            times: dict[str, list[float]] = {"shipped share": [], "no share": []}
            for _ in range(args.rounds):
                for label, share in (("shipped share", shipped), ("no share", math.inf)):
                    service.share.share = share
                    await asyncio.sleep(LOOP_BURST / shipped)  # the bucket drained
                    began, pages = time.perf_counter(), 0
                    async for _page in client.schedule_pages():
                        pages += 1
                    times[label].append(time.perf_counter() - began)
            print(f"the whole Schedule list of {args.whole_list:,} Schedules ({pages} pages), "
                  f"a plain client, {args.rounds} times each, alternating:")
            for label, values in times.items():
                print(f"  {label}: median {statistics.median(values):.2f} s "
                      f"(min {min(values):.2f}, max {max(values):.2f})")
        finally:
            await nc.close()
            await provider.stop()


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--schedules", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=2000)
    parser.add_argument("--timeout", type=float, default=5.0)
    parser.add_argument("--sync", choices=("default", "always"), default="always")
    parser.add_argument("--loop-share", type=float, default=None,
                        help="the admin service's share of the event loop (default: the "
                             "shipped LOOP_SHARE; 0: no cap)")
    parser.add_argument("--whole-list", type=int, default=0, metavar="N",
                        help="instead: the whole Schedule list of N Schedules with and without "
                             "the loop share, nothing flooding (what the share costs)")
    parser.add_argument("--service-login", action="store_true",
                        help="the admin service logs in on a connection of its own, as with "
                             "ASTRABOX_NATS_SERVICE_USER and the shipped nats-server.conf "
                             "(default: it shares the provider's connection)")
    parser.add_argument("--kinds", default=",".join(KINDS),
                        help="which due times each round fires (default: all three)")
    parser.add_argument("--hammer", action="store_true",
                        help="the flood asks again at once after a busy answer (default: "
                             "after its retry_after, as AdminClient does)")
    return parser.parse_args(argv)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--flood":
        url, prefix, dep, run_id, concurrency, timeout, polite = sys.argv[2:9]
        asyncio.run(flood_main(url, prefix, dep, run_id, int(concurrency), float(timeout),
                               polite == "polite"))
    elif len(sys.argv) > 1 and sys.argv[1] == "--standin":
        asyncio.run(standin_main(sys.argv[2]))
    else:
        options = parse()
        asyncio.run(whole_list(options) if options.whole_list else main(options))
