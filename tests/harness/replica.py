"""One provider replica as its own OS process, driven by JSON lines (tests, benchmarks, demo).

``python -m tests.harness.replica --url URL --prefix P --handler-db FILE
[--identity ID] [--lease-seconds S] [--settings JSON] [--clock-offset SECONDS]``

It starts one :class:`~nats_scheduler.NatsSchedulerProvider` whose handler is a
:class:`~tests.harness.shared_handler.SqliteRunHandler` on ``FILE``, so every replica
of a test shares AstraBox's idempotency and call records. It applies nothing by itself: the
ticker fires whatever Schedules the store holds, and everything else is a command.

Why a process and JSON lines: the guarantees under test (another replica firing the same due
time, a Run resumed after its process died, a paused process that lost its lease) only mean
something across real OS processes that can be SIGKILLed and SIGSTOPped. Stdin/stdout needs
no extra port or broker, and end-of-file on stdin stops the replica, so a test that dies
never leaves one behind.

Protocol. Each stdin line is ``{"id": N, "op": ..., ...}``; each stdout line is JSON: the
answer ``{"id": N, "ok": true, ...}`` / ``{"id": N, "ok": false, "error": ...}``, or an
event ``{"event": "ready" | "stopped", ...}``. Commands run concurrently. Operations:

- ``apply`` ``schedule={deployment_id, name, cron, timezone, enabled, payload: {target,
  prompt}, version}`` -> ``returned_at`` (epoch seconds when ``apply`` returned)
- ``delete`` ``deployment``
- ``fire`` ``deployment, dues=[iso, ...], repeat=1, start_at=epoch|None`` -> ``runs`` (Run
  ID or null per call, in order); all calls run concurrently, from ``start_at`` on
- ``fire_loop`` ``deployment, after=iso, concurrency=4``: keep firing successive due times of
  the Schedule (from ``after``) until ``stop_loop``; ``status`` shows its figures
- ``stop_loop`` -> the loop's figures
- ``enqueue`` ``deployment, request_id=None`` -> ``run``
- ``create_unclaimed`` ``deployment, request_id``: store a Run now Run WITHOUT dispatching it,
  as a process that dies right after the create would leave it -> ``run``
- ``get_run`` ``run_id`` -> ``run``; ``list_runs`` ``deployment, limit=1000`` -> ``runs``
- ``status`` -> identity, Runs in flight, the due times its ticker fired, fire-loop figures,
  the Schedules planned and the replicas it counts live
- ``step_clock`` ``seconds``: step this replica's clock (an :class:`~.clocks.OffsetClock`,
  ``--clock-offset`` at start) forward or back -> ``offset`` (seconds)
- ``stall`` ``seconds``: block the event loop with ``time.sleep`` (a GC pause, a CPU-starved
  host): nothing of the provider runs meanwhile -> answers afterwards
- ``followers`` -> each projection follower's stream, applied sequence and skipped events
- ``stop`` -> stops the provider (drain), answers, prints ``stopped`` and exits 0
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import msgspec

from nats_scheduler.core import calendar, runcore
from nats_scheduler.names import requested_create_msg_id, requested_run_id
from nats_scheduler.provider import NatsSchedulerProvider
from nats_scheduler.runtime.ticker import DueTime
from nats_scheduler.seam import EnqueueRequest, Run, RunPayload, Schedule, Trigger
from nats_scheduler.settings import NatsSettings

from .clocks import OffsetClock
from .shared_handler import SqliteRunHandler

log = logging.getLogger("nats_scheduler.replica")


def run_to_json(run: Run | None) -> dict[str, Any] | None:
    """A Run as JSON builtins (datetimes as ISO strings, enums as their values)."""
    if run is None:
        return None
    out = msgspec.to_builtins(run)
    assert isinstance(out, dict)
    return out


def schedule_from_json(data: dict[str, Any]) -> Schedule:
    payload = data.get("payload") or {"target": "t", "prompt": "p"}
    return Schedule(
        deployment_id=data["deployment_id"], name=data.get("name", data["deployment_id"]),
        cron=data["cron"], timezone=data.get("timezone", "UTC"),
        enabled=bool(data.get("enabled", True)),
        payload=RunPayload(payload["target"], payload["prompt"]),
        version=int(data.get("version", 0)),
    )


def _parse_settings(args: argparse.Namespace) -> NatsSettings:
    extra = json.loads(args.settings) if args.settings else {}
    base = dict(url=args.url, prefix=args.prefix, identity=args.identity)
    if args.lease_seconds is not None:
        base["lease_seconds"] = args.lease_seconds
    return NatsSettings(**{**base, **extra}).validated()


@dataclass
class FireLoop:
    """Figures of a running ``fire_loop``: how many fires, and when the last one started."""

    attempts: int = 0
    stored: int = 0
    inactive: int = 0
    errors: int = 0
    last_started_at: float = 0.0
    last_stored_at: float = 0.0
    stopped: bool = False
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def figures(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in (
            "attempts", "stored", "inactive", "errors", "last_started_at", "last_stored_at")}


class ReplicaProvider(NatsSchedulerProvider):
    """The provider, noting every due time its ticker fires.

    A test must see that ALL replicas fired a due time, not only the one whose Run won: the
    provider's ``fire_observer`` is told of each due time the ticker fires. The replica's own
    ``fire`` commands call :meth:`fire_unrecorded` (``fire_due``), which the ticker does not
    see, so they are not mistaken for ticker fires.
    """

    def __init__(self, settings: NatsSettings, clock: OffsetClock | None = None) -> None:
        self.offset_clock = clock or OffsetClock()
        self.ticker_fires: list[tuple[str, str]] = []
        super().__init__(settings, clock=self.offset_clock, fire_observer=self._note_fires)

    def _note_fires(self, due_times: Sequence[DueTime]) -> None:
        self.ticker_fires.extend((dep, due.isoformat()) for dep, due in due_times)

    async def fire_unrecorded(self, deployment_id: str, due_at: datetime) -> Run | None:
        """``fire_due`` as a command, not noted as a ticker fire."""
        return await self.fire_due(deployment_id, due_at)


def _server_offset(provider: ReplicaProvider) -> float | None:
    """The replica's clock minus the store's, as its runtime estimates it (None: unknown)."""
    runtime = provider.runtime
    offset = None if runtime is None else runtime.server_offset()
    return None if offset is None else offset[0]


class Replica:
    """The command interpreter around one started provider."""

    def __init__(self, provider: ReplicaProvider) -> None:
        self.provider = provider
        self.loop: FireLoop | None = None
        self._stopping = asyncio.Event()

    # ------------------------------------------------------------------ dispatch of commands

    async def handle(self, command: dict[str, Any]) -> None:
        ident = command.get("id")
        op = str(command.get("op", ""))
        method = getattr(self, f"op_{op}", None)
        try:
            if method is None:
                raise ValueError(f"unknown op {op!r}")
            result = await method(command)
            emit({"id": ident, "ok": True, **(result or {})})
        except Exception as exc:
            log.warning("command %s failed", op, exc_info=True)
            emit({"id": ident, "ok": False, "error": f"{type(exc).__name__}: {exc}"})

    async def op_apply(self, cmd: dict[str, Any]) -> dict[str, Any]:
        await self.provider.apply(schedule_from_json(cmd["schedule"]))
        return {"returned_at": time.time()}

    async def op_delete(self, cmd: dict[str, Any]) -> dict[str, Any]:
        await self.provider.delete(cmd["deployment"])
        return {"returned_at": time.time()}

    async def op_fire(self, cmd: dict[str, Any]) -> dict[str, Any]:
        start_at = cmd.get("start_at")
        if start_at is not None:
            await asyncio.sleep(max(0.0, float(start_at) - time.time()))
        dues = [datetime.fromisoformat(d) for d in cmd["dues"]]
        repeat = int(cmd.get("repeat", 1))
        calls = [self.provider.fire_unrecorded(cmd["deployment"], due) for due in dues
                 for _ in range(repeat)]
        runs = await asyncio.gather(*calls)
        return {"runs": [None if r is None else r.run_id for r in runs]}

    async def op_fire_loop(self, cmd: dict[str, Any]) -> dict[str, Any]:
        if self.loop is not None:
            raise ValueError("a fire loop is already running")
        deployment = cmd["deployment"]
        runtime = self.provider.runtime
        assert runtime is not None
        # as stored (the leader's word): this replica's table may not have followed a change
        # another replica made a moment ago
        record = self.provider.schedules.get(deployment) or await runtime.schedules.read(
            deployment)
        if record is None:
            raise ValueError(f"unknown deployment {deployment!r}")
        dues = _due_iterator(record.cron, record.timezone,
                             datetime.fromisoformat(cmd["after"]))
        loop = self.loop = FireLoop()
        for _ in range(int(cmd.get("concurrency", 4))):
            loop.tasks.append(asyncio.create_task(self._fire_worker(loop, deployment, dues)))
        return {}

    async def _fire_worker(self, loop: FireLoop, deployment: str, dues: Any) -> None:
        # The flag, not only cancel(): on Python 3.11 a cancel that lands as an inner
        # asyncio.wait_for completes can be swallowed, and the worker would go on for ever.
        while not loop.stopped:
            due = next(dues)
            loop.attempts += 1
            loop.last_started_at = time.time()
            try:
                run = await self.provider.fire_unrecorded(deployment, due)
            except Exception:
                loop.errors += 1
                log.warning("fire in loop failed", exc_info=True)
                await asyncio.sleep(0.05)
                continue
            if run is None:
                loop.inactive += 1
            else:
                loop.stored += 1
                loop.last_stored_at = time.time()

    async def op_stop_loop(self, _cmd: dict[str, Any]) -> dict[str, Any]:
        loop, self.loop = self.loop, None
        if loop is None:
            return {}
        loop.stopped = True
        for task in loop.tasks:
            task.cancel()
        await asyncio.wait(loop.tasks, timeout=10.0)
        return loop.figures()

    async def op_enqueue(self, cmd: dict[str, Any]) -> dict[str, Any]:
        run = await self.provider.enqueue(EnqueueRequest(
            cmd["deployment"], Trigger.RUN_NOW, request_id=cmd.get("request_id")))
        return {"run": run_to_json(run)}

    async def op_create_unclaimed(self, cmd: dict[str, Any]) -> dict[str, Any]:
        """Store a Run as ``enqueue`` does, but never hand it to this process's dispatcher.

        Written through a :class:`RunLog` of its own over the provider's public ``store`` and
        ``ledger`` (the same create ``enqueue`` sends), so the dispatcher never hears of it.
        """
        provider = self.provider
        deployment = cmd["deployment"]
        record = provider.schedules.get(deployment)
        if record is None:
            raise ValueError(f"unknown deployment {deployment!r}")
        run_id = requested_run_id(deployment, cmd["request_id"])
        event = runcore.create(
            run_id=run_id, deployment_id=deployment, trigger=Trigger.RUN_NOW, due_at=None,
            payload=record.payload, now=datetime.now(UTC), actor=provider.identity,
        )
        # As enqueue does: announce (history entry, open key: this process's lease), then
        # the create; only the hand-over to this process's dispatcher is left out.
        announced = await provider.runlog.announce(event.run)
        event = runcore.indexed(event, announced.index_seq, announced.created_at)
        _, stored, _ = await provider.runlog.create(
            event, msg_id=requested_create_msg_id(run_id))
        return {"run": run_to_json(stored.to_run())}

    async def op_list_runs(self, cmd: dict[str, Any]) -> dict[str, Any]:
        runs = await self.provider.list_runs(cmd["deployment"], limit=int(cmd.get("limit", 1000)))
        return {"runs": [run_to_json(r) for r in runs]}

    async def op_get_run(self, cmd: dict[str, Any]) -> dict[str, Any]:
        return {"run": run_to_json(await self.provider.get_run(cmd["run_id"]))}

    async def op_status(self, _cmd: dict[str, Any]) -> dict[str, Any]:
        dispatcher, ticker = self.provider.dispatcher, self.provider.ticker
        runtime = self.provider.runtime
        return {
            "identity": self.provider.identity,
            "in_flight": dispatcher.in_flight if dispatcher else [],
            "fired": ticker.fired if ticker else 0,
            "left_to_owner": ticker.left_to_owner if ticker else 0,
            "planned": ticker.planned if ticker else 0,
            "live_replicas": runtime.live_replicas() if runtime else 0,
            "ticker_fires": self.provider.ticker_fires,
            "stale_fires": self.provider.stale_fires,
            "loop": self.loop.figures() if self.loop else None,
            "server_offset": _server_offset(self.provider),
        }

    async def op_step_clock(self, cmd: dict[str, Any]) -> dict[str, Any]:
        offset = self.provider.offset_clock.step(float(cmd["seconds"]))
        return {"offset": offset.total_seconds()}

    async def op_stall(self, cmd: dict[str, Any]) -> dict[str, Any]:
        began = time.time()
        time.sleep(float(cmd["seconds"]))  # noqa: ASYNC251 - on purpose: the loop stops
        return {"began": began, "ended": time.time()}

    async def op_followers(self, _cmd: dict[str, Any]) -> dict[str, Any]:
        runtime = self.provider.runtime
        followers = runtime.followers if runtime is not None else []
        return {"followers": [
            {"stream": f.stream, "applied_seq": f.applied_seq, "poisoned": f.poisoned,
             "last_poison": f.last_poison} for f in followers]}

    async def op_stop(self, _cmd: dict[str, Any]) -> dict[str, Any]:
        await self.op_stop_loop({})
        await self.provider.stop()
        self._stopping.set()
        return {}

    # ------------------------------------------------------------------ main loop

    async def serve(self) -> None:
        """Read commands until ``stop`` or end of input (the parent went away)."""
        reader = await _stdin_reader()
        pending: set[asyncio.Task[None]] = set()
        stop_wait = asyncio.create_task(self._stopping.wait())
        while not self._stopping.is_set():
            read = asyncio.create_task(reader.readline())
            await asyncio.wait({read, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
            if not read.done():
                read.cancel()
                break
            line = read.result()
            if not line:
                break  # EOF: the test process is gone; never outlive it
            try:
                command = json.loads(line)
            except json.JSONDecodeError:
                emit({"ok": False, "error": f"not JSON: {line[:80]!r}"})
                continue
            task = asyncio.create_task(self.handle(command))
            pending.add(task)
            task.add_done_callback(pending.discard)
        if pending:
            await asyncio.wait(pending, timeout=15.0)
        if not self._stopping.is_set():
            await self.op_stop_loop({})
            await self.provider.stop()


def _due_iterator(cron: str, timezone: str, after: datetime) -> Any:
    due = after
    while True:
        nxt = calendar.next_due(cron, timezone, due)
        if nxt is None:
            return
        due = nxt
        yield due


async def _stdin_reader() -> asyncio.StreamReader:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 20)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    return reader


def emit(message: dict[str, Any]) -> None:
    """One JSON line on stdout, flushed at once (the parent reads line by line)."""
    sys.stdout.write(json.dumps(message, default=str) + "\n")
    sys.stdout.flush()


async def amain(args: argparse.Namespace) -> int:
    settings = _parse_settings(args)
    identity = settings.identity or f"replica-{os.getpid()}"
    settings = settings.with_(identity=identity)
    handler = SqliteRunHandler(args.handler_db, process=identity)
    provider = ReplicaProvider(settings, OffsetClock(args.clock_offset))
    provider.configure(repository_backend=None)
    await provider.start(handler)
    emit({"event": "ready", "identity": identity, "pid": os.getpid(), "at": time.time()})
    await Replica(provider).serve()
    emit({"event": "stopped", "identity": identity, "at": time.time()})
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.harness.replica",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="server URLs, comma-separated")
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--handler-db", required=True, help="the shared SQLite handler file")
    parser.add_argument("--identity", default=None, help="lease holder name (default: pid)")
    parser.add_argument("--lease-seconds", type=float, default=None)
    parser.add_argument("--settings", default=None,
                        help="JSON object of further NatsSettings fields")
    parser.add_argument("--clock-offset", type=float, default=0.0,
                        help="seconds this replica's clock is ahead (negative: behind)")
    parser.add_argument("--log-level", default="WARNING")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return asyncio.run(amain(args))


if __name__ == "__main__":
    sys.exit(main())
