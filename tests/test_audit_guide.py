"""docs/audit.md is consistent with itself and with what the provider stores.

``tests/test_audit_cli.py`` runs every command of the guide with the real ``nats`` CLI
against a store with history and checks what each shows. This module checks the page
itself, with no CLI needed: it names every stream, bucket and event type there is; every
``nats sub`` of it ends on a quiet day (``--wait``: ``--terminate-at-end`` alone stops only at
a matching message); its ``Nats-Msg-Id`` example has the format the store writes
(``tests/test_msg_id.py`` pins it on a server); and every ``nats-scheduler`` command of it
returns on an empty store, found or not found.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from nats_scheduler.cli.common import EXIT_NOT_FOUND, EXIT_OK
from nats_scheduler.cli.main import main as cli_main
from nats_scheduler.core.events import RunEventType, ScheduleEventType
from nats_scheduler.names import Names, token
from nats_scheduler.testing.handler import RecordingRunHandler
from tests.security_support import PASSWORDS, prod_server, scheduler_with_service

pytestmark = pytest.mark.anyio

DOC = Path(__file__).resolve().parent.parent / "docs" / "audit.md"
NAMES = Names("SCHED")
DEP = "nightly-report"
TAGS = {t.__struct_config__.tag for t in (*RunEventType.__args__,  # type: ignore[attr-defined]
                                          *ScheduleEventType.__args__)}  # type: ignore[attr-defined]


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
            if re.match(r"nats (stream|sub|kv|micro) |nats-scheduler ", c)]


def split_pipeline(command: str) -> list[str]:
    """The argv of the command before its first pipe."""
    head, _, _ = command.partition(" | ")
    return shlex.split(head, comments=True)


def run_cli(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli_main(argv)
    return code, out.getvalue()


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
        argv = split_pipeline(command)
        assert argv[1:3] in (["stream", "subjects"], ["stream", "view"], ["stream", "get"],
                             ["stream", "info"], ["stream", "add"], ["kv", "get"],
                             ["kv", "ls"], ["micro", "ls"], ["micro", "info"],
                             ["micro", "stats"]) or argv[1] == "sub", command
        if argv[1] == "sub":
            assert "--wait" in argv and WAIT.match(argv[argv.index("--wait") + 1]), command
            assert "--terminate-at-end" in argv or "--count" in argv, command


def test_the_guide_shows_the_msg_id_format_of_a_scheduled_run() -> None:
    text = DOC.read_text("utf-8")
    assert "Nats-Msg-Id: <deployment>@<due time in UTC, YYYY-MM-DDTHH:MMZ>" in text
    assert "Nats-Expected-Last-Subject-Sequence: 0" in text
    assert f"`{token('team.a/report')}@2031-01-01T01:00Z`" in text
    assert "tests/test_msg_id.py" in text


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
                argv = split_pipeline(quiet)
                code, output = await asyncio.wait_for(asyncio.to_thread(run_cli, argv[1:]),
                                                      30)
                # answered: found nothing (0), or said "not found" for one named thing (3)
                assert code in (EXIT_OK, EXIT_NOT_FOUND), (command, code, output)
                if argv[1] == "events":
                    assert output == "", command  # nothing happened: nothing printed
