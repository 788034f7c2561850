"""``nats-scheduler``: demo and development commands.

For now: ``demo`` (an embedded nats-server; the scheduler and console join later) and
``server`` (a foreground development server). Servers are stopped by their PID on exit,
Ctrl+C or SIGTERM.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import FrameType

from ..natsserver import NatsServer, NatsServerError

DEMO_DIR = Path(".demo") / "nats"


@contextlib.contextmanager
def _stop_requested() -> Iterator[threading.Event]:
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


def _serve(server: NatsServer, stop: threading.Event, seconds: float | None) -> int:
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


def _start(server: NatsServer) -> bool:
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


def _cmd_demo(args: argparse.Namespace) -> int:
    server = NatsServer(Path.cwd() / DEMO_DIR, server_name="astrabox-demo")
    with _stop_requested() as stop:
        if not _start(server):
            return 1
        rc = 0
        try:
            print("The demo's scheduler and console are coming soon; "
                  "for now the demo starts and stops an embedded nats-server.", flush=True)
            if args.seconds > 0:
                print(f"keeping it up for {args.seconds:g}s (Ctrl+C to stop early)", flush=True)
                rc = _serve(server, stop, args.seconds)
        finally:
            server.stop()
            print("nats-server stopped", flush=True)
    return rc


def _cmd_server(args: argparse.Namespace) -> int:
    server = NatsServer(
        args.store_dir,
        port=args.port or None,
        http_port=args.http_port or None,
        server_name="astrabox-dev",
        sync_always=args.sync_always,
    )
    with _stop_requested() as stop:
        if not _start(server):
            return 1
        rc = 0
        try:
            print(f"export ASTRABOX_NATS_URL={server.url}", flush=True)
            print("Ctrl+C to stop", flush=True)
            rc = _serve(server, stop, None)
        finally:
            server.stop()
            print("nats-server stopped", flush=True)
    return rc


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nats-scheduler",
        description="AstraBox 'nats' scheduler provider: demo and operator commands.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = sub.add_parser("demo", help="run the demo (embedded nats-server in ./.demo/nats)")
    demo.add_argument("--seconds", type=float, default=0.0,
                      help="keep the demo running this many seconds (default 0)")
    demo.set_defaults(func=_cmd_demo)

    server = sub.add_parser("server", help="run a development nats-server in the foreground")
    server.add_argument("--store-dir", default=".nats-data",
                        help="config, log and JetStream data (default ./.nats-data)")
    server.add_argument("--port", type=int, default=4222,
                        help="client port on 127.0.0.1 (default 4222; 0 = any free port)")
    server.add_argument("--http-port", type=int, default=8222,
                        help="monitoring port on 127.0.0.1 (default 8222; 0 = any free port)")
    server.add_argument("--sync-always", action="store_true",
                        help="fsync every write (sync_interval: always)")
    server.set_defaults(func=_cmd_server)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the process exit code."""
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
