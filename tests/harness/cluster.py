"""A JetStream cluster of real nats-server processes on loopback, for tests and benchmarks.

Only this repository's tests need a cluster started from Python (operators run the
production-shaped ``cluster/`` files through ``nats_scheduler.natsserver.config``), so it
lives here rather than in the shipped package. Every node is a
:class:`~nats_scheduler.natsserver.process.NatsServer` and is ended by its own PID.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from types import TracebackType
from typing import Self

from nats_scheduler.natsserver.process import LOOPBACK, NatsServer, free_ports

__all__ = ["NatsCluster"]


class NatsCluster:
    """A JetStream cluster of ``size`` (default 3) nodes on loopback.

    Each node gets its own store dir ``<base_dir>/<name>``, a distinct ``server_name`` and a
    ``cluster { name, listen, routes [all nodes] }`` block. :meth:`start` spawns every
    node before waiting, because no node's ``/healthz`` is 200 until a meta leader has
    been elected, which needs a quorum of nodes running.
    """

    def __init__(
        self,
        base_dir: str | os.PathLike[str],
        *,
        size: int = 3,
        name: str = "astrabox",
        sync_always: bool = False,
        extra_config: str | None = None,
    ) -> None:
        if size < 1:
            raise ValueError("a cluster needs at least one node")
        self.base_dir = Path(base_dir).resolve()
        self.name = name
        ports = free_ports(3 * size)
        cluster_ports = ports[2 * size :]
        routes = [f"nats-route://{LOOPBACK}:{p}" for p in cluster_ports]
        self.nodes: list[NatsServer] = [
            NatsServer(
                self.base_dir / f"{name}-{i}",
                port=ports[2 * i],
                http_port=ports[2 * i + 1],
                server_name=f"{name}-{i}",
                cluster_name=name,
                cluster_port=cluster_ports[i],
                routes=routes,
                sync_always=sync_always,
                extra_config=extra_config,
            )
            for i in range(size)
        ]

    @property
    def urls(self) -> str:
        """Every node's client URL, comma-separated (the ``ASTRABOX_NATS_URL`` form)."""
        return ",".join(n.url for n in self.nodes)

    @property
    def url_list(self) -> list[str]:
        return [n.url for n in self.nodes]

    def node_by_name(self, server_name: str) -> int:
        """Index of the node called ``server_name`` (e.g. a stream leader's name)."""
        for i, node in enumerate(self.nodes):
            if node.server_name == server_name:
                return i
        raise KeyError(server_name)

    def start(self, timeout: float = 20.0) -> Self:
        """Spawn all nodes, then wait until every one answers ``/healthz`` 200.

        Each node is spawned once the previous one accepts route connections, so most
        first route dials find their peer. Usually every node is healthy 0.2-0.8 s after
        the first spawn; now and then (a few percent of starts here) the first meta-leader
        election misses and the next Raft election timeout costs about 5 s more.
        """
        deadline = time.monotonic() + timeout
        try:
            for node in self.nodes:
                if not node.running:
                    node.spawn()
                    node.wait_listening(node.cluster_port, deadline)
            self.wait_ready(max(0.05, deadline - time.monotonic()))
        except BaseException:
            self.stop()
            raise
        return self

    def wait_ready(self, timeout: float = 20.0) -> float:
        """Wait until every running node is healthy; return the seconds waited."""
        start = time.monotonic()
        deadline = start + timeout
        for node in self.nodes:
            if node.running:
                node.wait_ready(max(0.05, deadline - time.monotonic()))
        return time.monotonic() - start

    def kill(self, i: int) -> None:
        """SIGKILL node ``i``."""
        self.nodes[i].kill()

    def restart(self, i: int, timeout: float = 60.0) -> None:
        """(Re)start node ``i`` on its old ports and data, and wait for it to be healthy.

        A node back after losing quorum is healthy once a meta leader is elected again and
        its streams are current: seconds on a quiet machine, above 20 s once seen with two
        test workers on two cores, hence the long deadline (polled: it costs only on failure)."""
        self.nodes[i].restart(timeout)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop every node (each by its own PID)."""
        errors: list[BaseException] = []
        for node in self.nodes:
            try:
                node.stop(timeout)
            except Exception as exc:  # keep stopping the others
                errors.append(exc)
        if errors:
            raise errors[0]

    def log_tails(self, lines: int = 30) -> str:
        """Log tails of all nodes, for failure reports."""
        return "\n".join(
            f"--- {n.server_name} ({n.log_path})\n{n.log_tail(lines)}" for n in self.nodes
        )

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
