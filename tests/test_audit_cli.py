"""docs/audit.md, typed as an auditor would: every command run with the real ``nats`` CLI.

The official CLI (``nats`` v0.5.0, built by ``tests/harness/natscli.py``) and ``jq`` run each
shell command of the guide through ``bash -o pipefail``, as the ``auditor`` user of the
committed ``nats-server.conf`` (the guide's own ``nats context add`` makes the context every
later ``nats`` command uses; ``nats-scheduler`` reads the guide's ``export`` line). The store
has real history, written by two replica processes logged in as ``scheduler``/``service``
and by operators through ``nats-scheduler``:

* Schedules applied, edited (a second version), disabled, held and released on behalf of
  someone, held again, and deleted (an ID that needs encoding);
* Runs: a due time fired after a failed attempt, a Run that failed for good, a Run now, a
  Replay held at its turn right now (so it holds a lease), and a Run whose replica was
  SIGKILLed mid-call and that the other replica took over;
* an outage: a first replica started and stopped before the two, so one of them records the
  span in which none ran.

Each command is checked against what the guide says it shows (event types, Run IDs, due
time headers, Session IDs, who acted), and the auditor's refusals are logged by the server
for nothing but the clean-ups the guide names. Without Go the CLI cannot be built: these
tests then skip, saying how to install it, except under CI, where they fail.
"""

from __future__ import annotations

import asyncio
import json
import os
import pty
import re
import select
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import nats.js.errors
import pytest

from nats_scheduler.names import Names, token
from nats_scheduler.natsserver.config import REPO_CONFIG
from nats_scheduler.natsserver.process import NatsServer
from tests.harness.replicas import ReplicaSet
from tests.harness.scenario import FAST_REPLICA, LEASE
from tests.harness.shared_handler import SqliteRunHandler
from tests.providers import eventually
from tests.security_support import (
    PASSWORDS,
    connect_as,
    prod_server,
    scheduler_with_service,
    store_state,
    violations,
)
from tests.test_audit_guide import DOC, shell_commands

pytestmark = pytest.mark.anyio

NAMES = Names("SCHED")
DEP = "nightly-report"
DUE = "2031-01-01T01:00:00+00:00"  # 02:00 in Berlin: the guide's Msg-Id example
CRON = "0 2 1 1 *"  # once a year, so nothing fires by itself while the test runs
ADMIN, ADMIN_PASSWORD = "platform-admin", "platform-admin-test-pw"
ACCOUNT_USER_LINE = ('{ user: "scheduler", password: $NATS_SCHEDULER_PASSWORD, '
                     'permissions: $SCHEDULER_PERMISSIONS }')
"""The line of the store's account (ASTRABOX): a platform admin who creates streams is there."""
EXAMPLE_URL = "nats://nats.example:4222"
CLEAN_UP = re.compile(r"^publish \$JS\.API\.CONSUMER\.DELETE\."
                      r"(KV_SCHED_LEASES|KV_SCHED_REPLICAS|SCHED_RUNS|SCHED_SCHEDULES)\.")
"""The only refusals the guide's commands may cause: the CLI deleting its own consumer."""


def with_platform_admin() -> str:
    """The committed config plus a user that may create streams (the archive's creator)."""
    text = REPO_CONFIG.read_text("utf-8")
    assert ACCOUNT_USER_LINE in text
    return text.replace(ACCOUNT_USER_LINE, ACCOUNT_USER_LINE
                        + f'\n      {{ user: "{ADMIN}", password: "{ADMIN_PASSWORD}" }}')


def guide_commands() -> list[str]:
    return shell_commands(DOC.read_text("utf-8"))


# =========================================================================== the store


@dataclass
class History:
    """The store and what was written to it."""

    server: NatsServer
    scheduled: str
    """The Run of DEP's due time (one failed attempt, then dispatched)."""
    failed: str
    """The Run of ``flaky`` that failed for good."""
    run_now: str
    replay: str
    """DEP's Replay of ``scheduled``, held at ``admit_turn`` now (its lease is live)."""
    taken_over: str
    """``handover``'s Run: started by replica-a (SIGKILLed mid-call), finished by replica-b."""
    session_of_taken_over: str
    started_at: datetime
    env: dict[str, str] = field(default_factory=dict)


def replica_schedule(dep: str, *, enabled: bool = True, version: int = 1,
                     cron: str = CRON) -> dict[str, Any]:
    return {"deployment_id": dep, "name": f"{dep} job", "cron": cron,
            "timezone": "Europe/Berlin", "enabled": enabled, "version": version,
            "payload": {"target": "agent:reporter", "prompt": f"Summarise for {dep}"}}


async def operator(server: NatsServer, *argv: str) -> dict[str, Any]:
    """``nats-scheduler ARGV --json`` as the ``operator`` user, in its own process."""
    auth = ["--url", server.url, "--user", "operator", "--password", PASSWORDS["operator"]]
    done = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "nats_scheduler.cli.main", *argv, "--json",
                         *auth], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, (argv, done.stdout, done.stderr)
    result: dict[str, Any] = json.loads(done.stdout)
    return result


