"""``nats-scheduler devhost ...``: the development host standing in for AstraBox.

The same commands as ``python -m nats_scheduler.devhost`` (see
:mod:`nats_scheduler.devhost.cli`): ``run`` one replica, or change Deployment records.
"""

from __future__ import annotations

import argparse

from ..devhost.cli import add_commands, dispatch


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    devhost = sub.add_parser(
        "devhost", help="development host: run a replica, create/edit/delete Deployments")
    add_commands(devhost)
    devhost.set_defaults(func=dispatch)
