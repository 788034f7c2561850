"""A previous release of this provider, installed from git in a virtual environment of its
own, and its replica processes (the rolling-upgrade test and bench).

Why a venv and not an import of the old tree: a rolling upgrade runs two releases in two
processes, each with its own installed package; an old tree put on ``sys.path`` beside the
current one would share the current venv's ``nats_scheduler`` the moment either path order
slipped. So :func:`install_release` archives the commit (``git archive``), creates a venv
with the current interpreter and ``pip install``s the archive into it (pip fetches the
dependencies as it always does, through its own configuration and cache). It is built once
per commit under a cache directory (a lock file keeps two runs from building it at once, a
marker written last tells a finished build from an interrupted one), so only the first run
on a machine pays for it.

Its replicas run the release's OWN harness (its ``tests/harness/replica.py``, protocol and
handler included), with the venv's interpreter and a working directory that holds nothing
but the release's ``tests/``: ``tests.harness`` is the old one, and ``nats_scheduler`` can
only come from the venv's site-packages (:func:`imported_from` shows where it came from).
:class:`ReleaseReplica` is a :class:`~.replicas.ReplicaProcess` with that command line, so it
is driven, signalled, windowed and stopped like any other.
"""

from __future__ import annotations

import ast
import contextlib
import fcntl
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .replicas import REPO_ROOT, ReplicaProcess, ReplicaSet

__all__ = ["PREVIOUS_RELEASE", "Release", "ReleaseMissing", "ReleaseReplica",
           "handler_schema", "imported_from", "install_release", "release_commit"]

PREVIOUS_RELEASE = "607dad8"
"""The release before this one (an ancestor of main): the one a rolling upgrade replaces."""

READY = "installed"
"""The marker written last into a release's cache directory: its build finished."""

PATHS = ("import os, runpy, sys; root = sys.argv.pop(1); os.chdir(root); "
         "sys.path.insert(0, root); ")
"""The start of a release process's ``-c`` program: its first argument is the directory
holding the release's ``tests/``, made the working directory and the first import path
(``-P`` keeps the launcher's own working directory, this checkout, off the path)."""

REPLICA = PATHS + "runpy.run_module('tests.harness.replica', run_name='__main__', alter_sys=True)"
"""``python -m tests.harness.replica`` of the release's harness, from its directory."""


class ReleaseMissing(RuntimeError):
    """The release's commit is not in this repository (a shallow clone)."""


@dataclass(frozen=True)
class Release:
    """A release installed in its own venv."""

    commit: str
    """The full commit ID."""
    python: Path
    """The venv's interpreter."""
    harness: Path
    """A directory holding only the release's ``tests/``: its replicas' working directory."""
    build_seconds: float | None
    """How long this call spent building it; None when a finished build was reused."""


def _git(*args: str, repo: Path = REPO_ROOT) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, timeout=60)


def release_commit(commit: str, repo: Path = REPO_ROOT) -> str:
    """The full ID of ``commit``; :class:`ReleaseMissing` saying why when it is not there."""
    if _git("cat-file", "-e", f"{commit}^{{commit}}", repo=repo).returncode != 0:
        raise ReleaseMissing(
            f"commit {commit}, the previous release, is not in the repository at {repo}: "
            "a shallow clone? The rolling-upgrade test installs that release from this "
            "repository's history; fetch it (git fetch --unshallow) and run again")
    return _git("rev-parse", f"{commit}^{{commit}}", repo=repo).stdout.decode().strip()


def _extract(commit: str, dest: Path, *paths: str) -> None:
    """``git archive`` of ``commit`` (only ``paths``, when given) unpacked into ``dest``."""
    dest.mkdir(parents=True)
    archive = _git("archive", "--format=tar", commit, *paths)
    if archive.returncode != 0:
        raise RuntimeError(f"git archive {commit} failed: {archive.stderr.decode()}")
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True, timeout=60)


def _run(command: list[str], timeout: float) -> None:
    """Run a build step; its output in the error when it fails."""
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n"
                           f"{(done.stdout + done.stderr)[-3000:]}")


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock on ``path`` (two test runs on one machine build one venv)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def install_release(commit: str, cache_dir: Path, *, timeout: float = 600.0) -> Release:
    """``commit`` installed in a venv of its own under ``cache_dir``, built if needed.

    Keyed by the full commit ID and this interpreter's version (the venv is made from it);
    a directory without the marker (an interrupted build) is built again from nothing.
    """
    full = release_commit(commit)
    home = cache_dir / full
    marker = f"{full} {sys.version.split()[0]}"
    release = Release(full, home / "venv" / "bin" / "python", home / "harness", None)
    with _locked(cache_dir / f"{full}.lock"):
        ready = home / READY
        if ready.exists() and ready.read_text() == marker and release.python.exists():
            return release
        began = time.monotonic()
        shutil.rmtree(home, ignore_errors=True)
        _extract(full, home / "src")
        _extract(full, release.harness, "tests")
        _run([sys.executable, "-m", "venv", str(home / "venv")], 120)
        _run([str(release.python), "-m", "pip", "install", "--quiet", str(home / "src")],
             timeout)
        ready.write_text(marker)
        return Release(full, release.python, release.harness, time.monotonic() - began)


def imported_from(release: Release) -> dict[str, str]:
    """Where a process of ``release`` imports ``nats_scheduler`` and the replica module
    from, started exactly as :class:`ReleaseReplica` starts one."""
    program = PATHS + ("import json, nats_scheduler, tests.harness.replica as r; "
                       "print(json.dumps({'nats_scheduler': nats_scheduler.__file__, "
                       "'replica': r.__file__}))")
    done = subprocess.run([str(release.python), "-P", "-c", program, str(release.harness)],
                          capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"the release's interpreter failed: {done.stderr[-2000:]}")
    found: dict[str, str] = json.loads(done.stdout)
    return found


def handler_schema(root: Path) -> str:
    """The SQL schema (``_SCHEMA``) of the shared handler of the checkout at ``root``: two
    releases' replicas can share one handler file only if theirs are the same."""
    tree = ast.parse((root / "tests" / "harness" / "shared_handler.py").read_text())
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id == "_SCHEMA"):
            schema: str = ast.literal_eval(node.value)
            return schema
    raise ValueError(f"no _SCHEMA in {root}'s shared handler")


class ReleaseReplica(ReplicaProcess):
    """A replica of ``release`` running its own harness (``python -m
    tests.harness.replica`` of that release, from its directory, with its venv)."""

    def __init__(self, release: Release, **options: Any) -> None:
        super().__init__(**options)
        self.release = release

    def command(self) -> list[str]:
        """The current harness's command line with the release's interpreter and launcher:
        the replica's own arguments are the same in both releases."""
        current = super().command()
        assert current[1:3] == ["-m", "tests.harness.replica"], current
        return [str(self.release.python), "-P", "-c", REPLICA, str(self.release.harness),
                *current[3:]]

    @classmethod
    def joining(cls, replicas: ReplicaSet, release: Release, identity: str) -> ReleaseReplica:
        """A replica of ``release`` with ``replicas``' server, prefix, handler and settings,
        added to the set (so it is stopped with it, and its windows count); not started."""
        replica = cls(release, url=replicas.url, prefix=replicas.prefix,
                      handler_db=replicas.handler_db, identity=identity,
                      log_dir=replicas.log_dir, lease_seconds=replicas.lease_seconds,
                      settings=replicas.settings)
        replicas.replicas.append(replica)
        return replica
