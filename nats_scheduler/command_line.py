"""What both command lines of the package share: ``nats-scheduler`` (``cli/``) and the dev
host's (``python -m nats_scheduler.devhost``, ``devhost/cli.py``).

Exit codes, the connection flags and plain output, kept below both so that neither command
line imports the other: ``nats-scheduler devhost`` and ``nats-scheduler demo`` call into
``devhost/``, and the dev host needs the same flags and exit codes. Connection flags map
onto the provider's settings (:class:`~nats_scheduler.settings.NatsSettings`) and fall
back to the same ``ASTRABOX_NATS_*`` environment.

Exit codes (stable, for scripts)::

    0 ok                      4 unavailable (no server / no scheduler process for an action)
    1 internal error          5 forbidden
    2 invalid request/usage   6 conflict
    3 not found               7 unhealthy (status found problems, doctor found a failure)
"""

from __future__ import annotations

import argparse
import getpass
import socket
from collections.abc import Sequence
from typing import Any

import msgspec

from .settings import connection_flags_env

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_INVALID = 2
EXIT_NOT_FOUND = 3
EXIT_UNAVAILABLE = 4
"""No server; or an action while no scheduler process runs, or while every live one serves
no actions (the message tells the two apart: admin/serving.py)."""
EXIT_FORBIDDEN = 5
EXIT_CONFLICT = 6
EXIT_UNHEALTHY = 7

DEFAULT_URL = "nats://127.0.0.1:4222"
"""Where a command line connects without any URL given (``nats-scheduler server`` and the
demo's default address)."""

FLAG_VARIABLES = connection_flags_env()
"""Connection flag (argparse dest) -> the ``ASTRABOX_NATS_*`` variable it overrides."""


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
    return {var: str(getattr(args, flag)) for flag, var in FLAG_VARIABLES.items()
            if getattr(args, flag, None)}


def default_actor() -> str:
    """``user@host``: the name a client gives for itself, recorded as who acted when the
    admin service cannot prove who sent the request (it records the user otherwise)."""
    try:
        user = getpass.getuser()
    except (OSError, KeyError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def print_json(value: Any) -> None:
    """Any msgspec Struct, list or dict as indented JSON on stdout."""
    data = msgspec.json.encode(msgspec.to_builtins(value))
    print(msgspec.json.format(data, indent=2).decode(), flush=True)


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain text table with left-aligned columns."""
    cells = [[str(h) for h in headers]] + [[("-" if c is None else str(c)) for c in row]
                                           for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
             for row in cells]
    return "\n".join(lines)
