"""docs/audit.md cannot rot: every command in it is checked against a live store.

The guide's shell blocks are parsed. For each ``nats`` command, the stream or bucket it
names must exist and its subject filter (with ``$DEP``/``$RUN`` filled in) must match stored
messages; the JSON fields its ``jq`` filter reads must be present in those messages (after
the ``select(.type == ...)`` it applies), and every event type it names must be a real one.
Every ``nats-scheduler`` command is run (as the read-only ``auditor``) and its JSON output
checked the same way. The ``nats`` CLI itself is not installable here, so the reads it would
do are done with nats-py as the same user.

Every command must also return when nothing matches (a quiet day): each ``nats sub`` carries
``--wait``, because ``--terminate-at-end`` only stops at a matching message, and every
``nats-scheduler`` command is run once more for a deployment and a Run that do not exist.
The ``Nats-Msg-Id`` the guide shows for a scheduled Run is read back from the store.

The store is filled by one scenario that produces every kind of event the guide asks about:
a due time fired after a failed attempt, a hold and its release, a Run now, a Run that
failed for good, a Replay being dispatched right now (so it holds a lease), a changed and a
deleted Schedule, and an outage (a process stopped before the scenario's one started).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import re
import shlex
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nats.errors
import pytest
from nats.aio.client import Client
from nats.js.api import DeliverPolicy, RawStreamMsg

from nats_scheduler.admin.reader import last_per_subject
from nats_scheduler.cli.common import EXIT_NOT_FOUND, EXIT_OK
from nats_scheduler.cli.main import main as cli_main
from nats_scheduler.core.events import OutageEventType, RunEventType, ScheduleEventType
from nats_scheduler.names import HDR_MSG_ID, Names, token
from nats_scheduler.natsserver.process import NatsServer
from nats_scheduler.seam import EnqueueRequest, RunPayload, RunState, Schedule, Trigger
from nats_scheduler.testing.handler import RecordingRunHandler
from tests.providers import eventually
from tests.security_support import (
    PASSWORDS,
    connect_as,
    prod_server,
    scheduler_with_service,
    violations,
)

pytestmark = pytest.mark.anyio

DOC = Path(__file__).resolve().parent.parent / "docs" / "audit.md"
NAMES = Names("SCHED")
DEP = "nightly-report"
TAGS = {t.__struct_config__.tag for t in (*RunEventType.__args__,  # type: ignore[attr-defined]
                                          *ScheduleEventType.__args__,  # type: ignore[attr-defined]
                                          OutageEventType)}


# =========================================================================== the guide, parsed


def shell_commands(text: str) -> list[str]:
    """Every command line of the ``sh`` blocks, continuation lines joined."""
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.DOTALL):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                commands.append(line)
    return commands


def checked_commands() -> list[str]:
    return [c for c in shell_commands(DOC.read_text("utf-8"))
            if re.match(r"nats (stream|sub|kv) |nats-scheduler ", c)]


def split_pipeline(command: str) -> tuple[list[str], str | None]:
    """(argv of the command, the jq program or None)."""
    head, _, rest = command.partition(" | ")
    argv = shlex.split(head, comments=True)
    if not rest:
        return argv, None
    jq = shlex.split(rest)
    assert jq[0] == "jq", command
    program = [a for i, a in enumerate(jq[1:], 1)
               if not a.startswith("-") and jq[i - 1] not in ("--arg",)
               and not (i >= 2 and jq[i - 2] == "--arg")]
    return argv, program[-1]


@dataclass
class JqNeeds:
    """What a jq program reads: (context path, field path) pairs and the types it selects."""

    paths: list[str]
    types: set[str]


_PATH = re.compile(r"(?<![\w$.\]])\.([A-Za-z_][\w]*(?:\[\])?(?:\.[A-Za-z_][\w]*(?:\[\])?)*)")


def jq_needs(program: str) -> JqNeeds:
    """The field paths a jq program reads, each relative to the document (``run.state``)."""
    paths: list[str] = []
    types = set(re.findall(r'\.type == "([^"]+)"', program))
    context = ""
    for stage in (s.strip() for s in program.split("|")):
        prefix = f"{context}." if context else ""
        if stage.startswith("{"):
            for item in stage.strip("{}").split(","):
                key, sep, value = item.partition(":")
                if sep:
                    paths += [prefix + p for p in _PATH.findall(value)]
                else:
                    paths.append(prefix + key.strip())
            continue
        found = [prefix + p for p in _PATH.findall(stage)]
        paths += found
        if re.fullmatch(r"\.[\w.\[\]]+", stage):
            context = found[0]
    return JqNeeds(paths, types)


def has_path(doc: Any, path: str) -> bool:
    node = [doc]
    for part in path.split("."):
        many = part.endswith("[]")
        key = part.removesuffix("[]")
        nxt = []
        for item in node:
            if isinstance(item, dict) and key in item:
                value = item[key]
                if many:
                    nxt += value if isinstance(value, list) else []
                else:
                    nxt.append(value)
        node = nxt
        if not node:
            return False
    return True


def check_jq(program: str | None, docs: list[dict[str, Any]], where: str) -> None:
    if program is None:
        return
    needs = jq_needs(program)
    assert needs.types <= TAGS, (where, needs.types - TAGS)
    if needs.types:
        docs = [d for d in docs if d.get("type") in needs.types]
    assert docs, f"{where}: nothing stored of the types {needs.types}"
    for path in needs.paths:
        assert any(has_path(d, path) for d in docs), f"{where}: no stored field {path}"


# =========================================================================== the store


@dataclass
class Scenario:
    server: NatsServer
    run_id: str
    """The Replay being dispatched right now (it holds a lease)."""
    scheduled_run_id: str
    """The Run of the due time 2031-01-01T01:00Z of ``DEP``."""


@pytest.fixture
async def scenario(tmp_path: Path) -> AsyncIterator[Scenario]:
    handler = RecordingRunHandler()
    handler.fail_transiently(1, deployment_id=DEP, method="start_session")
    handler.fail_permanently(deployment_id="flaky")
    with prod_server(tmp_path / "nats") as server:
        async with scheduler_with_service(server) as (first, _):
            assert first.runtime is not None  # it joins the live replicas, then stops:
            await asyncio.wait_for(first.runtime.outages.decided.wait(), 30)
            # the next start records the outage since
        async with scheduler_with_service(server, handler=handler,
                                          lease_seconds=30.0) as (provider, _):
            assert provider.runtime is not None
            await asyncio.wait_for(provider.runtime.outages.decided.wait(), 30)
            for dep in (DEP, "flaky", "team.a/report"):
                await provider.apply(Schedule(dep, f"{dep} job", "0 2 * * *", "Europe/Berlin",
                                              True, RunPayload("agent:reporter", "Summarise")))
            due = datetime(2031, 1, 1, 1, 0, tzinfo=UTC)  # 02:00 in Berlin
            fired = await provider.fire_due(DEP, due)
            failed = await provider.fire_due("flaky", due)
            assert fired is not None and failed is not None
            await provider.hold(DEP, by="alice", reason="maintenance window")
            await provider.release(DEP, by="alice", reason="done")
            now = await provider.enqueue(EnqueueRequest(DEP, Trigger.RUN_NOW,
                                                        requested_by="bob"), reason="check")

            async def settled() -> bool:
                states = [(await provider.get_run(r.run_id)).state for r in (fired, now)]
                return (states == [RunState.DISPATCHED] * 2 and
                        (await provider.get_run(failed.run_id)).state == RunState.FAILED)

            await eventually(settled, timeout=15)
            gate = handler.block(deployment_id=DEP, method="admit_turn")
            replay = await provider.enqueue(EnqueueRequest(
                DEP, Trigger.REPLAY, replay_of=fired.run_id, requested_by="carol"),
                reason="again")
            await gate.wait_until_blocked()
            await provider.apply(Schedule(DEP, "Nightly", "30 2 * * *", "Europe/Berlin", True,
                                          RunPayload("agent:reporter", "Summarise"), 2))
            await provider.delete("team.a/report")
            try:
                yield Scenario(server, replay.run_id, fired.run_id)
            finally:
                gate.release()


async def stored(nc: Client, stream: str, subject: str, *, last_per_subject_only: bool = False,
                 idle: float = 2.0) -> list[dict[str, Any]]:
    """The JSON of every stored message of ``stream`` matching ``subject`` (oldest first).

    Like ``nats sub --terminate-at-end --wait``: stops at the last message, or after ``idle``
    seconds without one when nothing matches.
    """
    if last_per_subject_only:
        items = await last_per_subject(nc, stream, subject)
        return [json.loads(i.data) for i in items]
    js = nc.jetstream(timeout=2.0)
    sub = await js.subscribe(subject, stream=stream, ordered_consumer=True,
                             deliver_policy=DeliverPolicy.ALL)
    found = []
    try:
        while True:
            try:
                msg = await sub.next_msg(idle)
            except nats.errors.TimeoutError:
                return found
            found.append(json.loads(msg.data))
            if msg.metadata.num_pending == 0:
                return found
    finally:
        await sub.unsubscribe()


async def first_of(nc: Client, stream: str, subject: str) -> RawStreamMsg:
    """The first stored message of ``subject`` (wildcards allowed), from the stream leader."""
    return await nc.jetstream(timeout=2.0).get_msg(stream, seq=1, subject=subject, next=True)


# =========================================================================== running the guide


def fill(command: str, scenario: Scenario, *, encoded: bool) -> str:
    dep = token(DEP) if encoded else DEP
    return command.replace("$DEP", dep).replace("$RUN", scenario.run_id)


async def check_nats(nc: Client, argv: list[str], program: str | None) -> None:
    where = " ".join(argv)
    js = nc.jetstream(timeout=2.0)
    match argv[1:3]:
        case ["stream", "subjects"]:
            stream, subject = argv[3], argv[4]
            info = await js.stream_info(stream, subjects_filter=subject)
            assert info.state.subjects, where
        case ["stream", "view"]:
            stream, subject = argv[3], argv[argv.index("--subject") + 1]
            assert await stored(nc, stream, subject), where
        case ["stream", "get"]:
            stream, subject = argv[3], argv[argv.index("--last-for") + 1]
            msg = await js.get_last_msg(stream, subject)
            check_jq(program, [json.loads(msg.data)], where)
        case ["sub", _] if "--headers-only" in argv:
            stream, subject = argv[argv.index("--stream") + 1], argv[-1]
            assert argv[argv.index("--count") + 1] == "1" and "--all" in argv, where
            msg = await first_of(nc, stream, subject)
            assert json.loads(msg.data)["type"] == "run.created", where
            assert (msg.headers or {}).get(HDR_MSG_ID), where
        case ["sub", _]:
            stream, subject = argv[argv.index("--stream") + 1], argv[-1]
            assert "--terminate-at-end" in argv and "--raw" in argv, where
            docs = await stored(nc, stream, subject,
                                last_per_subject_only="--last-per-subject" in argv)
            assert docs, where
            check_jq(program, docs, where)
        case ["stream", "info"]:
            info = await js.stream_info(argv[3])
            check_jq(program, [{"config": info.config.as_dict()}], where)
        case ["stream", "add"]:
            # An administrator's command (the auditor may not create streams): it must copy
            # one of the scheduler's streams and refuse deletes and purges of the copy.
            # test_a_mirror_keeps_what_retention_purges runs it for real.
            assert argv[argv.index("--mirror") + 1] in (NAMES.runs_stream,
                                                       NAMES.schedules_stream), where
            assert "--deny-delete" in argv and "--deny-purge" in argv, where
        case ["kv", "get"]:
            kv = await js.key_value(argv[3])
            entry = await kv.get(argv[4])
            assert entry.value, where
            assert {"run_id", "holder", "expires_at", "acquired_at"} <= set(
                json.loads(entry.value)), where
        case ["kv", "ls"]:
            assert await (await js.key_value(argv[3])).keys(), where
        case _:
            raise AssertionError(f"the test does not know how to check: {where}")


def run_cli(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli_main(argv)
    return code, out.getvalue()


def json_docs(output: str) -> list[dict[str, Any]]:
    try:
        return [json.loads(output)]
    except json.JSONDecodeError:
        return [json.loads(line) for line in output.splitlines() if line.strip()]


@pytest.fixture
def auditor_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("ASTRABOX_NATS_USER", "auditor")
    monkeypatch.setenv("ASTRABOX_NATS_PASSWORD", PASSWORDS["auditor"])
    yield


def test_the_guide_names_what_is_stored() -> None:
    text = DOC.read_text("utf-8")
    for name in (NAMES.schedules_stream, NAMES.runs_stream, NAMES.leases_bucket,
                 f"KV_{NAMES.leases_bucket}", NAMES.replicas_bucket,
                 f"KV_{NAMES.replicas_bucket}", "SCHED.sched.<deployment>",
                 "SCHED.run.<deployment>.<run>"):
        assert f"`{name}`" in text, name
    assert {t for t in TAGS if f"`{t}`" in text} == TAGS
    assert token("team.a/report") == "team%2Ea%2Freport" and "`team%2Ea%2Freport`" in text
    assert len(checked_commands()) >= 19


WAIT = re.compile(r"^\d+(ms|s|m|h)$")


def test_every_read_of_the_guide_returns_when_nothing_matches() -> None:
    """A quiet day must not hang a command: ``nats sub`` needs ``--wait`` to end empty-handed.

    ``--terminate-at-end`` and ``--count`` stop only at a message; with none they would wait
    for new events forever. The other ``nats`` commands are single requests, and
    ``nats stream view`` gives up after its pager's timeout.
    """
    nats_commands = [c for c in checked_commands() if c.startswith("nats ")]
    assert nats_commands
    for command in nats_commands:
        argv, _ = split_pipeline(command)
        assert argv[1:3] in (["stream", "subjects"], ["stream", "view"], ["stream", "get"],
                             ["stream", "info"], ["stream", "add"], ["kv", "get"],
                             ["kv", "ls"]) or argv[1] == "sub", command
        if argv[1] == "sub":
            assert "--wait" in argv and WAIT.match(argv[argv.index("--wait") + 1]), command
            assert "--terminate-at-end" in argv or "--count" in argv, command


def test_the_guide_shows_the_msg_id_format_of_a_scheduled_run() -> None:
    text = DOC.read_text("utf-8")
    assert "Nats-Msg-Id: <deployment>@<due time in UTC, YYYY-MM-DDTHH:MMZ>" in text
    assert "Nats-Expected-Last-Subject-Sequence: 0" in text
    assert f"`{token('team.a/report')}@2031-01-01T01:00Z`" in text
    assert "tests/test_msg_id.py" in text


async def test_every_command_of_the_guide_answers_from_the_store(
    scenario: Scenario, auditor_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ASTRABOX_NATS_URL", scenario.server.url)
    nc, _ = await connect_as(scenario.server, "auditor")
    try:
        for command in checked_commands():
            if command.startswith("nats-scheduler"):
                argv, program = split_pipeline(fill(command, scenario, encoded=False))
                code, output = await asyncio.to_thread(run_cli, argv[1:])
                assert code in (0, 7), (command, code, output)  # 7: status found failures
                if "--json" in argv:
                    check_jq(program, json_docs(output), command)
                else:
                    assert output.strip(), command
            else:
                argv, program = split_pipeline(fill(command, scenario, encoded=True))
                await check_nats(nc, argv, program)
        # The Msg-Id the guide shows is the one the scenario's due time was stored with.
        (example,) = re.findall(r"`Nats-Msg-Id: ([^`<]+)`", DOC.read_text("utf-8"))
        created = await first_of(nc, NAMES.runs_stream,
                                 NAMES.run_subject(DEP, scenario.scheduled_run_id))
        assert (created.headers or {}).get(HDR_MSG_ID) == example
    finally:
        await nc.close()
    assert violations(scenario.server, "auditor") == []  # all of it is the auditor's to read


async def test_every_cli_command_of_the_guide_returns_when_nothing_matches(
    auditor_env: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """On an empty store (no deployment, no Run) each command ends, found or not found."""
    with prod_server(tmp_path / "nats") as server:
        async with scheduler_with_service(server, handler=RecordingRunHandler()):
            monkeypatch.setenv("ASTRABOX_NATS_URL", server.url)
            for command in checked_commands():
                if not command.startswith("nats-scheduler"):
                    continue
                quiet = command.replace("$DEP", "quiet-day").replace("$RUN", "no-such-run")
                argv, _ = split_pipeline(quiet)
                code, output = await asyncio.wait_for(asyncio.to_thread(run_cli, argv[1:]),
                                                      30)
                # answered: found nothing (0), or said "not found" for one named thing (3)
                assert code in (EXIT_OK, EXIT_NOT_FOUND), (command, code, output)
                if argv[1] == "events":
                    assert output == "", command  # nothing happened: nothing printed
