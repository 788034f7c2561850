"""Helpers for the tests that run the production config (``nats-server.conf``).

* :data:`PASSWORDS` - the test passwords rendered into the config (it reads them from the
  server's environment in production).
* :func:`prod_server` - a started server running the committed config on test ports.
* :func:`connect_as` - a fail-fast connection as one of the config's users, with a
  :class:`~nats_scheduler.admin.permissions.ViolationLog` (so nats-py prints nothing).
* :func:`violations` - what the server logged as permission violations of one user: the
  proof a role did its work without being refused anything.
* :func:`store_state` - message count and last sequence of every scheduler stream, to prove
  that a refused action changed nothing.
* :func:`run_cli` - ``nats-scheduler`` as one of the users, in-process.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
from nats.aio.client import Client

from nats_scheduler.admin.permissions import ViolationLog
from nats_scheduler.admin.service import AdminService, start_admin_service
from nats_scheduler.cli.main import main as cli_main
from nats_scheduler.names import Names
from nats_scheduler.natsserver.config import production_server
from nats_scheduler.natsserver.process import NatsServer
from nats_scheduler.provider import NatsSchedulerProvider
from nats_scheduler.seam import RunHandler
from tests.harness.servers import FAST_CONNECT
from tests.providers import running

PASSWORDS = {"scheduler": "scheduler-test-pw", "service": "service-test-pw",
             "operator": "operator-test-pw", "auditor": "auditor-test-pw"}

_VIOLATION = re.compile(
    r'"[^"/]+/user:(\w+)" - (Publish|Subscription) Violation - Subject "([^"]+)"')


@contextlib.contextmanager
def prod_server(store_dir: Path, *, prefix: str = "SCHED", extra_config: str | None = None,
                config_text: str | None = None) -> Iterator[NatsServer]:
    """The committed nats-server.conf (or ``config_text``, a variant of it), started on test
    ports, stopped afterwards."""
    with production_server(store_dir, passwords=PASSWORDS, prefix=prefix,
                           extra_config=extra_config, config_text=config_text) as server:
        yield server


async def connect_as(server: NatsServer, user: str | None) -> tuple[Client, ViolationLog]:
    log = ViolationLog()
    auth = {} if user is None else {"user": user, "password": PASSWORDS[user]}
    nc = await nats.connect(servers=[server.url], error_cb=log.on_error, **FAST_CONNECT, **auth)
    return nc, log


def violations(server: NatsServer, user: str) -> list[str]:
    """``"publish <subject>"`` / ``"subscription <subject>"`` the server refused ``user``."""
    found = []
    for line in server.log_path.read_text("utf-8", "replace").splitlines():
        match = _VIOLATION.search(line)
        if match and match.group(1) == user:
            found.append(f"{match.group(2).lower()} {match.group(3)}")
    return found


async def store_state(nc: Client, prefix: str = "SCHED") -> dict[str, tuple[int, int]]:
    """stream -> (messages, last sequence) of the scheduler's two streams and lease bucket."""
    names = Names(prefix)
    js = nc.jetstream(timeout=2.0)
    state = {}
    for stream in (names.schedules_stream, names.runs_stream, f"KV_{names.leases_bucket}"):
        info = await js.stream_info(stream)
        state[stream] = (info.state.messages, info.state.last_seq)
    return state


@contextlib.asynccontextmanager
async def scheduler_with_service(
    server: NatsServer, prefix: str = "SCHED", handler: RunHandler | None = None,
    **overrides: object,
) -> AsyncIterator[tuple[NatsSchedulerProvider, AdminService]]:
    """A provider running as ``scheduler``, with its admin service as ``service``."""
    login = {"service_user": "service", "service_password": PASSWORDS["service"]}
    async with running(server.url, prefix, handler, user="scheduler",
                       password=PASSWORDS["scheduler"], **{**login, **overrides}) as provider:
        service = await start_admin_service(provider)
        try:
            yield provider, service
        finally:
            await service.stop()


def _cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main(argv)
    return code, out.getvalue(), err.getvalue()


async def run_cli(server: NatsServer, user: str, *argv: str) -> tuple[int, str, str]:
    """``nats-scheduler ARGV`` as ``user`` (in a thread: it runs its own event loop).

    Returns (exit code, stdout, stderr).
    """
    auth = ["--url", server.url, "--user", user, "--password", PASSWORDS[user]]
    return await asyncio.to_thread(_cli, [*argv, *auth])
