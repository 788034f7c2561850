"""The official ``nats`` CLI, built once from source with Go and cached: what auditors type.

The audit tests run docs/audit.md's commands with the real CLI, and the benchmarks run its
``nats bench`` as their reference, so both need the binary. It is not in PyPI, apt or npm;
it builds with ``go install`` from its module (:data:`MODULE` at :data:`VERSION`: name that
version, the module proxy serves no later one here). The binary goes into a cache folder of
its own (``GOBIN``), and Go's own module and build caches are left where Go keeps them, so a
second build after the folder was removed takes seconds (a first build with empty Go caches
took 2 min 23 s on a 2-core machine).

* :func:`find_nats_cli` - the cached binary of the right version, or None;
* :func:`ensure_nats_cli` - that, building it first when missing; raises
  :class:`NatsCliUnavailable` (with how to install it) when there is no Go toolchain;
* ``python -m tests.harness.natscli`` - build it and print its path (``.ci/run`` does this).

``NATS_CLI`` names a binary to use instead (it must report :data:`VERSION`);
``NATS_CLI_CACHE`` moves the cache folder (default ``$XDG_CACHE_HOME`` or ``~/.cache``,
then ``astrabox-scheduler-nats/nats-cli-<version>``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

MODULE = "github.com/nats-io/natscli/nats"
VERSION = "v0.5.0"
INSTALL_HINT = f"go install {MODULE}@{VERSION}"
BUILD_TIMEOUT = 900.0
"""Seconds a build may take: a first build downloads and compiles about 300 MB of modules."""
GO_CANDIDATES = ("/usr/local/go/bin/go",)
"""Where the Go toolchain lives when its ``bin`` is not on PATH (the official tarball)."""


class NatsCliUnavailable(RuntimeError):
    """No ``nats`` CLI, and none can be built here (no Go toolchain, or the build failed)."""


def cache_dir() -> Path:
    """The folder the binary is built into (``GOBIN``)."""
    override = os.environ.get("NATS_CLI_CACHE")
    if override:
        return Path(override)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "astrabox-scheduler-nats" / f"nats-cli-{VERSION}"


def reports_version(binary: Path) -> bool:
    """Whether ``binary`` runs and says it is :data:`VERSION`."""
    try:
        out = subprocess.run([str(binary), "--version"], capture_output=True, text=True,
                             timeout=30, check=False)
    except OSError:
        return False
    return out.returncode == 0 and out.stdout.strip() == VERSION


def find_nats_cli() -> Path | None:
    """The binary to use, without building: ``NATS_CLI``, else the cached one."""
    named = os.environ.get("NATS_CLI")
    if named:
        path = Path(named)
        if not reports_version(path):
            raise NatsCliUnavailable(f"NATS_CLI={named} is not the nats CLI {VERSION}")
        return path
    cached = cache_dir() / "nats"
    return cached if cached.is_file() and reports_version(cached) else None


def find_go() -> str | None:
    """The ``go`` command: on PATH, else where the official tarball puts it."""
    found = shutil.which("go")
    if found:
        return found
    return next((c for c in GO_CANDIDATES if Path(c).is_file()), None)


def ensure_nats_cli() -> Path:
    """The binary, built into :func:`cache_dir` first when it is not there yet."""
    found = find_nats_cli()
    if found is not None:
        return found
    go = find_go()
    if go is None:
        raise NatsCliUnavailable(
            f"the nats CLI {VERSION} is not built and there is no Go toolchain to build it: "
            f"install Go, or run `{INSTALL_HINT}` and set NATS_CLI to the binary")
    target = cache_dir()
    target.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GOBIN": str(target)}
    try:
        built = subprocess.run([go, "install", f"{MODULE}@{VERSION}"], env=env, cwd=target,
                               capture_output=True, text=True, timeout=BUILD_TIMEOUT,
                               check=False)
    except subprocess.TimeoutExpired as exc:
        raise NatsCliUnavailable(f"`{INSTALL_HINT}` took over {BUILD_TIMEOUT:g} s") from exc
    binary = target / "nats"
    if built.returncode != 0 or not reports_version(binary):
        raise NatsCliUnavailable(f"`{INSTALL_HINT}` failed:\n{built.stderr[-2000:]}")
    return binary


def main() -> int:
    started = time.monotonic()
    try:
        binary = ensure_nats_cli()
    except NatsCliUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"nats CLI {VERSION}: {binary} ({time.monotonic() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
