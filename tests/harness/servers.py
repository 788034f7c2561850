"""Test helpers on top of :mod:`nats_scheduler.natsserver.process` (this repo's tests only).

* :func:`connect_fast` connects without nats-py's default first-connect retries (about two
  minutes), so a test against a dead server fails in well under a second.
* :func:`stream_info` and :func:`stream_leader` read a stream's state, its leader and peers
  as the server answers now, on a connection of their own (a cluster test's question).
* :func:`unique_prefix` gives each test its own namespace on a shared server
  (a valid ``ASTRABOX_NATS_PREFIX``), which is what lets the suite share one server.
* :func:`testcontainers_nats` is the opt-in Docker path (``NATS_TESTCONTAINERS=1``); with
  no Docker engine it raises :class:`DockerUnavailable`, which fixtures turn into a skip.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from typing import Any

import nats
from nats.aio.client import Client
from nats.js.api import StreamInfo

from nats_scheduler.natsserver.process import NatsServer, find_nats_server, free_port

from .cluster import NatsCluster

__all__ = [
    "DockerUnavailable",
    "NatsCluster",
    "NatsServer",
    "connect_fast",
    "find_nats_server",
    "free_port",
    "stream_info",
    "stream_leader",
    "testcontainers_nats",
    "testcontainers_requested",
    "unique_prefix",
]

FAST_CONNECT: dict[str, Any] = {
    "allow_reconnect": False,
    "max_reconnect_attempts": 1,
    "reconnect_time_wait": 0.05,
    "connect_timeout": 0.5,
}

TESTCONTAINERS_ENV = "NATS_TESTCONTAINERS"
TESTCONTAINERS_IMAGE_ENV = "NATS_TESTCONTAINERS_IMAGE"
DEFAULT_IMAGE = "nats:2.12"  # the design's minimum server is 2.12.3


async def connect_fast(url: str | list[str], **kw: Any) -> Client:
    """``nats.connect`` that fails fast: no reconnects, 0.5 s connect timeout.

    Keyword arguments override the fast defaults (e.g. ``allow_reconnect=True`` for a
    client that must ride out a cluster node being killed).
    """
    servers = [u.strip() for u in url.split(",")] if isinstance(url, str) else list(url)
    options = {**FAST_CONNECT, **kw}
    return await nats.connect(servers=servers, **options)


async def stream_info(url: str | list[str], stream: str) -> StreamInfo:
    """``stream``'s info as the server(s) at ``url`` answer now.

    On a connection of its own, closed before returning: a test asks this while nodes die
    and come back, so no connection of the test's may be left behind on a dead node.
    """
    nc = await connect_fast(url)
    try:
        return await nc.jetstream(timeout=5.0).stream_info(stream)
    finally:
        await nc.close()


async def stream_leader(cluster: NatsCluster, stream: str) -> int:
    """The index (in ``cluster.nodes``) of the node that leads ``stream`` now."""
    info = await stream_info(cluster.urls, stream)
    assert info.cluster is not None and info.cluster.leader
    return cluster.node_by_name(info.cluster.leader)


def unique_prefix() -> str:
    """``"T"`` + 10 random upper-case hex digits: a valid, unique ``ASTRABOX_NATS_PREFIX``.

    Valid as a stream/bucket name part and as a subject token (^[A-Za-z0-9_-]{1,32}$).
    """
    return "T" + secrets.token_hex(5).upper()


class DockerUnavailable(RuntimeError):
    """testcontainers could not reach a Docker engine (or is not installed)."""


def testcontainers_requested() -> bool:
    """True when ``NATS_TESTCONTAINERS=1`` asks for the Docker path."""
    return os.environ.get(TESTCONTAINERS_ENV, "").strip().lower() in {"1", "true", "yes"}


@contextlib.contextmanager
def testcontainers_nats(image: str | None = None) -> Iterator[str]:
    """Run a JetStream nats-server in Docker via testcontainers; yield its client URL.

    Raises :class:`DockerUnavailable` (never a raw docker error) when there is no engine:
    testcontainers' container constructor already talks to Docker and raises
    ``docker.errors.DockerException`` at once.
    """
    try:
        from docker.errors import DockerException
        from testcontainers.community.nats import NatsContainer
    except ImportError as exc:  # testcontainers is a dev extra
        raise DockerUnavailable(f"testcontainers is not installed: {exc}") from exc

    image = image or os.environ.get(TESTCONTAINERS_IMAGE_ENV) or DEFAULT_IMAGE
    try:
        container = NatsContainer(image, jetstream=True)
    except DockerException as exc:
        raise DockerUnavailable(f"no usable Docker engine for testcontainers: {exc}") from exc
    try:
        container.start()
    except BaseException as exc:
        with contextlib.suppress(Exception):
            container.stop()
        if isinstance(exc, DockerException):
            raise DockerUnavailable(f"Docker could not start {image}: {exc}") from exc
        raise
    try:
        yield container.nats_uri()
    finally:
        container.stop()


# Names starting with "test" would otherwise be collected by pytest when imported into a
# test module.
testcontainers_nats.__test__ = False  # type: ignore[attr-defined]
testcontainers_requested.__test__ = False  # type: ignore[attr-defined]
