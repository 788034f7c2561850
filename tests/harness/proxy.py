"""A TCP proxy on loopback that a test can cut and heal: network partitions without root.

Network namespaces need root and per-test plumbing, so a partition is made where the
traffic is: every cluster route goes through a :class:`TcpProxy` link (one listening port
per ordered pair of nodes, "i dials j"), and cutting the links of one node isolates it from
the others while its clients still reach it. :func:`partitionable_cluster` builds a
:class:`~.cluster.NatsCluster` wired that way.

The proxy runs its own event loop in a daemon thread: the cluster's route traffic must flow
while the test's own loop is blocked (``NatsCluster.start`` waits synchronously for the
nodes, whose readiness needs the routes). A cut is ``refuse`` (close every connection of the
link and accept new ones only to close them: the peers notice at once and keep redialing) or
``drop`` (keep connections open and discard their bytes: a black hole, noticed only by the
peers' ping timeouts).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from nats_scheduler.natsserver.process import LOOPBACK, NatsServer

from .cluster import NatsCluster

__all__ = ["Link", "TcpProxy", "partitionable_cluster"]

T = TypeVar("T")
Mode = Literal["refuse", "drop"]
_CHUNK = 64 * 1024


@dataclass
class Link:
    """One listening port forwarding to ``target_port``; ``mode`` is None while healthy."""

    name: str
    target_port: int
    port: int = 0
    mode: Mode | None = None
    server: asyncio.Server | None = None
    writers: set[asyncio.StreamWriter] = field(default_factory=set)
    accepted: int = 0


class TcpProxy:
    """Named links ``port -> 127.0.0.1:target_port``, each cut and healed on command."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="tcp-proxy",
                                        daemon=True)
        self._thread.start()
        self.links: dict[str, Link] = {}

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10.0)

    # ---------------------------------------------------------------- links

    def add(self, name: str, target_port: int) -> int:
        """Open link ``name`` to ``target_port``; returns its listening port."""
        link = Link(name, target_port)
        self._call(self._listen(link))
        self.links[name] = link
        return link.port

    async def _listen(self, link: Link) -> None:
        link.server = await asyncio.start_server(
            lambda r, w: self._accept(link, r, w), LOOPBACK, 0)
        link.port = link.server.sockets[0].getsockname()[1]

    def cut(self, *names: str, mode: Mode = "refuse") -> None:
        """Cut links: ``refuse`` closes their connections, ``drop`` black-holes them."""
        self._call(self._cut([self.links[n] for n in names], mode))

    def heal(self, *names: str) -> None:
        """Let links carry traffic again (peers redial refused links by themselves)."""
        self._call(self._cut([self.links[n] for n in names], None))

    async def _cut(self, links: list[Link], mode: Mode | None) -> None:
        for link in links:
            link.mode = mode
            if mode is not None:
                for writer in list(link.writers):
                    _abort(writer)

    def close(self) -> None:
        """Close every link and stop the proxy's thread."""
        with contextlib.suppress(Exception):
            self._call(self._close_all())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5.0)

    async def _close_all(self) -> None:
        for link in self.links.values():
            if link.server is not None:
                link.server.close()
            for writer in list(link.writers):
                _abort(writer)

    # ---------------------------------------------------------------- forwarding

    async def _accept(self, link: Link, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> None:
        link.accepted += 1
        if link.mode == "refuse":
            _abort(writer)
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(LOOPBACK, link.target_port)
        except OSError:
            _abort(writer)
            return
        link.writers |= {writer, up_writer}
        try:
            await asyncio.gather(self._pump(link, reader, up_writer),
                                 self._pump(link, up_reader, writer))
        finally:
            link.writers -= {writer, up_writer}
            _abort(writer)
            _abort(up_writer)

    async def _pump(self, link: Link, reader: asyncio.StreamReader,
                    writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while data := await reader.read(_CHUNK):
                if link.mode is None:
                    writer.write(data)
                    await writer.drain()
        _abort(writer)


def _abort(writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(Exception):
        writer.transport.abort()


def link_name(i: int, j: int) -> str:
    """The link node ``i`` dials node ``j`` through."""
    return f"{i}->{j}"


def partitionable_cluster(base_dir: str | os.PathLike[str], proxy: TcpProxy, *, size: int = 3,
                          **kw: Any) -> NatsCluster:
    """A :class:`NatsCluster` whose routes all go through ``proxy`` (one link per pair).

    Node ``i`` dials node ``j`` through link ``"i->j"`` only, so cutting every link that
    names ``k`` (:func:`links_of`) cuts ``k`` off from the cluster. Nodes gossip the route
    address each one advertises, and a node that learns one dials it (an implicit route),
    which would bypass the proxy: so every node advertises the port of a link that is always
    cut (``"nowhere"``), and only the explicit routes through the proxy ever connect.
    """
    cluster = NatsCluster(base_dir, size=size, **kw)
    nowhere = proxy.add("nowhere", 9)
    proxy.cut("nowhere")
    for i, node in enumerate(cluster.nodes):
        routes = []
        for j, other in enumerate(cluster.nodes):
            if i != j:
                assert other.cluster_port is not None
                port = proxy.add(link_name(i, j), other.cluster_port)
                routes.append(f"nats-route://{LOOPBACK}:{port}")
        _own_cluster_block(node, cluster.name, routes, f"{LOOPBACK}:{nowhere}")
    return cluster


def _own_cluster_block(node: NatsServer, name: str, routes: list[str], advertise: str) -> None:
    """Write the node's cluster block ourselves: the generated one has no ``advertise``.

    The node keeps its ``cluster_port`` (the cluster waits for it to listen); without a
    ``cluster_name`` it generates no block of its own, and ``extra_config`` carries this one.
    """
    block = "\n".join([
        "cluster {",
        f'  name: "{name}"',
        f'  listen: "{LOOPBACK}:{node.cluster_port}"',
        f'  advertise: "{advertise}"',
        "  routes: [",
        *(f'    "{route}"' for route in routes),
        "  ]",
        "}",
    ])
    node.cluster_name = None
    node.extra_config = "\n".join(p for p in (node.extra_config, block) if p)


def links_of(node: int, size: int = 3) -> list[str]:
    """Every link that carries node ``node``'s routes (to cut it off)."""
    return [link_name(a, b) for a in range(size) for b in range(size)
            if a != b and node in (a, b)]
