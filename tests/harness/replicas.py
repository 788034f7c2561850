"""Spawn, drive, kill, pause and resume provider replicas (``tests.harness.replica``).

:class:`ReplicaProcess` is one replica OS process: ``send`` a command and await its answer,
``wait_for`` an event line, and the signals the fault tests need (``kill`` = SIGKILL,
``pause``/``resume`` = SIGSTOP/SIGCONT), always by the process's own PID. It also keeps the
windows in which the process was running and responsive (from ``ready`` to a kill, a pause,
a stall or its exit), in the test's wall time: the invariant checker's liveness windows
(:meth:`ReplicaSet.windows`).
:class:`ReplicaSet` spawns several and, on exit, stops every one still running (gracefully,
then by SIGKILL), even when the test failed: a replica never outlives its test. A replica
also exits by itself when its stdin closes, which covers a test process that was killed.

Each replica's stderr goes to ``<log_dir>/<identity>.log`` (appended across restarts) so a
failing test can show :meth:`ReplicaProcess.log_tail`.

A replica runs as ``python -m tests.harness.replica`` with the repository root as its working
directory: ``-m`` puts that directory first on the child's ``sys.path``, which is how the
child finds ``tests.harness`` (not shipped) next to the installed ``nats_scheduler``, whatever
the parent's working directory or ``sys.path``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self

from nats_scheduler.admin.invariants import Window

__all__ = ["REPO_ROOT", "ReplicaError", "ReplicaProcess", "ReplicaSet"]

REPO_ROOT = Path(__file__).resolve().parents[2]
"""The checkout this harness lives in: the replicas' working directory."""

Message = dict[str, Any]


def _append_log(path: Path) -> IO[bytes]:
    """The replica's stderr file (opened once per spawn; the child keeps its own handle)."""
    return path.open("ab")


class ReplicaError(RuntimeError):
    """A replica answered a command with an error, died, or did not answer in time."""


