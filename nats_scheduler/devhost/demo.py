"""``nats-scheduler demo``: a whole scheduler on one machine, from a fresh clone.

What runs (all data under ``.demo/`` in the current directory):

- a nats-server with JetStream (``.demo/nats``), on port 4222 when free;
- two dev-host replicas (``python -m nats_scheduler.devhost run``, logs in
  ``.demo/replica-N.log``), each running the provider and the admin service, sharing the
  Deployment database ``.demo/astrabox.db``;
- sample Schedules in several time zones, one of them every minute, so a Run is dispatched
  within a minute of starting;
- the console (``admin_tui``) on the admin service; ``--headless`` (or no terminal) prints
  one line per Run state change instead. The command line hands the console in
  (:attr:`DemoOptions.console`): the dev host does not import the console, which is a
  client of the admin service like any other.

Ctrl+C or SIGTERM stops everything: the replicas by PID (SIGTERM, then SIGKILL after a
grace period), then the server. The replicas run in their own session (so Ctrl+C reaches
only the demo, which stops them in order) and also stop by themselves if the demo process
disappears (``--exit-with-parent``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TextIO

from ..admin.api import AdminError
from ..admin.client import AdminClient
from ..core.events import RunEvent
from ..jetstream.connection import connect
from ..natsserver.process import NatsServer
from ..seam import RunState, SchedulerError
from ..settings import NatsSettings
from .records import DeploymentStore

SAMPLES: tuple[dict[str, Any], ...] = (
    dict(deployment_id="heartbeat", name="Heartbeat", cron="* * * * *", timezone="UTC",
         prompt="Say hello and tell the time."),
    dict(deployment_id="berlin-digest", name="Berlin digest", cron="*/2 * * * *",
         timezone="Europe/Berlin", prompt="Summarise the last two minutes."),
    dict(deployment_id="kolkata-quarter", name="Kolkata quarter-hour report",
         cron="*/15 * * * *", timezone="Asia/Kolkata", prompt="Quarter-hour report."),
    dict(deployment_id="tokyo-hourly", name="Tokyo hourly summary", cron="5 * * * *",
         timezone="Asia/Tokyo", prompt="Hourly summary."),
    dict(deployment_id="new-york-briefing", name="New York weekday briefing",
         cron="0 9 * * MON-FRI", timezone="America/New_York", prompt="Morning briefing."),
    dict(deployment_id="sydney-review", name="Sydney weekly review", cron="30 17 * * FRI",
         timezone="Australia/Sydney", prompt="Weekly review.", enabled=False),
)
"""Sample Deployments: several zones (one with a half-hour offset), one every minute, one
disabled."""

STOP_GRACE_SECONDS = 5.0
"""A replica drains for 3 s (ASTRABOX_NATS_DRAIN_SECONDS below) and stops its admin service
within 2 s; past this it is killed, so Ctrl+C ends the demo well within 10 s even under load."""
READY_TIMEOUT_SECONDS = 45.0


class DemoConsole(Protocol):
    """The console the demo shows on its admin client (``admin_tui``'s AstraboxConsole)."""

    def connection_lost(self, text: str) -> None: ...

    def connection_restored(self) -> None: ...

    def exit(self) -> None: ...

    async def run_async(self) -> object: ...


ConsoleFactory = Callable[[AdminClient], DemoConsole]
"""Builds the console on the demo's admin client, once the replicas are up."""


@dataclass
class DemoOptions:
    root: Path = Path(".demo")
    console: ConsoleFactory | None = None
    """None: headless, one line per Run state change instead of the console."""
    seconds: float | None = None
    replicas: int = 2
    port: int | None = None
    """None: 4222 when free (the command line's default address), else any free port."""
    prefix: str = "SCHED"
    out: TextIO = field(default_factory=lambda: sys.stdout)


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def seed(store: DeploymentStore) -> list[str]:
    """Create the sample Deployments missing from ``store``; returns the IDs created."""
    created = []
    for sample in SAMPLES:
        if store.get(sample["deployment_id"]) is None:
            fields = dict(sample)
            store.create(fields.pop("deployment_id"), target="demo", **fields)
            created.append(sample["deployment_id"])
    return created


def run_line(event: RunEvent) -> str:
    """One line per Run state change (includes the word ``dispatched`` when it is)."""
    run = event.run
    parts = [event.at.strftime("%H:%M:%SZ"), f"{run.deployment_id:<18}", f"{run.trigger:<8}",
             f"{run.state.value:<11}", f"run {run.run_id}"]
    if run.state == RunState.DISPATCHED:
        parts.append(f"session {run.session_id} turn {run.turn_id}")
    elif run.state == RunState.FAILED:
        parts.append(f"error: {run.error}")
    elif run.error:
        parts.append(f"retrying: {run.error}")
    parts.append(f"[{event.actor}]")
    return "  ".join(parts)


class Demo:
    """The demo's processes: start, watch, stop."""

    def __init__(self, options: DemoOptions) -> None:
        self.options = options
        self.root = options.root.resolve()
        port = options.port
        if port is None and _port_free(4222):
            port = 4222
        http_port = 8222 if port == 4222 and _port_free(8222) else None
        self.server = NatsServer(self.root / "nats", port=port, http_port=http_port,
                                 server_name="astrabox-demo")
        self.db = self.root / "astrabox.db"
        self.replicas: list[subprocess.Popen[bytes]] = []

    def say(self, text: str) -> None:
        print(text, file=self.options.out, flush=True)

    def replica_env(self, index: int) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ASTRABOX_NATS_")}
        env.update({
            "ASTRABOX_SCHEDULER_PROVIDER": "nats",
            "ASTRABOX_NATS_URL": self.server.url,
            "ASTRABOX_NATS_PREFIX": self.options.prefix,
            "ASTRABOX_NATS_IDENTITY": f"demo-replica-{index}",
            "ASTRABOX_NATS_DRAIN_SECONDS": "3",
        })
        return env

    def spawn_replicas(self) -> None:
        for index in range(1, self.options.replicas + 1):
            log = open(self.root / f"replica-{index}.log", "ab")  # noqa: SIM115 - child owns it
            with log:
                self.replicas.append(subprocess.Popen(
                    [sys.executable, "-m", "nats_scheduler.devhost", "run", "--db",
                     str(self.db), "--exit-with-parent", str(os.getpid())],
                    env=self.replica_env(index), stdin=subprocess.DEVNULL, stdout=log,
                    stderr=subprocess.STDOUT, start_new_session=True, close_fds=True))

    def replica_failure(self) -> str | None:
        for index, proc in enumerate(self.replicas, 1):
            if proc.poll() is not None:
                tail = (self.root / f"replica-{index}.log").read_text(errors="replace")
                return (f"replica {index} exited with code {proc.returncode}; log tail:\n"
                        + "\n".join(tail.splitlines()[-15:]))
        return None

    def stop_replicas(self) -> None:
        """SIGTERM every replica (by PID), wait, SIGKILL what is left."""
        for proc in self.replicas:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
        for proc in self.replicas:
            try:
                proc.wait(timeout=STOP_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)

    async def wait_ready(self, client: AdminClient) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + READY_TIMEOUT_SECONDS
        while True:
            failure = self.replica_failure()
            if failure:
                raise RuntimeError(failure)
            with contextlib.suppress(AdminError):
                status = await client.cluster_status()
                if sum(r.answered for r in status.replicas) >= self.options.replicas:
                    return
            if loop.time() > deadline:
                raise RuntimeError(
                    f"the replicas did not come up within {READY_TIMEOUT_SECONDS:g} s; "
                    f"see {self.root}/replica-*.log")
            await asyncio.sleep(0.2)  # poll interval

    def banner(self, created: list[str]) -> None:
        url = self.server.url
        env = "" if url.endswith(":4222") else f"ASTRABOX_NATS_URL={url} "
        self.say(f"demo ready: nats-server at {url} (data in {self.server.store_dir}), "
                 f"{len(self.replicas)} scheduler replicas, "
                 f"{len(SAMPLES)} sample schedules ({len(created)} new)")
        pids = ", ".join(f"replica-{i} pid {p.pid}" for i, p in enumerate(self.replicas, 1))
        self.say(f"processes: nats-server pid {self.server.pid}, {pids} "
                 f"(logs in {self.root})")
        self.say("try in another terminal:")
        for command in ("schedules", "runs heartbeat", "run-now heartbeat --reason demo",
                        "status", "events --follow"):
            self.say(f"  {env}nats-scheduler {command}")
        self.say(f"  nats-scheduler devhost --db {self.db} list")


async def _print_runs(client: AdminClient, out: TextIO) -> None:
    seen: dict[str, RunState] = {}
    async for event in client.events(types={"run"}, history=0):
        if not isinstance(event, RunEvent) or seen.get(event.run.run_id) == event.run.state:
            continue
        seen[event.run.run_id] = event.run.state
        print(run_line(event), file=out, flush=True)


async def _until(stop: asyncio.Event, seconds: float | None) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)


