"""Run real nats-server processes on loopback: one :class:`NatsServer` each.

Used by the provider's embedded mode (``ASTRABOX_NATS_EMBEDDED=1``), by the demo, by the
``nats-scheduler`` server commands and by the tests (whose 3-node cluster helper builds on
:class:`NatsServer`). Where the binary and the ports come from is :mod:`.locate`; how a server
is kept from outliving this process is :mod:`.spawn`. This module is what one server is: its
generated config, its lifecycle and its readiness.

Design choices, and why:

* **A generated config file, not flags.** Every server (single node, cluster node, a
  test's custom config) starts from one file written into its store directory, so what
  ran can be read afterwards and cluster nodes go through the same code as single ones.
* **Readiness is ``GET /healthz`` == 200**, polled every ~15 ms. On a single server it
  answers 200 only once JetStream is usable; on a cluster only once there is a meta
  leader (and, on a restarted node, once it has caught up). ``nats.connect`` is NOT a
  usable probe: its first connect retries for about two minutes by default, and a TCP
  accept says nothing about JetStream.
* **Logs go to a file in the store directory** (``nats-server.log``), appended across
  restarts, so a failing test can print :meth:`NatsServer.log_tail`.
* **Processes are ended only by their PID**: ``stop`` is SIGTERM -> wait -> SIGKILL,
  ``kill`` is SIGKILL for fault tests. Whatever this Python process started and did not
  stop is stopped at exit, and a server does not outlive a SIGKILLed parent on Linux
  (:mod:`.spawn`).

Everything here is synchronous and fast (a server is ready ~15 ms after spawn); async
callers can wrap ``start``/``stop`` in ``anyio.to_thread.run_sync``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

from .locate import LOOPBACK, NatsServerError, find_nats_server, free_port, free_ports
from .spawn import popen, track, untrack

__all__ = [
    "LOOPBACK",
    "NatsServer",
    "NatsServerError",
    "find_nats_server",
    "free_port",
    "free_ports",
]

_POLL_INTERVAL = 0.015
_SLOW_POLL_INTERVAL = 0.1
_HEALTHZ_TIMEOUT = 0.25
_CONFIG_NAME = "nats-server.conf"
_LOG_NAME = "nats-server.log"


def _healthz_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=_HEALTHZ_TIMEOUT) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        # 503 (HTTPError is a URLError), connection refused, timeout while starting.
        return False


def _stopped(pid: int) -> bool:
    """Whether the process is stopped by a signal (``/proc``; True where there is none)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[0] in ("T", "t")


