"""One dev-host replica: the provider's lifecycle as AstraBox drives it.

Start: load the provider (:mod:`.loader`), ``start(handler)`` (the provider serves the
admin service itself, as under AstraBox), ``reconcile(every stored Schedule)``. Then watch
the Deployment records: a record whose version changed is passed to ``apply`` (or
``delete`` for a tombstone). Every replica does the same; the provider's version ordering
makes the second ``apply`` of one version a no-op, as it does when several AstraBox replicas
handle changes. Stop (SIGTERM, SIGINT, or the parent process gone): ``stop()`` the provider
(it stops the admin service first, then drains).

The records are polled (``poll_interval``, default 0.25 s): the CLI that edits them is a
separate, short-lived process, and SQLite has no change notifications across processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..seam import RunHandler, SchedulerError, SchedulerUnavailable
from .handler import DevHostRunHandler
from .loader import ProviderLoadError, load_provider
from .records import Deployment, DeploymentStore

log = logging.getLogger(__name__)


class SqliteBackend:
    """The RepositoryBackend AstraBox passes to ``configure`` for a SQLite repository."""

    name = "sqlite"

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path).resolve()

    def sql_database_url(self) -> str:
        return f"sqlite:///{self.path}"


class DevHost:
    """Keeps one provider in step with the Deployment records."""

    def __init__(self, records: DeploymentStore, provider: Any | None, handler: RunHandler,
                 *, poll_interval: float = 0.25) -> None:
        self.records = records
        self.provider = provider
        self.handler = handler
        self.poll_interval = poll_interval
        self._seen: dict[str, int] = {}
        self._started = False

    async def start(self) -> None:
        """Start the provider (it serves the admin service); reconcile every stored Schedule."""
        if self.provider is None:
            return
        await self.provider.start(self.handler)
        self._started = True
        rows = await asyncio.to_thread(self.records.all, include_deleted=True)
        live = [row.to_schedule() for row in rows if not row.deleted]
        await self.provider.reconcile(live)
        self._seen = {row.deployment_id: row.version for row in rows}
        log.info("reconciled %d schedules", len(live))

    async def sync_once(self) -> list[str]:
        """Pass every changed record to the provider; returns the deployment IDs passed."""
        if self.provider is None:
            return []
        rows = await asyncio.to_thread(self.records.all, include_deleted=True)
        passed = []
        for row in rows:
            if self._seen.get(row.deployment_id) == row.version:
                continue
            try:
                await self._pass(row)
            except SchedulerUnavailable as exc:
                log.warning("deployment %s: %s (will try again)", row.deployment_id, exc)
                continue
            except SchedulerError as exc:
                log.error("deployment %s is not scheduled: %s", row.deployment_id, exc)
            self._seen[row.deployment_id] = row.version
            passed.append(row.deployment_id)
        return passed

    async def _pass(self, row: Deployment) -> None:
        assert self.provider is not None
        if row.deleted:
            await self.provider.delete(row.deployment_id)
            log.info("deleted %s (version %d)", row.deployment_id, row.version)
        else:
            await self.provider.apply(row.to_schedule())
            log.info("applied %s (version %d, %s)", row.deployment_id, row.version,
                     "enabled" if row.enabled else "disabled")

    async def run_until(self, stop: asyncio.Event, parent_pid: int | None = None) -> None:
        """Sync every ``poll_interval`` until ``stop`` is set or the parent process is gone."""
        while not stop.is_set():
            if parent_pid is not None and os.getppid() != parent_pid:
                log.warning("parent process %d is gone; stopping", parent_pid)
                return
            try:
                await self.sync_once()
            except Exception:  # the records file may be busy; try again next poll
                log.exception("syncing the Deployment records failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.poll_interval)

    async def stop(self) -> None:
        if self.provider is not None and self._started:
            await self.provider.stop()
            self._started = False


def _install_signals(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)


async def serve(db: str | os.PathLike[str], environ: Mapping[str, str], *,
                poll_interval: float = 0.25, parent_pid: int | None = None) -> int:
    """The ``devhost run`` command: one replica until a signal. Returns the exit code."""
    records = DeploymentStore(db)
    process = environ.get("ASTRABOX_NATS_IDENTITY") or f"pid-{os.getpid()}"
    handler = DevHostRunHandler(db, process=process)
    try:
        provider = load_provider(environ, SqliteBackend(db))
    except ProviderLoadError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2
    host = DevHost(records, provider, handler, poll_interval=poll_interval)
    stop = asyncio.Event()
    _install_signals(stop)
    try:
        await host.start()
    except SchedulerError as exc:
        print(f"error: the scheduler could not start: {exc}", file=sys.stderr, flush=True)
        await host.stop()
        return 3
    identity = getattr(provider, "identity", None) or process
    print(f"devhost ready: identity {identity}, {len(records.all())} deployments",
          flush=True)
    try:
        await host.run_until(stop, parent_pid)
    finally:
        await host.stop()
        print(f"devhost stopped: identity {identity}", flush=True)
    return 0