async def joined(server: NatsServer, identity: str) -> bool:
    """Whether the replica's key is in the replicas bucket (it joined, so it left a sign).
    Not yet while the bucket is missing: a replica joins once its Schedules are loaded,
    after its start returned."""
    nc, _ = await connect_as(server, "operator")
    try:
        try:
            bucket = await nc.jetstream(timeout=2.0).key_value(NAMES.replicas_bucket)
            await bucket.get(NAMES.replica_key(identity))
        except (nats.js.errors.BucketNotFoundError, nats.js.errors.KeyNotFoundError):
            return False
        return True
    finally:
        await nc.close()


async def run_of(replica: Any, run_id: str) -> dict[str, Any]:
    run: dict[str, Any] = (await replica.send("get_run", run_id=run_id))["run"]
    return run


@pytest.fixture(scope="module")
async def history(tmp_path_factory: pytest.TempPathFactory, nats_cli: Path,
                  jq: str) -> AsyncIterator[History]:
    work = tmp_path_factory.mktemp("audit-cli")
    handler = SqliteRunHandler(work / "handler.db", process="test")
    # a handler call may hang as long as the module runs (the Replay held at its turn)
    settings = {**FAST_REPLICA, "call_timeout": 600.0, "user": "scheduler",
                "password": PASSWORDS["scheduler"], "service_user": "service",
                "service_password": PASSWORDS["service"]}
    started_at = datetime.now(UTC)
    with prod_server(work / "nats", config_text=with_platform_admin()) as server:
        async with ReplicaSet(url=server.url, prefix="SCHED", handler_db=handler.path,
                              log_dir=work / "logs", lease_seconds=LEASE,
                              settings=settings) as replicas:
            # the outage: a replica that ran and stopped; the next start records the span
            (early,) = await replicas.spawn("replica-0")
            await eventually(lambda: joined(server, "replica-0"), timeout=30)
            await early.stop()
            a, b = await replicas.spawn("replica-a", "replica-b")
            for dep in (DEP, "flaky", "team.a/report", "paused-report", "handover"):
                await a.send("apply", schedule=replica_schedule(dep))
            handler.set_rule(DEP, "fail_transient:1")
            handler.set_rule("flaky", "fail_permanent")
            handler.set_rule("handover", "hang_admit")
            (scheduled,) = (await a.send("fire", deployment=DEP, dues=[DUE]))["runs"]
            (failed,) = (await a.send("fire", deployment="flaky", dues=[DUE]))["runs"]

            async def finished(run_id: str, state: str) -> bool:
                return (await run_of(b, run_id))["state"] == state

            await eventually(lambda: finished(scheduled, "dispatched"), timeout=30)
            await eventually(lambda: finished(failed, "failed"), timeout=30)

            # the takeover: replica-a dies in admit_turn, replica-b finishes the Run
            (taken,) = (await a.send("fire", deployment="handover", dues=[DUE]))["runs"]
            await eventually(lambda: any(c.outcome == "hang" and c.process == "replica-a"
                                         for c in handler.calls(taken)), timeout=20)
            await a.killed()
            await eventually(lambda: any(c.process == "replica-b" for c in handler.calls(taken)),
                             timeout=30)
            handler.set_rule("handover", None)
            await eventually(lambda: finished(taken, "dispatched"), timeout=30)
            session = (await run_of(b, taken))["session_id"]

            # Schedules edited, disabled, deleted
            await b.send("apply", schedule=replica_schedule(DEP, version=2,
                                                            cron="30 2 1 1 *"))
            await b.send("apply", schedule=replica_schedule("paused-report", enabled=False,
                                                            version=2))
            await b.send("delete", deployment="team.a/report")

            # operators, through nats-scheduler (the server proves who they are)
            await operator(server, "hold", DEP, "--reason", "maintenance window",
                           "--by", "alice@security")
            await operator(server, "release", DEP, "--reason", "done")
            now = await operator(server, "run-now", DEP, "--reason", "check", "--wait")
            handler.set_rule(DEP, "hang_admit")
            replay = await operator(server, "replay", scheduled, "--reason", "again")
            await eventually(lambda: any(c.outcome == "hang"
                                         for c in handler.calls(replay["run_id"])), timeout=20)
            await operator(server, "hold", DEP, "--reason", "freeze")
            try:
                yield History(server=server, scheduled=scheduled, failed=failed,
                              run_now=now["run_id"], replay=replay["run_id"], taken_over=taken,
                              session_of_taken_over=session, started_at=started_at)
            finally:
                handler.set_rule(DEP, None)


# =========================================================================== running the guide