def _quote(value: str) -> str:
    """A double-quoted string for the NATS config format."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


# --------------------------------------------------------------------------- one server


class NatsServer:
    """One nats-server process listening on 127.0.0.1.

    ``store_dir`` holds the generated config, the log and the JetStream data
    (``<store_dir>/jetstream``); it survives :meth:`stop` and :meth:`restart`, which is
    what makes kill/restart tests meaningful.

    The config is always generated into ``<store_dir>/nats-server.conf``: listen, http,
    server_name, a jetstream block with its limits (``sync_always`` adds
    ``sync_interval: always``), an optional cluster block, then ``extra_config`` verbatim.
    With ``config_file`` (e.g. the repo's production-shaped ``nats-server.conf``), the
    generated file first ``include``s it; since later keys win in the NATS format, the
    file's accounts, users, limits etc. apply while listen/http/server_name and the WHOLE
    jetstream block are ours (loopback ports we know, data in ``store_dir``). Command-line
    flags cannot do this: ``-sd`` plus a ``store_dir`` in the file is a startup error.
    """

    def __init__(
        self,
        store_dir: str | os.PathLike[str],
        *,
        port: int | None = None,
        http_port: int | None = None,
        extra_config: str | None = None,
        config_file: str | os.PathLike[str] | None = None,
        jetstream: bool = True,
        server_name: str | None = None,
        sync_always: bool = False,
        max_memory_store: int = 256 * 1024**2,
        max_file_store: int = 4 * 1024**3,
        cluster_name: str | None = None,
        cluster_port: int | None = None,
        routes: Sequence[str] = (),
        binary: str | None = None,
    ) -> None:
        self.store_dir = Path(store_dir).resolve()
        need = [p for p in (port, http_port) if p is None]
        picked = iter(free_ports(len(need)) if need else [])
        self.port: int = port if port is not None else next(picked)
        self.http_port: int = http_port if http_port is not None else next(picked)
        self.extra_config = extra_config
        self.config_file = Path(config_file).resolve() if config_file is not None else None
        self.jetstream = jetstream
        self.server_name = server_name or f"n{self.port}"
        self.sync_always = sync_always
        self.max_memory_store = max_memory_store
        self.max_file_store = max_file_store
        self.cluster_name = cluster_name
        self.cluster_port = cluster_port
        self.routes = list(routes)
        if (cluster_name is None) != (cluster_port is None):
            raise ValueError("cluster_name and cluster_port go together")
        self.binary = binary or find_nats_server()
        self._proc: subprocess.Popen[bytes] | None = None
        self._paused = False

    # ---- addresses

    @property
    def url(self) -> str:
        """The client URL, ``nats://127.0.0.1:PORT``."""
        return f"nats://{LOOPBACK}:{self.port}"

    @property
    def http_url(self) -> str:
        """The monitoring base URL, ``http://127.0.0.1:HTTP_PORT``."""
        return f"http://{LOOPBACK}:{self.http_port}"

    @property
    def healthz_url(self) -> str:
        return f"{self.http_url}/healthz"

    @property
    def pid(self) -> int | None:
        """PID of the running process, or None when not started / already stopped."""
        return self._proc.pid if self.running and self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def config_path(self) -> Path:
        return self.store_dir / _CONFIG_NAME

    @property
    def log_path(self) -> Path:
        return self.store_dir / _LOG_NAME

    # ---- config

    def config_text(self) -> str:
        """The generated config (also written to :attr:`config_path` on start)."""
        lines = [f"# generated by nats_scheduler.natsserver.process for {self.server_name}"]
        if self.config_file is not None:
            # NATS resolves includes relative to the including file, and later keys win:
            # the file's settings apply except those written below.
            rel = os.path.relpath(self.config_file, self.store_dir)
            lines.append(f"include {_quote(rel)}")
        lines += [
            f"server_name: {_quote(self.server_name)}",
            f"listen: {_quote(f'{LOOPBACK}:{self.port}')}",
            f"http: {_quote(f'{LOOPBACK}:{self.http_port}')}",
        ]
        if self.jetstream:
            lines += [
                "jetstream {",
                f"  store_dir: {_quote(str(self.store_dir))}",
                f"  max_memory_store: {self.max_memory_store}",
                f"  max_file_store: {self.max_file_store}",
            ]
            if self.sync_always:
                lines.append("  sync_interval: always")
            lines.append("}")
        if self.cluster_name is not None:
            lines += [
                "cluster {",
                f"  name: {_quote(self.cluster_name)}",
                f"  listen: {_quote(f'{LOOPBACK}:{self.cluster_port}')}",
                "  routes: [",
                *(f"    {_quote(r)}" for r in self.routes),
                "  ]",
                "}",
            ]
        if self.extra_config:
            lines += ["", "# extra config", self.extra_config.rstrip()]
        return "\n".join(lines) + "\n"

    def _command(self) -> list[str]:
        return [self.binary, "-c", str(self.config_path)]

    # ---- lifecycle

    def spawn(self) -> None:
        """Start the process without waiting for readiness (see :meth:`wait_ready`)."""
        if self.running:
            raise NatsServerError(f"{self.server_name} is already running (pid {self.pid})")
        self.store_dir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(self.config_text(), encoding="utf-8")
        with open(self.log_path, "ab") as log:
            log.write(f"\n=== spawn {' '.join(self._command())}\n".encode())
            log.flush()
            self._proc = popen(
                self._command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.store_dir,
                close_fds=True,
            )
        self._paused = False
        track(self)

    def wait_listening(self, port: int | None, deadline: float) -> None:
        """Wait until ``port`` on loopback accepts TCP connections (or the process exits)."""
        if port is None:
            return
        while True:
            if not self.running:
                code = self._proc.poll() if self._proc is not None else None
                raise NatsServerError(
                    f"nats-server {self.server_name} exited with code {code} while starting; "
                    f"log tail:\n{self.log_tail()}"
                )
            with contextlib.suppress(OSError):
                socket.create_connection((LOOPBACK, port), timeout=_HEALTHZ_TIMEOUT).close()
                return
            if time.monotonic() >= deadline:
                raise NatsServerError(
                    f"nats-server {self.server_name} not listening on {LOOPBACK}:{port}; "
                    f"log tail:\n{self.log_tail()}"
                )
            time.sleep(_POLL_INTERVAL)

    def healthy(self) -> bool:
        """One ``/healthz`` probe: True on HTTP 200."""
        return self.running and _healthz_ok(self.healthz_url)

    def wait_ready(self, timeout: float = 10.0) -> float:
        """Poll ``/healthz`` until 200; return the seconds waited.

        Raises NatsServerError (with the log tail) if the process exits or the deadline
        passes first.
        """
        start = time.monotonic()
        deadline = start + timeout
        while True:
            if self._proc is None:
                raise NatsServerError(f"{self.server_name} was never started")
            code = self._proc.poll()
            if code is not None:
                raise NatsServerError(
                    f"nats-server {self.server_name} exited with code {code} while starting; "
                    f"log tail:\n{self.log_tail()}"
                )
            if _healthz_ok(self.healthz_url):
                return time.monotonic() - start
            now = time.monotonic()
            if now >= deadline:
                raise NatsServerError(
                    f"nats-server {self.server_name} (pid {self._proc.pid}) not healthy at "
                    f"{self.healthz_url} within {timeout:.1f}s; log tail:\n{self.log_tail()}"
                )
            # The server logs a warning per failed probe: back off after the first second.
            time.sleep(_POLL_INTERVAL if now - start < 1.0 else _SLOW_POLL_INTERVAL)

    def start(self, timeout: float = 10.0) -> Self:
        """Spawn and wait until ``/healthz`` answers 200; on failure the process is stopped."""
        self.spawn()
        try:
            self.wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, timeout: float = 5.0) -> int | None:
        """SIGTERM -> wait up to ``timeout`` -> SIGKILL; return the exit code (None if idle)."""
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            if self._paused:
                self.resume()  # a stopped process cannot handle SIGTERM
            proc.terminate()
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=timeout)
        self._forget()
        return proc.returncode

    def kill(self, timeout: float = 5.0) -> None:
        """SIGKILL the process (a crash, for fault tests) and reap it."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=timeout)
        self._forget()

    def restart(self, timeout: float = 10.0) -> Self:
        """Stop if running, then start again on the same ports with the same store dir."""
        if self.running:
            self.stop()
        return self.start(timeout)

    def pause(self, timeout: float = 5.0) -> None:
        """SIGSTOP: the process stays alive but answers nothing (a hung server). Returns once
        the kernel shows it stopped (``timeout`` at most): a signal is delivered a moment
        after it is sent, and a probe in that moment would still be answered."""
        if self._proc is not None and self.running:
            self._proc.send_signal(signal.SIGSTOP)
            self._paused = True
            deadline = time.monotonic() + timeout
            while not _stopped(self._proc.pid) and time.monotonic() < deadline:
                time.sleep(_POLL_INTERVAL)

    def resume(self) -> None:
        """SIGCONT after :meth:`pause`."""
        if self._proc is not None and self.running:
            self._proc.send_signal(signal.SIGCONT)
        self._paused = False

    def _forget(self) -> None:
        self._paused = False
        untrack(self)

    # ---- diagnostics

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of the server's log file ('' if there is none)."""
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                size = fh.tell()
                fh.seek(max(0, size - 64 * 1024))
                data = fh.read().decode("utf-8", "replace")
        except OSError:
            return ""
        # Failed readiness probes log one warning each; keep only the last of them.
        all_lines = data.splitlines()
        probes = [i for i, line in enumerate(all_lines) if "Healthcheck failed" in line]
        drop = set(probes[:-1])
        kept = [line for i, line in enumerate(all_lines) if i not in drop]
        return "\n".join(kept[-lines:])

    def __repr__(self) -> str:
        return f"NatsServer({self.server_name!r}, url={self.url!r}, pid={self.pid})"

    # ---- context manager

    def __enter__(self) -> Self:
        if not self.running:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
