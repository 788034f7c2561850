"""What every ``nats-scheduler`` command shares: connection flags, exit codes, output.

Connection flags map onto the provider's settings (:class:`~nats_scheduler.settings.
NatsSettings`) and fall back to the same ``ASTRABOX_NATS_*`` environment; without any URL
the command line talks to ``nats://127.0.0.1:4222`` (``nats-scheduler server`` and the
demo's default address).

Exit codes (stable, for scripts)::

    0 ok                      4 unavailable (no server / no scheduler process for an action)
    1 internal error          5 forbidden
    2 invalid request/usage   6 conflict
    3 not found               7 unhealthy (status found problems, doctor found a failure)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import getpass
import os
import socket
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import msgspec

from ..admin.api import AdminError, ErrorCode
from ..admin.client import AdminClient
from ..admin.permissions import ViolationLog
from ..jetstream.connection import connect
from ..seam import SchedulerConfigurationError, SchedulerError
from ..settings import NatsSettings, connection_flags_env

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_INVALID = 2
EXIT_NOT_FOUND = 3
EXIT_UNAVAILABLE = 4
EXIT_FORBIDDEN = 5
EXIT_CONFLICT = 6
EXIT_UNHEALTHY = 7

EXIT_FOR_CODE = {
    ErrorCode.INVALID_REQUEST: EXIT_INVALID,
    ErrorCode.NOT_FOUND: EXIT_NOT_FOUND,
    ErrorCode.UNAVAILABLE: EXIT_UNAVAILABLE,
    ErrorCode.FORBIDDEN: EXIT_FORBIDDEN,
    ErrorCode.CONFLICT: EXIT_CONFLICT,
    ErrorCode.INTERNAL: EXIT_INTERNAL,
}

DEFAULT_URL = "nats://127.0.0.1:4222"

_FLAGS = connection_flags_env()


def connection_flags() -> argparse.ArgumentParser:
    """A parent parser with the connection flags (each falls back to its variable)."""
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group("connection (flags override ASTRABOX_NATS_* variables)")
    group.add_argument("--url", help=f"server URLs, comma-separated (ASTRABOX_NATS_URL; "
                                     f"default {DEFAULT_URL})")
    group.add_argument("--creds", help="credentials file (ASTRABOX_NATS_CREDS)")
    group.add_argument("--user", help="user name (ASTRABOX_NATS_USER)")
    group.add_argument("--password", help="password (ASTRABOX_NATS_PASSWORD)")
    group.add_argument("--tls-ca", help="CA certificate (ASTRABOX_NATS_TLS_CA)")
    group.add_argument("--tls-cert", help="client certificate (ASTRABOX_NATS_TLS_CERT)")
    group.add_argument("--tls-key", help="client key (ASTRABOX_NATS_TLS_KEY)")
    group.add_argument("--prefix", help="namespace (ASTRABOX_NATS_PREFIX; default SCHED)")
    group.add_argument("--timeout", type=float, default=5.0,
                       help="seconds to wait for the server and for answers (default 5)")
    return parent


def output_flags() -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("--json", action="store_true", help="machine-readable JSON output")
    return parent


def env_from_args(args: argparse.Namespace) -> dict[str, str]:
    """The ``ASTRABOX_NATS_*`` variables the given flags stand for (for child processes)."""
    return {var: str(getattr(args, flag)) for flag, var in _FLAGS.items()
            if getattr(args, flag, None)}


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


def default_actor() -> str:
    """``user@host``: who an action is recorded as when ``--by`` is not given."""
    try:
        user = getpass.getuser()
    except (OSError, KeyError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


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


def print_json(value: Any) -> None:
    """Any msgspec Struct, list or dict as indented JSON on stdout."""
    data = msgspec.json.encode(msgspec.to_builtins(value))
    print(msgspec.json.format(data, indent=2).decode(), flush=True)


def when(value: datetime | None, now: datetime | None = None) -> str:
    """A short UTC time: ``2026-05-01 12:00:00Z`` (``-`` for None)."""
    if value is None:
        return "-"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain text table with left-aligned columns."""
    cells = [[str(h) for h in headers]] + [[("-" if c is None else str(c)) for c in row]
                                           for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
             for row in cells]
    return "\n".join(lines)


def short_id(value: str | None, size: int = 12) -> str:
    if value is None:
        return "-"
    return value if len(value) <= size else value[:size] + "…"
