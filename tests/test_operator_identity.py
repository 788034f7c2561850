"""Who did it, as the server knows it: every operator action records the authenticated user.

On the committed ``nats-server.conf`` the admin service runs in an account of its own
(``SCHED_ADMIN``, user ``service``) and operators reach it through a service import with
``share: true``; crossing it, every request gets a ``Nats-Request-Info`` header that the
SERVER writes. The tests here give the config a second operator and prove, on the stored
events, that each one's hold, release, bulk hold and Run now name that operator; that a
``--by`` naming someone else is kept as "on behalf of" only; and that a forged
``Nats-Request-Info`` header, sent through nats-py or as raw protocol lines the server's
stripping might miss, never becomes the recorded user (nats-server 2.15.1 from the wheel:
the CVE-2026-33223 and CVE-2026-33246 fixes of 2.12.6 hold). Without a login of its own the
service proves nobody and says so.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from nats_scheduler.admin.api import AdminError, ErrorCode
from nats_scheduler.admin.callers import UNPROVEN, proven_caller
from nats_scheduler.admin.client import AdminClient
from nats_scheduler.core.events import Caller
from nats_scheduler.names import HDR_REQUEST_INFO, Names
from nats_scheduler.natsserver.config import REPO_CONFIG
from nats_scheduler.natsserver.process import NatsServer
from nats_scheduler.seam import RunPayload, Schedule
from tests.harness.servers import connect_fast, unique_prefix
from tests.providers import eventually, running
from tests.security_support import PASSWORDS, connect_as, prod_server, scheduler_with_service
from tests.security_support import _cli as cli_in_process

pytestmark = pytest.mark.anyio

NAMES = Names("SCHED")
SECOND = "operator-2"
SECOND_PASSWORD = "operator-2-test-pw"
OPERATOR_LINE = ('{ user: "operator",  password: $NATS_OPERATOR_PASSWORD,  '
                 'permissions: $OPERATOR_PERMISSIONS }')
ACCOUNT = "SCHED_OPS"


def two_operators() -> str:
    """The committed config with a second operator, as a platform team adds one."""
    text = REPO_CONFIG.read_text("utf-8")
    assert OPERATOR_LINE in text
    return text.replace(OPERATOR_LINE, OPERATOR_LINE + f'\n      {{ user: "{SECOND}", '
                        f'password: "{SECOND_PASSWORD}", permissions: $OPERATOR_PERMISSIONS }}')


def schedule(dep: str) -> Schedule:
    return Schedule(dep, f"name of {dep}", "0 3 1 1 *", "UTC", True,
                    RunPayload("agent://report", f"prompt of {dep}"))


async def cli(server: NatsServer, user: str, password: str, *argv: str) -> tuple[int, str, str]:
    auth = ["--url", server.url, "--user", user, "--password", password]
    return await asyncio.to_thread(cli_in_process, [*argv, *auth])


async def stored_schedule_events(server: NatsServer, dep: str) -> list[dict[str, Any]]:
    """Every stored event of ``dep``'s Schedule, oldest first, read as the auditor."""
    nc, _ = await connect_as(server, "auditor")
    try:
        js = nc.jetstream(timeout=2.0)
        found, seq = [], 0
        subject = NAMES.schedule_subject(dep)
        while True:
            try:
                msg = await js.get_msg(NAMES.schedules_stream, seq=seq + 1, subject=subject,
                                       next=True)
            except Exception:  # nats.js.errors.NotFoundError: no later message
                return found
            found.append(json.loads(msg.data))
            seq = msg.seq
    finally:
        await nc.close()


def operator_changes(events: list[dict[str, Any]]) -> list[tuple[str, str, Any, Any]]:
    """(type, by, caller, on_behalf_of) of every hold and release."""
    return [(e["type"], e["by"], e["caller"], e["on_behalf_of"]) for e in events
            if e["type"] in ("schedule.held", "schedule.released")]


def proven(user: str) -> dict[str, str]:
    return {"user": user, "account": ACCOUNT}


