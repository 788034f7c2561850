"""The placeholder CLI and console work now (the README's demo command relies on them)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from admin_tui.app import PLACEHOLDER_TEXT, SchedulerConsole
from nats_scheduler.cli.main import main
from nats_scheduler.natsserver import free_ports


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


def _started_pid(out: str) -> int:
    match = re.search(r"nats-server \(pid (\d+)\) ready at nats://127\.0\.0\.1:\d+", out)
    assert match, out
    return int(match.group(1))


def test_demo_starts_and_stops_its_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "coming soon" in out
    assert _pid_gone(_started_pid(out))
    assert (tmp_path / ".demo" / "nats" / "nats-server.log").is_file()


def test_server_command_stops_on_sigterm(tmp_path: Path) -> None:
    port, http_port = free_ports(2)
    proc = subprocess.Popen(
        [sys.executable, "-m", "nats_scheduler.cli.main", "server",
         "--store-dir", str(tmp_path / "dev"), "--port", str(port), "--http-port", str(http_port)],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        deadline = time.monotonic() + 15
        while not _healthz_ok(f"http://127.0.0.1:{http_port}/healthz"):
            assert proc.poll() is None, proc.communicate(timeout=5)[0]
            assert time.monotonic() < deadline, "dev server not healthy in 15 s"
            time.sleep(0.02)  # poll interval
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=10)
        assert proc.returncode == 0, out
        assert f"nats://127.0.0.1:{port}" in out, out
        assert "nats-server stopped" in out
        assert _pid_gone(_started_pid(out))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=5)


@pytest.mark.anyio
async def test_console_placeholder_starts_and_quits_with_q() -> None:
    app = SchedulerConsole()
    async with app.run_test(size=(80, 24)) as pilot:
        assert PLACEHOLDER_TEXT in str(app.query_one("#placeholder").render())
        await pilot.press("q")
        await pilot.pause()
    assert app.return_code == 0
    assert not app.is_running
