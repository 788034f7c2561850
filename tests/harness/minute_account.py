"""The account of due times across real minute boundaries: a scenario that takes minutes.

Four ``* * * * *`` Schedules on two replica processes (``tests.harness.replica``) of a
private nats-server, then, one real minute boundary apart:

- B1: every Schedule fires. After it: ``toggle`` is disabled by AstraBox (``apply``,
  version 2), ``held`` is held by an operator (the admin service), ``edited``'s cron becomes
  ``*/2 * * * *``, and an operator asks a Run now of ``plain``.
- B2: after it, ``toggle`` is enabled again and ``held`` released; then every replica
  stops (gracefully).
- B3, B4 pass with no provider process; two new replicas start after B4.
- B5 fires again.

Then ``nats-scheduler explain DEPLOYMENT --since ... --json`` for each Schedule and
``nats-scheduler check --json``; last, the Run of ``plain``'s B1 is purged from the store (a
forged gap: a due time with no Run while replicas ran and the Schedule was active) and both
are asked again. Everything seen is written as one JSON object for the test
(``tests/test_whole_account_on_real_minutes.py``) to judge, with the server's timestamps of
what was done, so the expectations follow what happened rather than what was planned.

The suite starts it in the background at the start of the session (``tests/conftest.py``,
section 5) so its minutes pass while the other tests run; run alone::

    .venv/bin/python -m tests.harness.minute_account --out result.json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from nats_scheduler.admin.client import AdminClient
from nats_scheduler.names import Names, scheduled_run_id
from nats_scheduler.natsserver.process import NatsServer

from .replicas import ReplicaSet
from .scenario import FAST_REPLICA, LEASE, schedule
from .servers import connect_fast, unique_prefix
from .shared_handler import SqliteRunHandler

DEPLOYMENTS = ("plain", "toggle", "held", "edited")
NEW_CRON = "*/2 * * * *"
SCENARIO_SECONDS = 420.0
"""The longest the whole scenario may take (it needs about five and a half minutes)."""


def _now() -> datetime:
    return datetime.now(UTC)


def _next_boundary(after: datetime) -> datetime:
    return after.replace(second=0, microsecond=0) + timedelta(minutes=1)


async def _until(instant: datetime) -> None:
    """Wait for a real instant (the scenario is about real minutes: its waits are them)."""
    left = (instant - _now()).total_seconds()
    if left > 0:
        await asyncio.sleep(left)


async def _cli(url: str, prefix: str, *args: str) -> dict[str, Any]:
    """Run ``nats-scheduler`` as an operator would; its exit code and its JSON."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "nats_scheduler.cli.main", *args, "--url", url,
        "--prefix", prefix, "--json", stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    try:
        stdout, stderr = await asyncio.wait_for(proc.communicate(), 120)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    text = stdout.decode()
    try:
        body = json.loads(text) if text.strip() else None
    except json.JSONDecodeError:
        body = text
    return {"exit": proc.returncode, "json": body, "stderr": stderr.decode()[-2000:]}


async def _stamp_of_last(url: str, names: Names, deployment_id: str) -> str:
    """The server's timestamp of the Schedule's last stored change."""
    nc = await connect_fast(url)
    try:
        msg = await nc.jetstream().get_last_msg(names.schedules_stream,
                                               names.schedule_subject(deployment_id))
        assert msg.time is not None
        return msg.time.isoformat()
    finally:
        await nc.close()


async def run(result: dict[str, Any], work: Path) -> None:
    """The scenario; what it sees goes into ``result`` as it goes (also when it fails)."""
    result["started"] = _now().isoformat()
    with NatsServer(work / "nats", server_name="minutes") as server:
        url, prefix = server.url, unique_prefix()
        names = Names(prefix)
        result["prefix"] = prefix
        handler = SqliteRunHandler(work / "handler.db", process="scenario")
        async with ReplicaSet(url=url, prefix=prefix, handler_db=handler.path,
                              log_dir=work / "logs", lease_seconds=LEASE,
                              settings=FAST_REPLICA) as replicas:
            try:
                await _scenario(url, prefix, names, replicas, result)
            except BaseException as exc:
                result["error"] = f"{type(exc).__name__}: {exc}"
                result["logs"] = replicas.log_tails(40)
                raise


