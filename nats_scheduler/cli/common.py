"""What every ``nats-scheduler`` command shares: connection flags, exit codes, output.

The flags, exit codes and plain output that the dev host's command line uses too live in
:mod:`nats_scheduler.command_line` (the exit codes are listed there) and are importable
from here as well; what needs the admin client stays here: the settings a command connects
with (the default URL when none is given), the client on a fresh connection, and the exit
code of each admin error.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import socket
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from datetime import UTC, datetime

from ..admin.api import AdminError, ErrorCode
from ..admin.client import AdminClient
from ..admin.permissions import ViolationLog
from ..command_line import (
    DEFAULT_URL,
    EXIT_CONFLICT,
    EXIT_FORBIDDEN,
    EXIT_INTERNAL,
    EXIT_INVALID,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_UNAVAILABLE,
    EXIT_UNHEALTHY,
    connection_flags,
    default_actor,
    env_from_args,
    output_flags,
    print_json,
    table,
)
from ..jetstream.connection import connect
from ..seam import SchedulerConfigurationError, SchedulerError
from ..settings import NatsSettings

__all__ = [
    "BY_HELP", "DEFAULT_URL", "EXIT_CONFLICT", "EXIT_FORBIDDEN", "EXIT_FOR_CODE", "EXIT_INTERNAL",
    "EXIT_INVALID", "EXIT_NOT_FOUND", "EXIT_OK", "EXIT_UNAVAILABLE", "EXIT_UNHEALTHY",
    "admin_client", "connection_flags", "default_actor", "env_from_args", "output_flags",
    "print_json", "report_error", "run_command", "settings_from_args", "short_id", "table",
    "when",
]

BY_HELP = ("on behalf of whom (recorded as stated, apart from who acted: the scheduler records "
           "the user the server authenticated when its admin service has a login of its own)")

EXIT_FOR_CODE = {
    ErrorCode.INVALID_REQUEST: EXIT_INVALID,
    ErrorCode.NOT_FOUND: EXIT_NOT_FOUND,
    ErrorCode.UNAVAILABLE: EXIT_UNAVAILABLE,
    ErrorCode.FORBIDDEN: EXIT_FORBIDDEN,
    ErrorCode.CONFLICT: EXIT_CONFLICT,
    ErrorCode.INTERNAL: EXIT_INTERNAL,
}


def settings_from_args(args: argparse.Namespace,
                       environ: Mapping[str, str] | None = None) -> NatsSettings:
    """The environment's settings, overridden by the flags, with the default URL."""
    env = dict(os.environ if environ is None else environ)
    env.update(env_from_args(args))
    settings = NatsSettings.from_env(env)
    timeout = getattr(args, "timeout", None) or settings.connect_timeout
    settings = settings.with_(connect_timeout=timeout)
    if not settings.url and not settings.embedded:
        settings = settings.with_(url=DEFAULT_URL)
    return settings.validated()


@contextlib.asynccontextmanager
async def admin_client(args: argparse.Namespace) -> AsyncIterator[AdminClient]:
    """An AdminClient on a fresh connection, closed afterwards.

    The connection reports the server's permission refusals to the client's log, so a
    refused action is "forbidden" (exit 5), not "no scheduler process answered".
    """
    settings = settings_from_args(args)
    violations = ViolationLog()
    nc = await connect(settings, f"nats-scheduler-cli-{socket.gethostname()}",
                       error_cb=violations.on_error)
    try:
        yield AdminClient(nc, settings.prefix, timeout=getattr(args, "timeout", 5.0),
                          lease_seconds=settings.lease_seconds, violations=violations)
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(nc.close(), 2.0)


def run_command(args: argparse.Namespace,
                body: Callable[[argparse.Namespace], Awaitable[int]]) -> int:
    """Run an async command; map failures to clean messages and exit codes."""
    try:
        return asyncio.run(body(args))
    except AdminError as exc:
        return report_error(args, exc.code, exc.message)
    except SchedulerConfigurationError as exc:
        return report_error(args, ErrorCode.INVALID_REQUEST, str(exc))
    except SchedulerError as exc:
        return report_error(args, ErrorCode.UNAVAILABLE, str(exc))
    except KeyboardInterrupt:
        return 130


def report_error(args: argparse.Namespace, code: ErrorCode, message: str) -> int:
    if getattr(args, "json", False):
        print_json({"error": {"code": code.value, "message": message}})
    print(f"error: {message}", file=sys.stderr, flush=True)
    return EXIT_FOR_CODE.get(code, EXIT_INTERNAL)


# ----------------------------------------------------------------------------- output


def when(value: datetime | None, now: datetime | None = None) -> str:
    """A short UTC time: ``2026-05-01 12:00:00Z`` (``-`` for None)."""
    if value is None:
        return "-"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def short_id(value: str | None, size: int = 12) -> str:
    if value is None:
        return "-"
    return value if len(value) <= size else value[:size] + "…"
