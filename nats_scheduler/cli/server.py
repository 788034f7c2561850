"""``nats-scheduler server``: a development nats-server in the foreground.

The server is stopped by its PID on exit, Ctrl+C or SIGTERM.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType

from ..natsserver.process import NatsServer, NatsServerError


@contextlib.contextmanager
def stop_requested() -> Iterator[threading.Event]:
    """An Event set by SIGINT/SIGTERM while inside the block (handlers restored after).

    Outside the main thread signals cannot be handled; the Event then only ends waits
    when set by the caller.
    """
    event = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield event
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        event.set()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield event
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def serve(server: NatsServer, stop: threading.Event, seconds: float | None) -> int:
    """Wait until ``stop`` is set, ``seconds`` pass (None: forever) or the server dies."""
    remaining = seconds
    while remaining is None or remaining > 0:
        step = 0.5 if remaining is None else min(0.5, remaining)
        if stop.wait(step):
            print("\nstopping (signal received)", flush=True)
            return 0
        if not server.running:
            print(
                f"nats-server exited unexpectedly; log tail:\n{server.log_tail()}",
                file=sys.stderr,
            )
            return 1
        if remaining is not None:
            remaining -= step
    return 0


def start(server: NatsServer) -> bool:
    """Start ``server`` and say where it is; False (with a message) if it cannot start."""
    try:
        server.start()
    except NatsServerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return False
    print(
        f"nats-server (pid {server.pid}) ready at {server.url} "
        f"(monitoring {server.http_url}, data in {server.store_dir})",
        flush=True,
    )
    return True


def cmd_server(args: argparse.Namespace) -> int:
    server = NatsServer(
        args.store_dir,
        port=args.port or None,
        http_port=args.http_port or None,
        server_name="astrabox-dev",
        sync_always=args.sync_always,
    )
    with stop_requested() as stop:
        if not start(server):
            return 1
        rc = 0
        try:
            print(f"export ASTRABOX_NATS_URL={server.url}", flush=True)
            print("Ctrl+C to stop", flush=True)
            rc = serve(server, stop, None)
        finally:
            server.stop()
            print("nats-server stopped", flush=True)
    return rc


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    server = sub.add_parser("server", help="run a development nats-server in the foreground")
    server.add_argument("--store-dir", default=".nats-data",
                        help="config, log and JetStream data (default ./.nats-data)")
    server.add_argument("--port", type=int, default=4222,
                        help="client port on 127.0.0.1 (default 4222; 0 = any free port)")
    server.add_argument("--http-port", type=int, default=8222,
                        help="monitoring port on 127.0.0.1 (default 8222; 0 = any free port)")
    server.add_argument("--sync-always", action="store_true",
                        help="fsync every write (sync_interval: always)")
    server.set_defaults(func=cmd_server)