async def test_each_operator_is_recorded_under_the_name_the_server_authenticated(
        tmp_path: Path) -> None:
    """Two operators, each naming the other with ``--by``: the trail says who really acted."""
    with prod_server(tmp_path / "nats", config_text=two_operators()) as server:
        async with scheduler_with_service(server) as (provider, service):
            assert service.proves_callers
            for dep in ("sec-1", "sec-2", "bulk-a", "bulk-b"):
                await provider.apply(schedule(dep))
            first = ("operator", PASSWORDS["operator"])
            second = (SECOND, SECOND_PASSWORD)
            # the example: a hold "by alice@security" from the operator user
            code, _, err = await cli(server, *first, "hold", "sec-1", "--reason", "spoof",
                                     "--by", "alice@security")
            assert code == 0, err
            code, _, err = await cli(server, *second, "release", "sec-1", "--reason", "done",
                                     "--by", "operator")
            assert code == 0, err
            code, out, err = await cli(server, *second, "hold", "sec-2", "--reason", "mine")
            assert code == 0, err
            assert f"held by {SECOND} (authenticated)" in out
            code, _, err = await cli(server, *first, "hold", "--filter", "bulk-",
                                     "--reason", "freeze", "--by", SECOND)
            assert code == 0, err
            code, out, err = await cli(server, *second, "run-now", "sec-2", "--json")
            assert code == 0, err
            assert json.loads(out)["requested_by"] == SECOND
            # naming someone else for it is kept apart, as "on behalf of", never as who asked
            code, out, err = await cli(server, *first, "run-now", "sec-2", "--by", SECOND,
                                       "--json")
            assert code == 0, err
            behalf = json.loads(out)
            assert (behalf["requested_by"], behalf["on_behalf_of"]) == ("operator", SECOND)

            sec1 = operator_changes(await stored_schedule_events(server, "sec-1"))
            assert sec1 == [
                ("schedule.held", "operator", proven("operator"), "alice@security"),
                ("schedule.released", SECOND, proven(SECOND), "operator"),
            ]
            assert operator_changes(await stored_schedule_events(server, "sec-2")) == [
                ("schedule.held", SECOND, proven(SECOND), None)]
            for dep in ("bulk-a", "bulk-b"):
                (held,) = operator_changes(await stored_schedule_events(server, dep))
                assert held == ("schedule.held", "operator", proven("operator"), SECOND)
            # the Schedule's current hold says the same (what `nats stream get` shows)
            record = provider.schedules.get("bulk-a")
            assert record is not None and record.hold is not None
            assert record.hold.caller == Caller(user="operator", account=ACCOUNT)
            assert (record.hold.by, record.hold.on_behalf_of) == ("operator", SECOND)
            runs = await provider.runs_page("sec-2")
            assert [(r.requested_by, r.on_behalf_of) for r in runs] == [
                ("operator", SECOND), (SECOND, None)]


async def test_a_forged_request_info_header_never_becomes_the_recorded_user(
        tmp_path: Path) -> None:
    """The operator sends a ``Nats-Request-Info`` naming someone else, in every spelling
    the server's header stripping might miss; the server's own value is what the service
    reads, and the stored event names the operator."""
    forged = json.dumps({"acc": ACCOUNT, "user": "mallory", "name": "forged"})
    with prod_server(tmp_path / "nats") as server:
        async with scheduler_with_service(server) as (provider, _):
            deps = [f"forge-{i}" for i in range(6)]
            for dep in deps:
                await provider.apply(schedule(dep))
            nc, _ = await connect_as(server, "operator")
            try:
                body = json.dumps({"deployment_id": deps[0], "by": "mallory",
                                   "reason": "forged"}).encode()
                answer = await nc.request(NAMES.admin_subject("schedules.hold"), body,
                                          timeout=5, headers={HDR_REQUEST_INFO: forged})
                assert json.loads(answer.data)["hold"]["by"] == "operator"
            finally:
                await nc.close()
            raw_lines = [f"{HDR_REQUEST_INFO}: {forged}",
                         f"{HDR_REQUEST_INFO} : {forged}",
                         f"{HDR_REQUEST_INFO}:{forged}\r\n{HDR_REQUEST_INFO}: {forged}",
                         f"{HDR_REQUEST_INFO.lower()}: {forged}",
                         f"{HDR_REQUEST_INFO}:\t{forged}"]
            for dep, line in zip(deps[1:], raw_lines, strict=True):
                reply = await raw_request(server, NAMES.admin_subject("schedules.hold"),
                                          line, {"deployment_id": dep, "by": "mallory",
                                                 "reason": "forged"})
                assert json.loads(reply)["hold"]["by"] == "operator", line
            for dep in deps:
                (held,) = operator_changes(await stored_schedule_events(server, dep))
                assert held[1:3] == ("operator", proven("operator")), (dep, held)


