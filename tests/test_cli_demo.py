"""``nats-scheduler demo`` and ``server`` as real processes: up, working, and cleanly down.

The demo test does not wait for a due time (the walkthrough does that once for the suite):
it asks for a Run now and watches the demo print it dispatched.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from nats_scheduler.cli.main import main
from nats_scheduler.natsserver.process import free_ports
from tests.providers import reaped


def _pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _healthz_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=0.25) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


class Output:
    """A child process's output, read line by line in a thread (never blocks the test)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    def wait_for(self, pattern: str, timeout: float) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while True:
            match = re.search(pattern, self.text)
            if match:
                return match
            assert self.proc.poll() is None, f"exited {self.proc.returncode}:\n{self.text}"
            assert time.monotonic() < deadline, f"no {pattern!r} in {timeout} s:\n{self.text}"
            time.sleep(0.05)  # poll interval


@pytest.fixture
def process_guard() -> Iterator[list[subprocess.Popen[str]]]:
    """Processes a test started; killed (by PID) if the test left them running."""
    with reaped() as started:
        yield started


def test_demo_dispatches_runs_and_stops_everything_on_sigterm(
    tmp_path: Path, process_guard: list[subprocess.Popen[str]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    (port,) = free_ports(1)
    proc = subprocess.Popen(
        [sys.executable, "-m", "nats_scheduler.cli.main", "demo", "--dir",
         str(tmp_path / ".demo"), "--port", str(port)],
        cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)
    process_guard.append(proc)
    out = Output(proc)
    out.wait_for("no terminal: running headless", 10)
    out.wait_for(r"demo ready: nats-server at nats://127\.0\.0\.1:\d+", 60)
    pids = [int(p) for p in re.findall(
        r"(?:nats-server|replica-\d) pid (\d+)", out.wait_for(r"processes: .*", 5).group(0))]
    assert len(pids) == 3
    url = f"nats://127.0.0.1:{port}"

    assert main(["run-now", "heartbeat", "--url", url, "--reason", "demo test", "--json"]) == 0
    run_id = re.search(r'"run_id": "(\w+)"', capsys.readouterr().out).group(1)  # type: ignore[union-attr]
    out.wait_for(rf"heartbeat .*dispatched\s+run {run_id}\s+session session-\d+", 20)
    assert main(["schedules", "--url", url]) == 0
    listed = capsys.readouterr().out
    for sample in ("heartbeat", "berlin-digest", "kolkata-quarter", "sydney-review"):
        assert sample in listed
    assert main(["status", "--url", url]) in (0, 7)  # a sample may await its first due time
    assert "replicas alive: 2" in capsys.readouterr().out

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=40) == 0, out.text
    assert "demo stopped" in out.text
    assert all(_pid_gone(pid) for pid in pids), out.text


def test_server_command_stops_on_sigterm(
    tmp_path: Path, process_guard: list[subprocess.Popen[str]]
) -> None:
    port, http_port = free_ports(2)
    proc = subprocess.Popen(
        [sys.executable, "-m", "nats_scheduler.cli.main", "server",
         "--store-dir", str(tmp_path / "dev"), "--port", str(port), "--http-port", str(http_port)],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    process_guard.append(proc)
    out = Output(proc)
    deadline = time.monotonic() + 15
    while not _healthz_ok(f"http://127.0.0.1:{http_port}/healthz"):
        assert proc.poll() is None, out.text
        assert time.monotonic() < deadline, "dev server not healthy in 15 s"
        time.sleep(0.02)  # poll interval
    pid = int(out.wait_for(r"nats-server \(pid (\d+)\) ready", 5).group(1))
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 0, out.text
    out.wait_for("nats-server stopped", 5)
    assert f"nats://127.0.0.1:{port}" in out.text
    assert _pid_gone(pid)