async def _scenario(url: str, prefix: str, names: Names, replicas: ReplicaSet,
                    result: dict[str, Any]) -> None:
    if _now().second > 40:  # room before the first boundary for the applies
        await _until(_next_boundary(_now()) + timedelta(seconds=3))
    first = await replicas.spawn("a", "b")
    result["since"] = _now().isoformat()
    for dep in DEPLOYMENTS:
        await first[0].send("apply", schedule=schedule(dep, "* * * * *"))
    b1 = _next_boundary(_now())
    result["boundaries"] = [(b1 + timedelta(minutes=i)).isoformat() for i in range(5)]
    b2, b4, b5 = (b1 + timedelta(minutes=i) for i in (1, 3, 4))
    nc = await connect_fast(url)
    try:
        client = AdminClient(nc, prefix, timeout=10.0)
        await _until(b1 + timedelta(seconds=12))
        await first[1].send("apply", schedule=schedule("toggle", "* * * * *", version=2,
                                                       enabled=False))
        await client.hold("held", by="ana@ops", reason="db migration")
        await first[0].send("apply", schedule=schedule("edited", NEW_CRON, version=2))
        run_now = await client.run_now("plain", by="bob@ops", reason="a report for the board")
        result["run_now"] = run_now.run_id
        result["changed_after_b1"] = {dep: await _stamp_of_last(url, names, dep)
                                      for dep in ("toggle", "held", "edited")}
        await _until(b2 + timedelta(seconds=12))
        await first[0].send("apply", schedule=schedule("toggle", "* * * * *", version=3))
        await client.release("held", by="ana@ops", reason="migration done")
        result["changed_after_b2"] = {dep: await _stamp_of_last(url, names, dep)
                                      for dep in ("toggle", "held")}
    finally:
        await nc.close()
    await _until(b2 + timedelta(seconds=25))
    result["stopping"] = _now().isoformat()
    await replicas.stop_all()
    result["stopped"] = _now().isoformat()
    await _until(b4 + timedelta(seconds=10))
    result["starting"] = _now().isoformat()
    await replicas.spawn("c", "d")
    await _until(b5 + timedelta(seconds=15))
    result["explain"] = {dep: await _cli(url, prefix, "explain", dep, "--since",
                                         result["since"]) for dep in DEPLOYMENTS}
    result["check"] = await _cli(url, prefix, "check", "--paging-sample", "0")
    await _forge_gap(url, names, b1, result)
    result["forged_explain"] = await _cli(url, prefix, "explain", "plain", "--since",
                                          result["since"])
    result["forged_check"] = await _cli(url, prefix, "check", "--paging-sample", "0")
    result["finished"] = _now().isoformat()


async def _forge_gap(url: str, names: Names, due: datetime, result: dict[str, Any]) -> None:
    """Purge the Run of ``plain``'s first due time: lost while replicas ran."""
    run_id = scheduled_run_id("plain", due)
    nc = await connect_fast(url)
    try:
        await nc.jetstream().purge_stream(names.runs_stream,
                                          subject=names.run_subject("plain", run_id))
    finally:
        await nc.close()
    result["forged"] = {"deployment_id": "plain", "due_at": due.isoformat(), "run_id": run_id}


def write_atomically(out: Path, result: dict[str, Any]) -> None:
    """The result whole or not at all: another test process may be polling for the file."""
    partial = out.with_name(out.name + ".partial")
    partial.write_text(json.dumps(result, indent=1))
    os.replace(partial, out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="where the JSON result goes")
    args = parser.parse_args(argv)
    began = time.monotonic()
    result: dict[str, Any] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="minute-account-") as work:
            asyncio.run(asyncio.wait_for(run(result, Path(work)), SCENARIO_SECONDS))
    finally:
        write_atomically(args.out, result)
    print(f"done in {time.monotonic() - began:.0f} s: {args.out}", file=sys.stderr)
    return 0




class Background:
    """The scenario as a child process of the test session, started early so its minutes
    pass while other tests run; stopped by its own PID if the session ends first."""

    def __init__(self, out: Path, log: Path) -> None:
        from .replicas import REPO_ROOT

        self.out = out
        self.log = log
        with log.open("ab") as sink:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.harness.minute_account", "--out", str(out)],
                cwd=REPO_ROOT, stdin=subprocess.DEVNULL, stdout=sink, stderr=sink)

    def result(self, timeout: float = SCENARIO_SECONDS + 60) -> dict[str, Any]:
        """Wait for the scenario (at most ``timeout`` seconds) and return what it saw."""
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.stop()
        if not self.out.is_file():
            tail = self.log.read_text(errors="replace")[-4000:]
            return {"error": f"the scenario wrote no result (exit {self.proc.returncode})",
                    "logs": tail}
        result: dict[str, Any] = json.loads(self.out.read_text())
        if self.proc.returncode:
            result.setdefault("error", f"the scenario exited {self.proc.returncode}")
            result.setdefault("logs", self.log.read_text(errors="replace")[-4000:])
        return result

    def finish(self, interrupted: bool) -> None:
        """At the end of the owner's session: let the scenario end (other workers may still
        wait for its result) unless the run was interrupted, and leave a result file."""
        if not interrupted:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(SCENARIO_SECONDS + 60)
        self.stop()
        if not self.out.is_file():
            write_atomically(self.out, {
                "error": f"the scenario wrote no result (exit {self.proc.returncode})",
                "logs": self.log.read_text(errors="replace")[-4000:]})

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


class SharedScenario:
    """The scenario once per test run, however many pytest-xdist workers collected its test.

    The first process to create ``folder`` (shared by the run's workers) starts it and owns
    it; the others read the result file it leaves there."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.out = folder / "result.json"
        try:
            folder.mkdir()
        except FileExistsError:
            self.background: Background | None = None
        else:
            self.background = Background(self.out, folder / "log.txt")

    def result(self, timeout: float = SCENARIO_SECONDS + 120) -> dict[str, Any]:
        """What the scenario saw: from the child (owner), or from its file (polled, with a
        deadline, while the owner's child runs)."""
        if self.background is not None:
            return self.background.result()
        deadline = time.monotonic() + timeout
        while not self.out.is_file():
            if time.monotonic() > deadline:
                return {"error": f"no result from the scenario's owner in {timeout:.0f} s"}
            time.sleep(1.0)
        found: dict[str, Any] = json.loads(self.out.read_text())
        return found

    def finish(self, interrupted: bool) -> None:
        if self.background is not None:
            self.background.finish(interrupted)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
