"""The account of due times across real minute boundaries: a scenario that takes minutes.

Four ``* * * * *`` Schedules on two replica processes (``tests.harness.replica``) of a
private nats-server. The disturbances overlap on different Schedules, so four real minute
boundaries cover them all:

- Before B1, once every Schedule is created (enabled): ``toggle`` is disabled by AstraBox
  (``apply``, version 2) and ``held`` is held by an operator (the admin service).
- B1: ``plain`` and ``edited`` fire; ``toggle`` is disabled and ``held`` held. Once their
  Runs are dispatched: ``toggle`` is enabled again (version 3), ``held`` released,
  ``edited``'s cron becomes every other minute (the parity of B4, so that B2 and B4 are due
  times of the new cron and B3 is not), an operator asks a Run now of ``plain``; then every
  replica stops (gracefully).
- B2 and B3 pass with no provider process; two new replicas start after B3.
- B4 fires for every Schedule.

Then ``nats-scheduler explain DEPLOYMENT --since ... --json`` for each Schedule and
``nats-scheduler check --json``; last, the Run of ``plain``'s B1 is purged from the store (a
forged gap: a due time with no Run while replicas ran and the Schedule was active) and both
are asked again. Everything seen is written as one JSON object for the test
(``tests/test_whole_account_on_real_minutes.py``) to judge, with the server's timestamps of
what was done, so the expectations follow what happened rather than what was planned.

The suite starts it in the background at the start of the session (``tests/conftest.py``,
section 6) so its minutes pass while the other tests run; run alone::

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

from .replicas import ReplicaProcess, ReplicaSet
from .scenario import FAST_REPLICA, LEASE, schedule
from .servers import connect_fast, unique_prefix
from .shared_handler import SqliteRunHandler

DEPLOYMENTS = ("plain", "toggle", "held", "edited")
SCENARIO_SECONDS = 330.0
"""The longest the whole scenario may take (it needs three and a half to four and a half
minutes: up to one to the first boundary, three across the others, then the questions)."""
LAST_START_SECOND = 50
"""A setup that starts later in its minute waits for the next one: the Schedules must be
created and disturbed well before B1 (``CHANGE_MARGIN`` of the account, and the replicas
must have planned them)."""
MARGIN = 4.0
"""Seconds that must be left between what is done and the boundary it must precede."""


def every_other_minute(due: datetime) -> str:
    """A cron of every other minute, ``due`` among its due times."""
    return "*/2 * * * *" if due.minute % 2 == 0 else "1-59/2 * * * *"


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


class Late(RuntimeError):
    """A step ended too close to the boundary it had to precede: the scenario is void."""


def _before(boundary: datetime, what: str) -> None:
    left = (boundary - _now()).total_seconds()
    if left < MARGIN:
        raise Late(f"{what} ended {left:.1f} s before the boundary {boundary.isoformat()}")


async def _state(replica: ReplicaProcess, run_id: str) -> str | None:
    """The Run's state, or the error that says it is not stored yet."""
    answer = await replica.send("get_run", run_id=run_id, check=False)
    if not answer.get("ok"):
        if "RunNotFound" in str(answer.get("error")):
            return None
        raise RuntimeError(f"get_run {run_id}: {answer.get('error')}")
    return (answer["run"] or {}).get("state")


async def _dispatched(replica: ReplicaProcess, run_ids: list[str], timeout: float) -> None:
    """Poll (with a deadline) until every Run is stored and dispatched."""
    deadline = time.monotonic() + timeout
    while True:
        states = [await _state(replica, rid) for rid in run_ids]
        if all(state == "dispatched" for state in states):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"not dispatched within {timeout:.0f} s: "
                               f"{dict(zip(run_ids, states, strict=True))}")
        await asyncio.sleep(0.2)


async def _scenario(url: str, prefix: str, names: Names, replicas: ReplicaSet,
                    result: dict[str, Any]) -> None:
    first = await replicas.spawn("a", "b")
    if _now().second > LAST_START_SECOND:  # room before the first boundary
        await _until(_next_boundary(_now()) + timedelta(seconds=0.5))
    result["since"] = _now().isoformat()
    b1 = _next_boundary(_now())
    b2, b3, b4 = (b1 + timedelta(minutes=i) for i in (1, 2, 3))
    result["boundaries"] = [b.isoformat() for b in (b1, b2, b3, b4)]
    new_cron = result["new_cron"] = every_other_minute(b4)
    for dep in DEPLOYMENTS:
        await first[0].send("apply", schedule=schedule(dep, "* * * * *"))
    nc = await connect_fast(url)
    try:
        client = AdminClient(nc, prefix, timeout=10.0)
        await first[1].send("apply", schedule=schedule("toggle", "* * * * *", version=2,
                                                       enabled=False))
        await client.hold("held", by="ana@ops", reason="db migration")
        result["off"] = {dep: await _stamp_of_last(url, names, dep)
                         for dep in ("toggle", "held")}
        _before(b1, "creating and disturbing the Schedules")

        await _until(b1)
        await _dispatched(first[0], [scheduled_run_id(dep, b1) for dep in ("plain", "edited")],
                          timeout=30)
        await first[0].send("apply", schedule=schedule("toggle", "* * * * *", version=3))
        await client.release("held", by="ana@ops", reason="migration done")
        await first[0].send("apply", schedule=schedule("edited", new_cron, version=2))
        run_now = await client.run_now("plain", by="bob@ops", reason="a report for the board")
        result["run_now"] = run_now.run_id
        result["on"] = {dep: await _stamp_of_last(url, names, dep)
                        for dep in ("toggle", "held")}
        result["edited_at"] = await _stamp_of_last(url, names, "edited")
        await _dispatched(first[0], [run_now.run_id], timeout=30)
    finally:
        await nc.close()
    result["stopping"] = _now().isoformat()
    await replicas.stop_all()
    result["stopped"] = _now().isoformat()
    _before(b2, "stopping every replica")

    await _until(b3 + timedelta(seconds=2))
    result["starting"] = _now().isoformat()
    (again, _) = await replicas.spawn("c", "d")
    await _until(b4)
    await _dispatched(again, [scheduled_run_id(dep, b4) for dep in DEPLOYMENTS], timeout=40)

    explains = [_cli(url, prefix, "explain", dep, "--since", result["since"])
                for dep in DEPLOYMENTS]
    *answers, result["check"] = await asyncio.gather(
        *explains, _cli(url, prefix, "check", "--paging-sample", "0"))
    result["explain"] = dict(zip(DEPLOYMENTS, answers, strict=True))
    await _forge_gap(url, names, b1, result)
    result["forged_explain"], result["forged_check"] = await asyncio.gather(
        _cli(url, prefix, "explain", "plain", "--since", result["since"]),
        _cli(url, prefix, "check", "--paging-sample", "0"))
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
