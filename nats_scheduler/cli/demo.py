"""``nats-scheduler demo``: server, two scheduler replicas, sample Schedules, console.

See :mod:`nats_scheduler.devhost.demo`. Without a terminal (or with ``--headless``) it prints one
line per Run state change instead of opening the console.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from ..admin.client import AdminClient
from ..command_line import default_actor
from ..devhost.demo import DemoConsole, DemoOptions, interactive, run_demo


def open_console(client: AdminClient) -> DemoConsole:
    """The console app on ``client``, acting as the local user (Textual is imported only
    when a console is shown)."""
    from admin_tui.app import AstraboxConsole

    return AstraboxConsole(backend=client, user=default_actor())


def cmd_demo(args: argparse.Namespace) -> int:
    headless = args.headless
    if not headless and not interactive():
        print("no terminal: running headless (one line per Run state change)", flush=True)
        headless = True
    options = DemoOptions(root=Path(args.dir), console=None if headless else open_console,
                          seconds=args.seconds if args.seconds and args.seconds > 0 else None,
                          replicas=args.replicas, port=args.port)
    try:
        return asyncio.run(run_demo(options))
    except KeyboardInterrupt:  # a second Ctrl+C while stopping
        print("interrupted", file=sys.stderr)
        return 130


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    demo = sub.add_parser(
        "demo", help="run a local scheduler with sample Schedules and open the console")
    demo.add_argument("--headless", action="store_true",
                      help="no console: print each Run as its state changes")
    demo.add_argument("--seconds", type=float, default=0.0,
                      help="stop by itself after this many seconds (default: until Ctrl+C)")
    demo.add_argument("--dir", default=".demo",
                      help="where the demo keeps its data and logs (default ./.demo)")
    demo.add_argument("--replicas", type=int, default=2, help="scheduler replicas (default 2)")
    demo.add_argument("--port", type=int, default=None,
                      help="client port of the demo's server (default 4222 when free)")
    demo.set_defaults(func=cmd_demo)