async def raw_request(server: NatsServer, subject: str, header_lines: str,
                      body: dict[str, str]) -> bytes:
    """One request as raw protocol (``HPUB``) from the ``operator`` user, with the header
    block written by hand; returns the answer's payload."""
    host, port = server.url.removeprefix("nats://").split(":")
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, int(port)), 5)
    try:
        await asyncio.wait_for(reader.readline(), 5)  # INFO
        connect = {"user": "operator", "pass": PASSWORDS["operator"], "headers": True,
                   "verbose": False, "pedantic": False, "protocol": 1}
        headers = f"NATS/1.0\r\n{header_lines}\r\n\r\n".encode()
        payload = json.dumps(body).encode()
        writer.write(b"CONNECT " + json.dumps(connect).encode() + b"\r\nSUB _INBOX.raw 1\r\n"
                     + b"PING\r\n")
        await writer.drain()
        writer.write(b"HPUB %s _INBOX.raw %d %d\r\n" % (subject.encode(), len(headers),
                                                      len(headers) + len(payload))
                     + headers + payload + b"\r\n")
        await writer.drain()
        return await asyncio.wait_for(_read_answer(reader, writer), 10)
    finally:
        writer.close()


async def _read_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes:
    """The payload of the first MSG/HMSG on the connection (PINGs answered meanwhile)."""
    while True:
        line = (await reader.readline()).rstrip(b"\r\n")
        if line == b"PING":
            writer.write(b"PONG\r\n")
            await writer.drain()
        elif line.startswith((b"MSG ", b"HMSG ")):
            parts = line.split()
            size = int(parts[-1])
            data = (await reader.readexactly(size + 2))[:size]
            header_size = int(parts[-2]) if line.startswith(b"HMSG ") else 0
            return data[header_size:]
        elif line.startswith(b"-ERR"):
            raise AssertionError(line.decode())


async def test_without_a_login_of_its_own_the_service_proves_nobody(nats_url: str) -> None:
    """A service sharing the provider's connection (development) cannot tell a forged header
    from a real one, so it believes none: the client's own name is recorded, unproven, and
    ``nats micro info`` shows ``callers: stated``."""
    prefix = unique_prefix()
    async with running(nats_url, prefix) as provider:
        await provider.apply(schedule("dev-1"))
        service = provider.runtime.admin  # type: ignore[union-attr]
        assert service is not None and not service.proves_callers  # type: ignore[attr-defined]
        nc = await connect_fast(nats_url)
        try:
            client = AdminClient(nc, prefix, timeout=5.0)
            held = await client.hold("dev-1", by="dev@laptop", reason="try",
                                     on_behalf_of="alice")
            assert held.hold is not None
            assert (held.hold.by, held.hold.caller, held.hold.on_behalf_of) == (
                "dev@laptop", None, "alice")
            forged = json.dumps({"acc": ACCOUNT, "user": "mallory"})
            body = json.dumps({"deployment_id": "dev-1", "by": "dev@laptop",
                               "reason": "again"}).encode()
            answer = await nc.request(Names(prefix).admin_subject("schedules.release"), body,
                                      timeout=5, headers={HDR_REQUEST_INFO: forged})
            assert json.loads(answer.data)["hold"] is None
            await eventually(lambda: _released(provider, "dev-1"), timeout=5)
        finally:
            await nc.close()


async def _released(provider: Any, dep: str) -> bool:
    record = provider.schedules.get(dep)
    return record is not None and record.hold is None


def test_an_action_that_arrives_unproven_where_proof_is_expected_is_refused() -> None:
    """The service with its own login refuses an action whose request carries no identity
    the server wrote (it could only come from inside the service's account)."""
    with pytest.raises(AdminError) as refused:
        proven_caller({}, proves=True)
    assert refused.value.code == ErrorCode.FORBIDDEN and refused.value.message == UNPROVEN
    assert proven_caller({HDR_REQUEST_INFO: "not json"}, proves=False) is None
    assert proven_caller({HDR_REQUEST_INFO: '{"acc": "A", "user": "u"}'},
                         proves=True) == Caller(user="u", account="A")