async def _show(demo: Demo, client: AdminClient, app: DemoConsole | None,
                stop: asyncio.Event) -> None:
    """Headless: print Runs until stopped. Console: run it until the operator quits."""
    options = demo.options
    if app is None:
        demo.say("Runs (one line per state change; Ctrl+C to stop):")
        printer = asyncio.create_task(_print_runs(client, options.out))
        try:
            await _until(stop, options.seconds)
        finally:
            printer.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await printer
        return

    async def close_when_stopped() -> None:
        await _until(stop, options.seconds)
        app.exit()

    closer = asyncio.create_task(close_when_stopped())
    try:
        await app.run_async()
    finally:
        closer.cancel()


async def run_demo(options: DemoOptions) -> int:
    """Start everything, show Runs, stop everything. Returns the exit code."""
    demo = Demo(options)
    demo.root.mkdir(parents=True, exist_ok=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await asyncio.to_thread(demo.server.start)
        created = seed(DeploymentStore(demo.db))
        demo.spawn_replicas()
        settings = NatsSettings(url=demo.server.url, prefix=options.prefix).validated()
        console: list[DemoConsole] = []

        async def lost() -> None:
            if console:
                console[0].connection_lost("lost the demo's server; reconnecting ...")

        async def back() -> None:
            if console:
                console[0].connection_restored()

        nc = await connect(settings, "nats-scheduler-demo", disconnected_cb=lost,
                           reconnected_cb=back)
        try:
            client = AdminClient(nc, options.prefix)
            await demo.wait_ready(client)
            demo.banner(created)
            if options.console is not None:
                console.append(options.console(client))
            await _show(demo, client, console[0] if console else None, stop)
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(nc.close(), 2.0)
    except (RuntimeError, SchedulerError) as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 1
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        demo.say("stopping the demo ...")
        await asyncio.to_thread(demo.stop_replicas)
        await asyncio.to_thread(demo.server.stop)
        demo.say("demo stopped: replicas and nats-server are down")
    return 0


def interactive() -> bool:
    """Whether a console can be shown (both ends of the terminal are one)."""
    return sys.stdin.isatty() and sys.stdout.isatty()
