"""A nats-server started from Python does not outlive its parent (Linux: PR_SET_PDEATHSIG).

``atexit`` never runs when the parent is SIGKILLed, so without the parent-death signal an
embedded or demo server would keep running, holding its ports and store. The kernel ties
that signal to the thread that forked the server, so the second test checks that a server
started from a thread that then exits keeps running (it is forked by a long-lived spawner
thread, see ``nats_scheduler/natsserver/spawn.py``).
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from nats_scheduler.natsserver.process import NatsServer

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only"
)

CHILD = """
import sys
from nats_scheduler.natsserver.process import NatsServer

server = NatsServer(sys.argv[1], server_name="orphan-check").start()
print(server.pid, flush=True)
sys.stdin.read()  # stay up until killed
"""


def _identity(pid: int) -> tuple[str, str] | None:
    """(state, start time) of a process from /proc, or None once it is gone.

    The start time tells a recycled PID from the original process.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "
    return fields[0], fields[19]


def _alive(pid: int, started: str) -> bool:
    """Still the same process and not a zombie (exited, waiting for a reaper)."""
    ident = _identity(pid)
    return ident is not None and ident[1] == started and ident[0] not in ("Z", "X")


def _read_line(proc: subprocess.Popen[bytes], timeout: float) -> bytes:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or proc.poll() is not None:
            raise AssertionError(f"child printed no PID within {timeout}s (rc {proc.poll()})")
        ready, _, _ = select.select([proc.stdout], [], [], left)
        if ready:
            return proc.stdout.readline()


def test_server_goes_away_when_its_parent_is_sigkilled(tmp_path: Path) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path / "nats")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    server_pid: int | None = None
    started = ""
    try:
        server_pid = int(_read_line(child, timeout=30))
        ident = _identity(server_pid)
        assert ident is not None, "the server the child reported is not running"
        started = ident[1]

        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=10)

        deadline = time.monotonic() + 10
        while _alive(server_pid, started):
            assert time.monotonic() < deadline, (
                f"nats-server {server_pid} outlived its SIGKILLed parent {child.pid}"
            )
            time.sleep(0.02)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=10)
        if server_pid is not None and _alive(server_pid, started):
            os.kill(server_pid, signal.SIGKILL)  # the failure case: leave nothing behind


def test_server_started_from_a_thread_that_exits_keeps_running(tmp_path: Path) -> None:
    server = NatsServer(tmp_path / "nats", server_name="threaded")
    native: list[int | None] = []

    def start() -> None:
        native.append(threading.get_native_id())
        server.start()

    thread = threading.Thread(target=start)
    thread.start()
    thread.join()
    try:
        assert server.running
        # Once the OS thread is gone the kernel has sent any parent-death signal tied to it.
        task = Path(f"/proc/self/task/{native[0]}")
        deadline = time.monotonic() + 10
        while task.exists():
            assert time.monotonic() < deadline, "the starting thread never went away"
            time.sleep(0.01)
        watch_until = time.monotonic() + 0.5  # long enough for a SIGTERMed server to exit
        while time.monotonic() < watch_until:
            assert server.running, "the server died with the thread that started it"
            time.sleep(0.02)
        assert server.healthy()
    finally:
        server.stop()