class ReplicaProcess:
    """One ``python -m tests.harness.replica`` process."""

    def __init__(
        self,
        *,
        url: str,
        prefix: str,
        handler_db: str | os.PathLike[str],
        identity: str,
        log_dir: str | os.PathLike[str],
        lease_seconds: float | None = None,
        settings: Mapping[str, object] | None = None,
        log_level: str = "WARNING",
        clock_offset: float = 0.0,
    ) -> None:
        self.url = url
        self.prefix = prefix
        self.handler_db = Path(handler_db).resolve()  # the child runs in REPO_ROOT
        self.identity = identity
        self.log_path = Path(log_dir) / f"{identity}.log"
        self.lease_seconds = lease_seconds
        self.settings = dict(settings or {})
        self.log_level = log_level
        self.clock_offset = clock_offset
        self._spans: list[tuple[datetime, datetime | None]] = []
        self._proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self._answers: dict[int, asyncio.Future[Message]] = {}
        self._ids = itertools.count(1)
        self.events: list[Message] = []
        self._changed = asyncio.Event()
        self.paused = False

    # ------------------------------------------------------------------ lifecycle

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "tests.harness.replica", "--url", self.url,
               "--prefix", self.prefix, "--handler-db", str(self.handler_db),
               "--identity", self.identity, "--log-level", self.log_level]
        if self.lease_seconds is not None:
            cmd += ["--lease-seconds", str(self.lease_seconds)]
        if self.settings:
            cmd += ["--settings", json.dumps(self.settings)]
        if self.clock_offset:
            cmd += ["--clock-offset", str(self.clock_offset)]
        return cmd

    async def start(self, timeout: float = 30.0) -> Self:
        """Spawn the process and wait for its ``ready`` line."""
        if self.running:
            raise ReplicaError(f"replica {self.identity} is already running")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.events = []
        with _append_log(self.log_path) as log:
            self._proc = await asyncio.create_subprocess_exec(
                *self.command(), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=log, limit=1 << 22, cwd=REPO_ROOT,
            )
        self.paused = False
        self._reader = asyncio.create_task(self._read(self._proc))
        try:
            await self.wait_for(lambda m: m.get("event") == "ready", timeout)
        except BaseException:
            self.kill()
            raise
        self._open()
        return self

    # ------------------------------------------------------------------ liveness windows

    def _open(self) -> None:
        if not self._spans or self._spans[-1][1] is not None:
            self._spans.append((datetime.now(UTC), None))

    def _close(self, at: datetime | None = None) -> None:
        if self._spans and self._spans[-1][1] is None:
            self._spans[-1] = (self._spans[-1][0], at or datetime.now(UTC))

    def windows(self) -> list[Window]:
        """When this replica was running and responsive (an open window ends now)."""
        now = datetime.now(UTC)
        return [Window(start, end or now, self.identity) for start, end in self._spans]

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.returncode is None

    @property
    def returncode(self) -> int | None:
        return None if self._proc is None else self._proc.returncode

    async def _read(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        while True:
            line = await proc.stdout.readline()
            if not line:
                break
            try:
                message = json.loads(line)
            except json.JSONDecodeError:
                continue
            ident = message.get("id")
            future = self._answers.pop(ident, None) if ident is not None else None
            if future is not None and not future.done():
                future.set_result(message)
            else:
                self.events.append(message)
            self._changed.set()
        await proc.wait()
        self._close()
        for future in self._answers.values():
            if not future.done():
                future.set_exception(ReplicaError(
                    f"replica {self.identity} exited ({proc.returncode}) before answering"))
        self._answers.clear()
        self._changed.set()

    # ------------------------------------------------------------------ commands

    async def send(self, op: str, *, timeout: float = 30.0, check: bool = True,
                   **fields: Any) -> Message:
        """Send one command and await its answer; ReplicaError on ``ok: false`` if ``check``."""
        proc = self._proc
        if proc is None or proc.returncode is not None or proc.stdin is None:
            code = None if proc is None else proc.returncode
            raise ReplicaError(f"replica {self.identity} is not running (exit code {code}); "
                               f"log tail:\n{self.log_tail()}")
        ident = next(self._ids)
        future: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        # The reader may fail this future after we stopped waiting (a pipe broken by a
        # kill): mark its exception retrieved so it never surfaces as an unhandled error.
        future.add_done_callback(_retrieve)
        self._answers[ident] = future
        try:
            proc.stdin.write((json.dumps({"id": ident, "op": op, **fields}) + "\n").encode())
            await proc.stdin.drain()
            answer = await asyncio.wait_for(future, timeout)
        except TimeoutError:
            raise ReplicaError(
                f"replica {self.identity} did not answer {op} in {timeout} s") from None
        finally:
            self._answers.pop(ident, None)
        if check and not answer.get("ok"):
            raise ReplicaError(f"replica {self.identity}: {op} failed: {answer.get('error')}")
        return answer

    async def wait_for(self, predicate: Callable[[Message], bool], timeout: float) -> Message:
        """The first event line (not an answer) matching ``predicate``, waiting up to timeout."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        seen = 0
        while True:
            self._changed.clear()
            for message in self.events[seen:]:
                if predicate(message):
                    return message
            seen = len(self.events)
            if not self.running and self._reader is not None and self._reader.done():
                raise ReplicaError(f"replica {self.identity} exited ({self.returncode}); "
                                   f"log tail:\n{self.log_tail()}")
            left = deadline - loop.time()
            if left <= 0:
                raise ReplicaError(f"replica {self.identity}: no matching event in {timeout} s")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), left)

    # ------------------------------------------------------------------ signals (by PID)

    def _signal(self, sig: signal.Signals) -> None:
        if self.running and self.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def kill(self) -> None:
        """SIGKILL: the process dies at once, mid-call, without releasing anything."""
        self._close()
        self._signal(signal.SIGKILL)

    def pause(self) -> None:
        """SIGSTOP: the process freezes (its renewals stop) until :meth:`resume`."""
        self._close()
        self._signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        """SIGCONT."""
        self._signal(signal.SIGCONT)
        self.paused = False
        if self.running:
            self._open()

    async def stall(self, seconds: float) -> None:
        """Block the replica's event loop for ``seconds`` (not a responsive window)."""
        self._close()
        try:
            await self.send("stall", seconds=seconds, timeout=seconds + 30)
        finally:
            if self.running:
                self._open()

    async def step_clock(self, seconds: float) -> float:
        """Step the replica's clock by ``seconds``; returns its new offset."""
        answer = await self.send("step_clock", seconds=seconds)
        return float(answer["offset"])

    async def wait_exit(self, timeout: float = 10.0) -> int | None:
        if self._proc is None:
            return None
        await asyncio.wait_for(self._proc.wait(), timeout)
        if self._reader is not None:
            await asyncio.wait_for(self._reader, timeout)
        return self._proc.returncode

    async def stop(self, timeout: float = 15.0) -> int | None:
        """Graceful stop (the provider drains); SIGKILL if it does not exit in time."""
        if not self.running:
            return self.returncode
        if self.paused:
            self.resume()
        try:
            await self.send("stop", timeout=timeout)
            return await self.wait_exit(timeout)
        except (ReplicaError, TimeoutError, OSError):
            self.kill()
            return await self.wait_exit(timeout)

    async def killed(self, timeout: float = 10.0) -> None:
        """SIGKILL and wait until the process is gone."""
        self.kill()
        await self.wait_exit(timeout)

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


def _retrieve(future: asyncio.Future[Message]) -> None:
    if not future.cancelled():
        future.exception()


class ReplicaSet:
    """Replicas of one test, all stopped on exit (``async with ReplicaSet(...) as rs``)."""

    def __init__(
        self,
        *,
        url: str,
        prefix: str,
        handler_db: str | os.PathLike[str],
        log_dir: str | os.PathLike[str],
        lease_seconds: float | None = None,
        settings: Mapping[str, object] | None = None,
    ) -> None:
        self.url = url
        self.prefix = prefix
        self.handler_db = Path(handler_db)
        self.log_dir = Path(log_dir)
        self.lease_seconds = lease_seconds
        self.settings = dict(settings or {})
        self.replicas: list[ReplicaProcess] = []

    def add(self, identity: str, **overrides: Any) -> ReplicaProcess:
        """A replica that is not started yet (``await rs.add(...).start()``)."""
        options: dict[str, Any] = dict(
            url=self.url, prefix=self.prefix, handler_db=self.handler_db, log_dir=self.log_dir,
            lease_seconds=self.lease_seconds, settings=self.settings,
        )
        options.update(overrides)
        replica = ReplicaProcess(identity=identity, **options)
        self.replicas.append(replica)
        return replica

    async def spawn(self, *identities: str, **overrides: Any) -> list[ReplicaProcess]:
        """Start one replica per identity, concurrently; all are ready on return."""
        replicas = [self.add(identity, **overrides) for identity in identities]
        await asyncio.gather(*(r.start() for r in replicas))
        return replicas

    def windows(self) -> list[Window]:
        """Every replica's liveness windows (the invariant checker's ``windows``)."""
        return [w for r in self.replicas for w in r.windows()]

    def log_tails(self, lines: int = 30) -> str:
        seen: set[Path] = set()
        parts = []
        for r in self.replicas:
            if r.log_path not in seen:
                seen.add(r.log_path)
                parts.append(f"--- {r.identity} ({r.log_path})\n{r.log_tail(lines)}")
        return "\n".join(parts)

    async def stop_all(self, timeout: float = 10.0) -> None:
        results = await asyncio.gather(*(r.stop(timeout) for r in self.replicas),
                                       return_exceptions=True)
        for replica, result in zip(self.replicas, results, strict=True):
            if isinstance(result, BaseException):
                replica.kill()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            await asyncio.shield(self.stop_all())
        finally:
            for replica in self.replicas:  # whatever happened: nothing outlives the test
                replica.kill()


@contextlib.asynccontextmanager
async def replica_set(
    url: str, work_dir: Path, handler_db: Path, *, lease_seconds: float,
    settings: Mapping[str, Any] | None = None,
) -> AsyncIterator[ReplicaSet]:
    """A :class:`ReplicaSet` on a fresh prefix, logging under ``work_dir``; its replicas'
    log tails are printed when the body fails, and every replica is stopped afterwards."""
    from .servers import unique_prefix

    async with ReplicaSet(url=url, prefix=unique_prefix(), handler_db=handler_db,
                          log_dir=work_dir / "logs", lease_seconds=lease_seconds,
                          settings=settings) as replicas:
        try:
            yield replicas
        except BaseException:
            print(replicas.log_tails())
            raise