@dataclass
class Shell:
    """Where the guide's commands run: ``nats``, ``jq`` and ``nats-scheduler`` on PATH, a
    private CLI config folder, and the guide's variables."""

    env: dict[str, str]

    def run(self, command: str, timeout: float = 60.0, **variables: str) -> Done:
        started = time.monotonic()
        done = subprocess.run(["bash", "-o", "pipefail", "-c", command],
                              env={**self.env, **variables}, capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL, check=False)
        return Done(command, done.returncode, done.stdout, done.stderr,
                    time.monotonic() - started)

    def run_in_terminal(self, command: str, timeout: float = 30.0, **variables: str) -> Done:
        """``command`` on a pseudo-terminal (``nats stream view`` pages only on one),
        answering every ``Next Page?`` with Enter (yes)."""
        started = time.monotonic()
        primary, secondary = pty.openpty()
        proc = subprocess.Popen(["bash", "-c", command], stdin=secondary, stdout=secondary,
                                stderr=secondary, env={**self.env, **variables,
                                                       "COLUMNS": "200", "LINES": "50",
                                                       "TERM": "dumb"},
                                close_fds=True)
        os.close(secondary)
        out = b""
        answered = 0  # prompts answered so far
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                ready, _, _ = select.select([primary], [], [], 0.2)
                if ready:
                    try:
                        chunk = os.read(primary, 65536)
                    except OSError:  # the terminal closed: the command ended
                        break
                    out += chunk
                    for _ in range(chunk.count(b"\x1b[6n")):  # where is the cursor?
                        os.write(primary, b"\x1b[1;1R")
                elif proc.poll() is not None:
                    break
                elif out.count(b"Next Page?") > answered:  # the prompt waits: yes
                    os.write(primary, b"\r")
                    answered += 1
            else:
                raise AssertionError(f"{command} did not end within {timeout} s: "
                                     f"{out[-1500:].decode('utf-8', 'replace')}")
            code = proc.wait(5)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(5)
            os.close(primary)
        text = out.decode("utf-8", "replace").replace("\r\n", "\n")
        return Done(command, code, text, "", time.monotonic() - started)


@dataclass
class Done:
    command: str
    code: int
    out: str
    err: str
    seconds: float

    def ok(self) -> Done:
        assert self.code == 0, (self.command, self.code, self.out, self.err)
        return self

    def json_lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.ok().out.splitlines() if line.strip()]

    def json(self) -> Any:
        return json.loads(self.ok().out)


@pytest.fixture(scope="module")
async def shell(history: History, nats_cli: Path,
                tmp_path_factory: pytest.TempPathFactory) -> Shell:
    """The auditor's shell, set up by the guide's "Connecting as the auditor" commands."""
    home = tmp_path_factory.mktemp("auditor-home")
    bin_dir = home / "bin"
    bin_dir.mkdir()
    (bin_dir / "nats").symlink_to(nats_cli)
    path = os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent),
                            os.environ.get("PATH", "")])
    # NATS_TIMEOUT: the CLI's answer timeout (5 s by default), shorter as an auditor on a
    # near server may set it: `nats kv ls` and `nats stream view` wait that long for the
    # consumer clean-up the server refuses them
    env = {"PATH": path, "HOME": str(home), "XDG_CONFIG_HOME": str(home / "config"),
           "LANG": "C.UTF-8", "NATS_AUDITOR_PASSWORD": PASSWORDS["auditor"],
           "NATS_TIMEOUT": "2s"}
    connect, export = guide_commands()[:2]
    assert connect.startswith("nats context add") and export.startswith("export ")
    shell = Shell(env)
    added = (await asyncio.to_thread(
        shell.run, connect.replace(EXAMPLE_URL, history.server.url))).ok()
    assert "astrabox-audit" in added.out + added.err
    shown = (await asyncio.to_thread(
        shell.run, export.replace(EXAMPLE_URL, history.server.url)
        + '; printf "%s\\n" "$ASTRABOX_NATS_URL" "$ASTRABOX_NATS_USER" '
          '"$ASTRABOX_NATS_PASSWORD"')).ok()
    url, user, password = shown.out.split()
    assert (url, user, password) == (history.server.url, "auditor", PASSWORDS["auditor"])
    env.update(ASTRABOX_NATS_URL=url, ASTRABOX_NATS_USER=user, ASTRABOX_NATS_PASSWORD=password)
    return shell


def month_of(moment: datetime) -> tuple[str, str]:
    """FROM and TO of the UTC month holding ``moment``."""
    start = moment.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    end = (start + timedelta(days=32)).replace(day=1)
    return start.strftime("%Y-%m-%dT%H:%M:%SZ"), end.strftime("%Y-%m-%dT%H:%M:%SZ")


# =========================================================================== what each shows

Check = Callable[[Shell, History, str], None]
CHECKS: list[tuple[str, Check]] = []


def shows(pattern: str) -> Callable[[Check], Check]:
    """Register the check of the guide command(s) matching ``pattern`` (a regex)."""
    def register(check: Check) -> Check:
        CHECKS.append((pattern, check))
        return check
    return register


