"""The production-shaped server config (``nats-server.conf``, ``cluster/``): render and run it.

The repository's ``nats-server.conf`` is what a platform team starts from, and the tests and
``just cluster`` run that very file, not a copy that could drift from it. Three things
differ between the committed file and a server a test starts, and this module substitutes
exactly those:

* **the prefix** - the file spells the default ``SCHED``; :func:`render_config` rewrites
  every subject, stream and bucket name for another ``ASTRABOX_NATS_PREFIX``;
* **passwords** - the file reads them from the server's environment
  (``$NATS_SCHEDULER_PASSWORD`` ...); a test passes them in instead, so it never mutates
  ``os.environ``;
* **ports and directories** - a single server is started through
  :class:`~nats_scheduler.natsserver.process.NatsServer` with ``config_file=`` (which overrides
  listen/http/jetstream); cluster nodes through :func:`render_node`, which rewrites the
  loopback ports and the store directory of a ``cluster/node-N.conf``.

``python -m nats_scheduler.natsserver.config cluster`` (``just cluster``) runs the 3-node cluster
of ``cluster/`` in the foreground.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from .process import LOOPBACK, NatsServer, NatsServerError

__all__ = [
    "CLUSTER_DIR",
    "PASSWORD_ENV",
    "REPO_CONFIG",
    "USERS",
    "ConfiguredNatsServer",
    "cluster_nodes",
    "production_server",
    "render_config",
    "render_node",
    "start_nodes",
    "stop_nodes",
]

REPO_ROOT = Path(__file__).resolve().parents[2]
REPO_CONFIG = REPO_ROOT / "nats-server.conf"
"""The committed server config (present in a source checkout, not in an installed wheel)."""
CLUSTER_DIR = REPO_ROOT / "cluster"

USERS = ("scheduler", "service", "operator", "auditor")
PASSWORD_ENV = {user: f"NATS_{user.upper()}_PASSWORD" for user in USERS}
"""The server-side environment variable holding each user's password."""

DEFAULT_PREFIX = "SCHED"
_PREFIX_RE = re.compile(r"(?<![A-Za-z0-9])SCHED(?=[._])")
_LISTEN_RE = re.compile(r"127\.0\.0\.1:(\d+)")
_STORE_DIR_RE = re.compile(r'(store_dir:\s*)"[^"]*"')
_INCLUDE_RE = re.compile(r'^include\s+"[^"]*"', re.MULTILINE)


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render_config(
    text: str,
    *,
    prefix: str = DEFAULT_PREFIX,
    passwords: Mapping[str, str] | None = None,
) -> str:
    """The config ``text`` for another prefix, with passwords written in if given.

    ``passwords`` maps user name -> password; each replaces that user's
    ``$NATS_<USER>_PASSWORD`` reference. Users not given keep reading the environment.
    """
    if prefix != DEFAULT_PREFIX:
        text = _PREFIX_RE.sub(prefix, text)
    for user, password in (passwords or {}).items():
        text = text.replace(f"${PASSWORD_ENV[user]}", _quote(password))
    return text


def render_node(
    text: str,
    *,
    ports: Mapping[int, int],
    store_dir: str | os.PathLike[str],
    include: str | os.PathLike[str],
) -> str:
    """A ``cluster/node-N.conf`` with its loopback ports, store dir and include replaced.

    ``include`` is relative to where the rendered file will be written.

    ``ports`` maps every port the file uses (client, monitoring, cluster, routes) to the
    port to use instead; a port missing from it is an error, so no node can silently keep
    a fixed port that another test or a real server holds.
    """

    def port(match: re.Match[str]) -> str:
        old = int(match.group(1))
        if old not in ports:
            raise ValueError(f"no replacement given for port {old}")
        return f"{LOOPBACK}:{ports[old]}"

    text = _LISTEN_RE.sub(port, text)
    text = _STORE_DIR_RE.sub(lambda m: m.group(1) + _quote(str(store_dir)), text)
    return _INCLUDE_RE.sub(f"include {_quote(str(include))}", text)


def _size(text: str, key: str) -> int:
    """A byte size such as ``256MB`` set for ``key`` in a config text (top-level block)."""
    match = re.search(rf"^\s*{key}:\s*(\d+)\s*([KMGT]?)B?\s*$", text, re.MULTILINE)
    if match is None:
        raise ValueError(f"the config sets no {key}")
    number, unit = match.groups()
    return int(number) * 1024 ** " KMGT".index(unit or " ")


def production_server(
    store_dir: str | os.PathLike[str],
    *,
    passwords: Mapping[str, str],
    prefix: str = DEFAULT_PREFIX,
    extra_config: str | None = None,
    config_text: str | None = None,
) -> NatsServer:
    """A (not yet started) server running the committed ``nats-server.conf``.

    The config is rendered into ``store_dir`` (prefix, passwords) and included; the server
    gets test ports and ``store_dir`` for its data, with the file's JetStream limits and
    ``sync_interval: always``, so it behaves like the file describes. ``extra_config``
    (e.g. a ``tls`` block) is appended.
    """
    text = config_text if config_text is not None else REPO_CONFIG.read_text("utf-8")
    store = Path(store_dir).resolve()
    store.mkdir(parents=True, exist_ok=True)
    rendered = store.parent / f"{store.name}-production.conf"
    rendered.write_text(render_config(text, prefix=prefix, passwords=passwords), "utf-8")
    return NatsServer(
        store,
        config_file=rendered,
        extra_config=extra_config,
        sync_always="sync_interval: always" in text,
        max_memory_store=_size(text, "max_memory_store"),
        max_file_store=_size(text, "max_file_store"),
    )