def dep_runs(h: History) -> set[str]:
    return {h.scheduled, h.run_now, h.replay}


def identity(actor: str) -> bool:
    return actor in ("replica-a", "replica-b")


@shows(r"^nats context add ")
@shows(r"^export ASTRABOX_NATS_URL=")
def _connecting(sh: Shell, h: History, command: str) -> None:
    """Run by the ``shell`` fixture: every other check goes through what they set up."""
    assert sh.env["ASTRABOX_NATS_USER"] == "auditor"


@shows(r"^python -c .*token")
def _token(sh: Shell, h: History, command: str) -> None:
    assert sh.run(command).ok().out.strip() == "team%2Ea%2Freport"


@shows(r"^(DEP|RUN)=")
def _variables(sh: Shell, h: History, command: str) -> None:
    value = sh.run(f"{command}\nprintf %s \"${command[:3]}\"").ok().out
    assert value == DEP if command.startswith("DEP") else re.fullmatch(r"[a-z0-9]{26}", value)


@shows(r"^nats stream subjects SCHED_RUNS ")
def _subjects(sh: Shell, h: History, command: str) -> None:
    out = sh.run(command, DEP=DEP).ok().out
    listed = set(re.findall(rf"SCHED\.run\.{DEP}\.([a-z0-9]+)", out))
    assert listed == dep_runs(h) and f"{len(listed)} Subjects in stream SCHED_RUNS" in out


@shows(r"^nats sub .*--last-per-subject .*\| jq -c '\.run \|")
def _current_state(sh: Shell, h: History, command: str) -> None:
    runs = {r["run_id"]: r for r in sh.run(command, DEP=DEP).json_lines()}
    assert set(runs) == dep_runs(h)
    assert runs[h.scheduled]["state"] == "dispatched" and runs[h.scheduled]["attempts"] == 2
    # (one transient failure, then the second attempt: replica-a lived until it ended)
    assert runs[h.scheduled]["due_at"] == "2031-01-01T01:00:00Z"
    assert (runs[h.run_now]["trigger"], runs[h.run_now]["requested_by"]) == ("run_now",
                                                                           "operator")
    assert runs[h.replay]["state"] == "dispatching"


@shows(r"^nats stream view SCHED_RUNS ")
def _view(sh: Shell, h: History, command: str) -> None:
    done = sh.run_in_terminal(command, DEP=DEP)
    assert done.code == 0, done.out
    events = re.findall(r"^\[(\d+)\] Subject: SCHED\.run\.([^.]+)\.([a-z0-9]+) Received: ",
                        done.out, re.MULTILINE)
    assert {dep for _, dep, _ in events} == {DEP} and {r for _, _, r in events} == dep_runs(h)
    sequences = [int(seq) for seq, _, _ in events]
    assert sequences == sorted(sequences) and len(events) > 10  # paged, oldest first
    assert "Next Page?" in done.out and "Reached apparent end of data" in done.out
    assert "Nats-Msg-Id: nightly-report@2031-01-01T01:00Z" in done.out
    assert '"type":"run.session_started"' in done.out


@shows(r"^nats-scheduler runs \"\$DEP\" --limit 1000 --json \| jq -c '\.runs\[\] \| \{")
def _cli_runs(sh: Shell, h: History, command: str) -> None:
    assert {r["run_id"] for r in sh.run(command, DEP=DEP).json_lines()} == dep_runs(h)


@shows(r"^FROM=2026-11-01T00:00:00Z TO=2026-12-01T00:00:00Z$")
def _november(sh: Shell, h: History, command: str) -> None:
    out = sh.run(command + '\nprintf "%s %s" "$FROM" "$TO"').ok().out
    assert out == "2026-11-01T00:00:00Z 2026-12-01T00:00:00Z"


@shows(r"--arg from \"\$FROM\" --arg to \"\$TO\" '(select\(\.run\.created_at|\.runs\[\])")
def _runs_in_a_month(sh: Shell, h: History, command: str) -> None:
    """Every Run of DEP in the month the test runs in; none in the month before."""
    first, end = month_of(h.started_at)
    found = {r["run_id"] for r in sh.run(command, DEP=DEP, FROM=first, TO=end).json_lines()}
    assert found == dep_runs(h)
    before, _ = month_of(datetime.fromisoformat(first) - timedelta(days=1))
    assert sh.run(command, DEP=DEP, FROM=before, TO=first).ok().out == ""


@shows(r"^nats sub .*--headers-only ")
def _create_headers(sh: Shell, h: History, command: str) -> None:
    out = sh.run(command, RUN=h.scheduled).ok().out
    blocks = re.split(r"^\[#\d+\] ", out, flags=re.MULTILINE)[1:]
    assert len(blocks) == 5  # created, attempt_failed, claimed, session_started, dispatched
    assert "Nats-Msg-Id: nightly-report@2031-01-01T01:00Z" in blocks[0]
    assert "Nats-Expected-Last-Subject-Sequence: 0" in blocks[0]
    assert all(h.scheduled in b for b in blocks) and '"type"' not in out


@shows(r"schedule\.held\" or \.type == \"schedule\.released\"\) \| \{type, at, by, caller")
def _who_held(sh: Shell, h: History, command: str) -> None:
    found = sh.run(command, DEP=DEP).json_lines()
    proven = {"user": "operator", "account": "SCHED_OPS"}
    assert [(e["type"], e["by"], e["caller"], e["on_behalf_of"], e["reason"]) for e in found] == [
        ("schedule.held", "operator", proven, "alice@security", "maintenance window"),
        ("schedule.released", "operator", proven, None, "done"),
        ("schedule.held", "operator", proven, None, "freeze")]
    assert all(identity(e["actor"]) for e in found)


@shows(r"^nats stream get SCHED_SCHEDULES --last-for ")
def _held_now(sh: Shell, h: History, command: str) -> None:
    out = sh.run(command, DEP=DEP).ok().out
    assert f"on Subject SCHED.sched.{DEP}" in out
    (line,) = [x for x in out.splitlines() if x.startswith("{")]
    hold = json.loads(line)["schedule"]["hold"]
    assert (hold["by"], hold["reason"], hold["caller"]["user"]) == ("operator", "freeze",
                                                                  "operator")


@shows(r"^nats-scheduler events --deployment \"\$DEP\" --type schedule\.held ")
def _cli_who_held(sh: Shell, h: History, command: str) -> None:
    out = sh.run(command, DEP=DEP).ok().out
    assert "by operator (authenticated) on behalf of alice@security" in out
    assert out.count("schedule.held") == 2 and out.count("schedule.released") == 1


@shows(r"^nats-scheduler schedules \"\$DEP\" --json \| jq '\.schedule\.hold'")
def _cli_hold(sh: Shell, h: History, command: str) -> None:
    hold = sh.run(command, DEP=DEP).json()
    assert (hold["by"], hold["caller"], hold["reason"]) == (
        "operator", {"user": "operator", "account": "SCHED_OPS"}, "freeze")


@shows(r"^FROM=\$\(date -u -d yesterday")
def _yesterday(sh: Shell, h: History, command: str) -> None:
    out = sh.run(command + '\nprintf "%s %s" "$FROM" "$TO"').ok().out
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    assert out in {f"{(day - timedelta(days=1)):%Y-%m-%dT%H:%M:%SZ} {day:%Y-%m-%dT%H:%M:%SZ}"
                   for day in (today, today - timedelta(days=1))}  # a run across midnight


def _today(h: History) -> dict[str, str]:
    start = h.started_at.replace(hour=0, minute=0, second=0, microsecond=0)
    end = datetime.now(UTC) + timedelta(days=1)
    return {"FROM": f"{start:%Y-%m-%dT%H:%M:%SZ}", "TO": f"{end:%Y-%m-%dT%H:%M:%SZ}"}


@shows(r"^nats sub --stream SCHED_RUNS --since 48h ")
def _failures(sh: Shell, h: History, command: str) -> None:
    found = sh.run(command, **_today(h)).json_lines()
    kinds = {(e["type"], e["run"]) for e in found}
    assert (("run.attempt_failed", h.scheduled) in kinds and ("run.failed", h.failed) in kinds)
    assert {e["deployment"] for e in found} == {DEP, "flaky"} and all(e["error"] for e in found)


@shows(r"^nats-scheduler events --type run\.failed --type run\.attempt_failed ")
def _cli_failures(sh: Shell, h: History, command: str) -> None:
    found = sh.run(command, **_today(h)).json_lines()
    assert {(e["type"], e["run"]) for e in found} >= {("run.attempt_failed", h.scheduled),
                                                       ("run.failed", h.failed)}


@shows(r"^nats stream get SCHED_RUNS --last-for ")
def _sent_now(sh: Shell, h: History, command: str) -> None:
    out = sh.run(command, RUN=h.replay).ok().out
    (line,) = [x for x in out.splitlines() if x.startswith("{")]
    run = json.loads(line)["run"]
    assert (run["run_id"], run["replay_of"], run["trigger"]) == (h.replay, h.scheduled, "replay")
    assert run["session_id"] and run["payload"]["prompt"] == f"Summarise for {DEP}"


@shows(r"^nats sub .*\"SCHED\.run\.\*\.\$RUN\" +\| jq -c '\{type, at, actor, attempt")
def _each_call(sh: Shell, h: History, command: str) -> None:
    found = sh.run(command, RUN=h.replay).json_lines()
    assert found[0]["type"] == "run.created" and found[-1]["type"] == "run.session_started"
    assert found[-1]["session_id"] and all(identity(e["actor"]) for e in found)