def node_ports(text: str) -> tuple[int, int, int]:
    """(client, monitoring, cluster) port of a node config."""

    def find(pattern: str, where: str) -> int:
        match = re.search(pattern, where, re.MULTILINE)
        if match is None:
            raise ValueError(f"node config has no {pattern!r} on {LOOPBACK}")
        return int(match.group(1))

    loopback = re.escape(LOOPBACK)
    cluster_at = text.find("cluster {")
    if cluster_at < 0:
        raise ValueError("node config has no cluster block")
    return (
        find(rf'^listen:\s*"{loopback}:(\d+)"', text),
        find(rf'^http:\s*"{loopback}:(\d+)"', text),
        find(rf'listen:\s*"{loopback}:(\d+)"', text[cluster_at:]),
    )


class ConfiguredNatsServer(NatsServer):
    """A :class:`NatsServer` that runs a given config text verbatim (a cluster node file)."""

    def __init__(self, store_dir: str | os.PathLike[str], text: str, **kw: object) -> None:
        client, http, cluster = node_ports(text)
        super().__init__(
            store_dir, port=client, http_port=http, cluster_name="from-config",
            cluster_port=cluster, **kw,  # type: ignore[arg-type]
        )
        self._text = text

    def config_text(self) -> str:
        return self._text


def cluster_nodes(
    base_dir: str | os.PathLike[str],
    *,
    ports: Mapping[int, int] | None = None,
    prefix: str = DEFAULT_PREFIX,
    passwords: Mapping[str, str] | None = None,
    cluster_dir: Path = CLUSTER_DIR,
) -> list[ConfiguredNatsServer]:
    """Servers for every ``cluster/node-*.conf``, data under ``base_dir/node-N``.

    The main config is rendered (prefix, passwords) into ``base_dir`` and included from
    there. ``ports`` None keeps the files' own ports (``just cluster``).
    """
    base = Path(base_dir).resolve()
    base.mkdir(parents=True, exist_ok=True)
    main = base / "nats-server.conf"
    main.write_text(
        render_config(REPO_CONFIG.read_text("utf-8"), prefix=prefix, passwords=passwords),
        encoding="utf-8",
    )
    nodes: list[ConfiguredNatsServer] = []
    for path in sorted(cluster_dir.glob("node-*.conf")):
        text = path.read_text("utf-8")
        used = {int(p) for p in _LISTEN_RE.findall(text)}
        mapping = dict(ports) if ports is not None else {p: p for p in used}
        store = base / path.stem
        # nats-server resolves an include relative to the including file (even an absolute
        # path), and the node's file is written into its store dir.
        include = os.path.relpath(main, store)
        rendered = render_node(text, ports=mapping, store_dir=store / "jetstream",
                               include=include)
        nodes.append(ConfiguredNatsServer(store, rendered))
    return nodes


def start_nodes(nodes: Sequence[NatsServer], timeout: float = 20.0) -> None:
    """Spawn every node (each once the previous accepts routes), wait until all are healthy."""
    deadline = time.monotonic() + timeout
    try:
        for node in nodes:
            node.spawn()
            node.wait_listening(node.cluster_port, deadline)
        for node in nodes:
            node.wait_ready(max(0.05, deadline - time.monotonic()))
    except BaseException:
        stop_nodes(nodes)
        raise


def stop_nodes(nodes: Sequence[NatsServer]) -> None:
    """Stop every node by its own PID."""
    for node in nodes:
        node.stop()


# --------------------------------------------------------------------------- just cluster

_DEV_PASSWORDS = {user: f"{user}-dev" for user in USERS}


def _serve(nodes: Sequence[NatsServer], seconds: float) -> int:
    """Wait for Ctrl+C/SIGTERM, ``seconds`` (0: forever) or a node to exit."""
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    deadline = time.monotonic() + seconds if seconds > 0 else None
    try:
        while not stop.wait(0.5):
            if not all(n.running for n in nodes):
                print("a node exited; stopping the others", file=sys.stderr)
                return 1
            if deadline is not None and time.monotonic() >= deadline:
                break
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
    return 0


def _cmd_cluster(args: argparse.Namespace) -> int:
    passwords = {u: os.environ.get(PASSWORD_ENV[u]) or _DEV_PASSWORDS[u] for u in USERS}
    nodes = cluster_nodes(Path(args.data_dir), passwords=passwords)
    try:
        start_nodes(nodes)
    except NatsServerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    urls = ",".join(n.url for n in nodes)
    print(f"3-node cluster ready (data in {args.data_dir}); connect the provider with:")
    print(f"  export ASTRABOX_NATS_URL={urls} ASTRABOX_NATS_REPLICAS=3")
    print(f"  export ASTRABOX_NATS_USER=scheduler ASTRABOX_NATS_PASSWORD={passwords['scheduler']}")
    print(f"  export ASTRABOX_NATS_SERVICE_USER=service "
          f"ASTRABOX_NATS_SERVICE_PASSWORD={passwords['service']}")
    print("(passwords come from NATS_<USER>_PASSWORD, else <user>-dev). Ctrl+C to stop.",
          flush=True)
    try:
        return _serve(nodes, args.seconds)
    finally:
        stop_nodes(nodes)
        print("cluster stopped", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nats_scheduler.natsserver.config")
    sub = parser.add_subparsers(dest="command", required=True)
    cluster = sub.add_parser("cluster", help="run the 3-node cluster of cluster/ in the foreground")
    cluster.add_argument("--data-dir", default=".cluster", help="node data (default ./.cluster)")
    cluster.add_argument("--seconds", type=float, default=0.0,
                         help="stop after this many seconds (default: until Ctrl+C)")
    cluster.set_defaults(func=_cmd_cluster)
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