@shows(r"^nats-scheduler run \"\$RUN\" --json")
def _cli_run(sh: Shell, h: History, command: str) -> None:
    run = sh.run(command, RUN=h.replay).json()
    assert (run["run_id"], run["replay_of"], run["attempts"]) == (h.replay, h.scheduled, 1)
    assert run["session_id"]


@shows(r"^nats sub .*\| jq -c 'select\(\.type == \"run\.created\" or \.type == \"run\.claimed\"")
def _taken_over(sh: Shell, h: History, command: str) -> None:
    found = sh.run(command, RUN=h.taken_over).json_lines()
    created, claimed = found[0], found[-1]
    assert (created["type"], created["actor"], created["holder"]) == (
        "run.created", "replica-a", "replica-a")
    assert (claimed["type"], claimed["actor"], claimed["holder"], claimed["takeover_from"]) == (
        "run.claimed", "replica-b", "replica-b", "replica-a")
    assert claimed["attempt"] == 2 and claimed["session_id"] == h.session_of_taken_over


@shows(r"^nats-scheduler events --type run\.created --type run\.claimed ")
def _cli_taken_over(sh: Shell, h: History, command: str) -> None:
    found = sh.run(command, RUN=h.taken_over).json_lines()
    assert [(e["type"], e["actor"], e["takeover_from"]) for e in found] == [
        ("run.created", "replica-a", None), ("run.claimed", "replica-b", "replica-a")]


@shows(r"^nats sub .*\.run\.trigger != \"schedule\"")
@shows(r"^nats-scheduler events --deployment \"\$DEP\" --type run\.created ")
def _who_asked(sh: Shell, h: History, command: str) -> None:
    found = {r["run_id"]: r for r in sh.run(command, DEP=DEP).json_lines()}
    assert set(found) == {h.run_now, h.replay}
    assert {r["requested_by"] for r in found.values()} == {"operator"}
    assert found[h.replay]["replay_of"] == h.scheduled
    assert found[h.run_now]["reason"] == "check" and found[h.replay]["reason"] == "again"


@shows(r"^nats kv get SCHED_LEASES ")
def _lease(sh: Shell, h: History, command: str) -> None:
    out = sh.run(command, RUN=h.replay).ok().out
    assert f"SCHED_LEASES > {h.replay} revision: " in out
    assert f'"run_id":"{h.replay}","holder":"replica-b"' in out


@shows(r"^nats kv ls SCHED_LEASES$")
def _leases(sh: Shell, h: History, command: str) -> None:
    done = sh.run(command).ok()
    assert h.replay in done.out.split()
    assert "CONSUMER.DELETE.KV_SCHED_LEASES" in done.err  # the clean-up the guide names


@shows(r"^nats-scheduler status --json \| jq '\.cluster\.leases'")
def _cli_leases(sh: Shell, h: History, command: str) -> None:
    done = sh.run(command)
    assert done.code == 7  # status says the store is unhealthy: a Run failed today
    leases = {lease["run_id"]: lease["holder"] for lease in json.loads(done.out)}
    assert leases.get(h.replay) == "replica-b"


@shows(r"schedule\.applied\" or \.type == \"schedule\.deleted\"\) \| \{at, type, actor, version")
def _definition(sh: Shell, h: History, command: str) -> None:
    edits = sh.run(command, DEP=DEP).json_lines()
    assert [(e["type"], e["version"], e["cron"]) for e in edits] == [
        ("schedule.applied", 1, CRON), ("schedule.applied", 2, "30 2 1 1 *")]
    disabled = sh.run(command, DEP="paused-report").json_lines()
    assert [e["enabled"] for e in disabled] == [True, False]
    deleted = sh.run(command, DEP=token("team.a/report")).json_lines()
    assert [e["type"] for e in deleted] == ["schedule.applied", "schedule.deleted"]


@shows(r"^nats-scheduler events --deployment \"\$DEP\" --type schedule\.applied ")
def _cli_definition(sh: Shell, h: History, command: str) -> None:
    out = sh.run(command, DEP=DEP).ok().out
    assert "v1 0 2 1 1 *" in out and "v2 30 2 1 1 *" in out


@shows(r"^nats micro ls$")
def _micro_ls(sh: Shell, h: History, command: str) -> None:
    out = sh.run(command).ok().out
    assert out.count("astrabox-scheduler") == 1  # replica-b only: replica-a was killed


@shows(r"^nats micro info astrabox-scheduler$")
def _micro_info(sh: Shell, h: History, command: str) -> None:
    out = sh.run(command).ok().out
    assert re.search(r"callers: authenticated", out) and "identity: replica-b" in out
    assert "prefix: SCHED" in out and "Subject: SCHED.admin.schedules.hold" in out


@shows(r"^nats micro stats astrabox-scheduler$")
def _micro_stats(sh: Shell, h: History, command: str) -> None:
    out = sh.run(command).ok().out
    hold = re.search(r"│ schedules_hold\s+│ (\d+)", out)
    assert hold and int(hold.group(1)) >= 2  # the operators' holds through replica-b


@shows(r"^nats stream view SCHED_SCHEDULES ")
def _schedule_view(sh: Shell, h: History, command: str) -> None:
    done = sh.run_in_terminal(command, DEP=DEP)
    assert done.code == 0, done.out
    subjects = set(re.findall(r"^\[\d+\] Subject: (\S+) Received: ", done.out, re.MULTILINE))
    assert subjects == {f"SCHED.sched.{DEP}"}, done.out
    assert re.findall(r'"type":"(schedule\.[a-z]+)"', done.out) == SCHEDULE_CHANGES


SCHEDULE_CHANGES = ["schedule.applied", "schedule.applied", "schedule.held",
                    "schedule.released", "schedule.held"]
"""DEP's Schedule events, in order: v1, the edit to v2, the operators' hold, release, hold."""


@shows(r"\| jq -c '\{type, at, version: \.schedule\.version, cron")
def _calendar_as_it_stood(sh: Shell, h: History, command: str) -> None:
    changes = sh.run(command, DEP=DEP).json_lines()
    assert [c["type"] for c in changes] == SCHEDULE_CHANGES
    assert [(c["version"], c["cron"]) for c in changes] == [(1, CRON)] + [
        (2, "30 2 1 1 *")] * 4
    assert all(c["timezone"] == "Europe/Berlin" and c["enabled"] and not c["deleted"]
               for c in changes)
    held = [c["hold"] for c in changes]
    assert held[:2] == [None, None] and held[3] is None
    assert (held[2]["reason"], held[4]["reason"]) == ("maintenance window", "freeze")
    deleted = sh.run(command, DEP=token("team.a/report")).json_lines()
    assert [c["deleted"] for c in deleted] == [False, True]


@shows(r"^python -c .*scheduled_run_id")
def _run_id_of_a_due_time(sh: Shell, h: History, command: str) -> None:
    assert sh.run(command).ok().out.strip() == h.scheduled


@shows(r"^nats sub --stream SCHED_OUTAGES ")
def _outages(sh: Shell, h: History, command: str) -> None:
    deadline = time.monotonic() + 30
    while not (records := sh.run(command).json_lines()):
        # the record is written a few seconds after the replicas' start (they settle first)
        assert time.monotonic() < deadline, "no outage recorded"
        time.sleep(0.2)  # poll interval
    (record,) = records
    assert record["type"] == "outage.recorded" and identity(record["actor"])
    start, end = (datetime.fromisoformat(record[k]) for k in ("start", "end"))
    assert h.started_at < start < end < datetime.now(UTC) and record["evidence"]


@shows(r"^nats kv ls SCHED_REPLICAS$")
def _replicas(sh: Shell, h: History, command: str) -> None:
    assert "replica-b" in sh.run(command).ok().out.split()


@shows(r"^nats-scheduler explain ")
def _explain(sh: Shell, h: History, command: str) -> None:
    """DEP's one due time of that day on the calendar in force (v2, 02:30 Berlin), not due
    yet; the Run fired for 01:00 UTC is of the calendar before the edit."""
    accounted = sh.run(command, DEP=DEP).json_lines()
    assert accounted == [{"due_at": "2031-01-01T01:30:00Z", "outcome": "pending",
                          "reason": None, "run_id": None, "since": None, "until": None,
                          "by": None, "note": None}]


@shows(r"^nats stream info SCHED_RUNINDEX --json")
def _retention(sh: Shell, h: History, command: str) -> None:
    ninety_days = 90 * 24 * 3600 * 10**9
    assert sh.run(command).json() == {"max_age": ninety_days, "max_msgs_per_subject": 10000}


@shows(r"^nats stream add SCHED_(RUNS|SCHEDULES)_ARCHIVE ")
def _archive(sh: Shell, h: History, command: str) -> None:
    """The auditor may not create it; a user that may does (R1: a single test server)."""
    refused = sh.run(command + " --timeout 2s")
    assert refused.code != 0 and "Permissions Violation" in refused.out + refused.err
    as_admin = command.replace("--replicas 3", "--replicas 1") + (
        f" --user {ADMIN} --password {ADMIN_PASSWORD}")
    sh.run(as_admin).ok()
    archive, source = command.split()[3], command.split()[5]

    def count(stream: str) -> int:
        info = sh.run(f"nats stream info {stream} --json --user {ADMIN} "
                      f"--password {ADMIN_PASSWORD}").json()
        return int(info["state"]["messages"])

    deadline = time.monotonic() + 20
    while count(archive) != count(source):
        assert time.monotonic() < deadline, f"{archive} never caught up with {source}"
        time.sleep(0.1)  # poll interval while the mirror copies


def check_of(command: str) -> Check:
    matching = [check for pattern, check in CHECKS if re.search(pattern, command)]
    assert len(matching) == 1, f"{len(matching)} checks for: {command}"
    return matching[0]


# =========================================================================== the tests


def test_every_command_of_the_guide_has_exactly_one_check() -> None:
    commands = guide_commands()
    for command in commands:
        check_of(command)
    used = {pattern for pattern, _ in CHECKS if any(re.search(pattern, c) for c in commands)}
    assert used == {pattern for pattern, _ in CHECKS}, "a check for a command no longer there"


@pytest.mark.parametrize("command", guide_commands(), ids=lambda c: c[:70])
async def test_nats_cli_runs_the_audit_guide(shell: Shell, history: History,
                                             command: str) -> None:
    """One command of docs/audit.md with the real ``nats`` CLI (or ``nats-scheduler``), as
    the auditor, showing what the guide says it shows; the server refuses the auditor
    nothing on the way but the consumer clean-ups the guide names."""
    before = len(violations(history.server, "auditor"))
    await asyncio.to_thread(check_of(command), shell, history, command)
    refused = violations(history.server, "auditor")[before:]
    if command.startswith("nats stream add "):  # the auditor's attempt, refused on purpose
        refused = [v for v in refused if "$JS.API.STREAM.CREATE." not in v]
    assert [v for v in refused if not CLEAN_UP.match(v)] == [], command


AUDITOR_WRITES = [
    ("nats pub SCHED.run.x.y '{}'", "SCHED.run.x.y"),
    ("nats req SCHED.admin.schedules.hold '{\"deployment_id\": \"nightly-report\"}'",
     "SCHED.admin.schedules.hold"),
    ("nats stream purge SCHED_RUNS -f", "$JS.API.STREAM.PURGE.SCHED_RUNS"),
    ("nats stream rmm SCHED_RUNS 1 -f", "$JS.API.STREAM.MSG.DELETE.SCHED_RUNS"),
    ("nats stream rm SCHED_SCHEDULES -f", "$JS.API.STREAM.DELETE.SCHED_SCHEDULES"),
    ("nats kv del SCHED_LEASES some-run -f", "$KV.SCHED_LEASES.some-run"),
    ("nats kv put SCHED_LEASES some-run forged", "$KV.SCHED_LEASES.some-run"),
]


async def test_nats_cli_the_auditor_cannot_publish_purge_or_delete(
        shell: Shell, history: History) -> None:
    """Each write the auditor tries with the CLI is refused by the server (it says so), and
    the store is unchanged afterwards."""
    nc, _ = await connect_as(history.server, "auditor")
    try:
        before = await store_state(nc)
        attempts = await asyncio.gather(*(asyncio.to_thread(shell.run, f"{command} --timeout 1s")
                                          for command, _ in AUDITOR_WRITES))
        refused = violations(history.server, "auditor")
        for (command, subject), done in zip(AUDITOR_WRITES, attempts, strict=True):
            assert f'Permissions Violation for Publish to "{subject}"' in done.out + done.err, (
                command, done)
            assert f"publish {subject}" in refused, command
        after = await store_state(nc)
        leases = await nc.jetstream(timeout=2.0).key_value(NAMES.leases_bucket)
        with pytest.raises(nats.js.errors.KeyNotFoundError):
            await leases.get("some-run")
    finally:
        await nc.close()
    # the event streams are untouched (the lease bucket moves: the Replay's lease renews)
    lease_stream = f"KV_{NAMES.leases_bucket}"
    assert {k: v for k, v in after.items() if k != lease_stream} == {
        k: v for k, v in before.items() if k != lease_stream}


QUIET = {"DEP": "quiet-day", "RUN": "no-such-run", "FROM": "2026-11-01T00:00:00Z",
         "TO": "2026-12-01T00:00:00Z"}


async def test_nats_cli_every_read_of_the_guide_ends_on_a_quiet_day(
        nats_cli: Path, jq: str, tmp_path: Path) -> None:
    """On a store with no Schedule and no Run, every ``nats sub`` of the guide ends by
    itself (``--wait``) and prints nothing, as the guide promises."""
    reads = [c for c in guide_commands() if c.startswith("nats sub ")]
    assert len(reads) >= 8
    with prod_server(tmp_path / "nats") as server:
        async with scheduler_with_service(server) as (provider, _):  # the streams, empty
            assert provider.runtime is not None and provider.runtime.outages is not None
            await asyncio.wait_for(provider.runtime.outages.decided.wait(), 30)
            sh = Shell({"PATH": os.pathsep.join([str(Path(nats_cli).parent),
                                                 os.environ.get("PATH", "")]),
                        "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "config"),
                        "NATS_TIMEOUT": "2s"})
            auth = f" --server {server.url} --user auditor --password {PASSWORDS['auditor']}"
            done = await asyncio.gather(*(asyncio.to_thread(
                sh.run, c.replace("nats sub ", "nats sub" + auth + " ", 1), 30.0, **QUIET)
                for c in reads))
    for result in done:
        assert result.code == 0 and result.out == "", result
        assert result.seconds < 20, result  # --wait 5s, with room for a busy machine
