"""Deployment records in SQLite: the desired state, as AstraBox's repository keeps it.

Every change raises the record's ``version`` (the Schedule's ``version`` on the seam), so a
replica that applies a stale record cannot undo a newer one. A deleted Deployment stays as a
tombstone row: its version keeps growing if the same ID is created again, which the
provider's version ordering needs (a lower version than the stored one would be ignored).

Several processes (the CLI, every dev-host replica) open the same file: WAL mode and
``BEGIN IMMEDIATE`` serialise writers.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..core import calendar
from ..seam import RunPayload, Schedule

_SCHEMA = """
CREATE TABLE IF NOT EXISTS deployments (
    deployment_id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    cron TEXT NOT NULL,
    timezone TEXT NOT NULL,
    enabled INTEGER NOT NULL,
    target TEXT NOT NULL,
    prompt TEXT NOT NULL,
    version INTEGER NOT NULL,
    deleted INTEGER NOT NULL DEFAULT 0,
    updated_at REAL NOT NULL
);
"""

_COLUMNS = ("deployment_id, name, cron, timezone, enabled, target, prompt, version, deleted,"
            " updated_at")


class DeploymentNotFound(LookupError):
    """No live Deployment with this ID."""


class DeploymentExists(ValueError):
    """A live Deployment already has this ID."""


@dataclass(frozen=True)
class Deployment:
    """One Deployment record."""

    deployment_id: str
    name: str
    cron: str
    timezone: str
    enabled: bool
    target: str
    prompt: str
    version: int
    deleted: bool
    updated_at: float

    def to_schedule(self) -> Schedule:
        """The Schedule AstraBox passes to the provider for this record."""
        return Schedule(
            deployment_id=self.deployment_id,
            name=self.name,
            cron=self.cron,
            timezone=self.timezone,
            enabled=self.enabled,
            payload=RunPayload(target=self.target, prompt=self.prompt),
            version=self.version,
        )


WAL_PATIENCE = 30.0
"""Seconds to keep asking for WAL mode while another process holds the file's lock."""


def connect(path: Path) -> sqlite3.Connection:
    """A connection configured for several processes sharing the file."""
    conn = sqlite3.connect(path, timeout=30.0, isolation_level=None)
    use_wal(conn)
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA busy_timeout=30000")
    return conn


def use_wal(conn: sqlite3.Connection) -> None:
    """Switch the file to WAL mode, asking again while another process holds its lock.

    Two processes opening a new file at once both need its write lock to switch it, and
    SQLite answers "database is locked" at once rather than wait where waiting could
    deadlock: its busy timeout does not cover this. Seen in CI as a replica of the demo
    host exiting at start.
    """
    deadline = time.monotonic() + WAL_PATIENCE
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
        time.sleep(0.02)  # a lock held by another process: nothing here to wait on


def _row(row: tuple) -> Deployment:  # type: ignore[type-arg]
    dep, name, cron, tz, enabled, target, prompt, version, deleted, updated = row
    return Deployment(dep, name, cron, tz, bool(enabled), target, prompt, int(version),
                      bool(deleted), float(updated))


class DeploymentStore:
    """Create, edit, enable/disable, delete and list Deployment records."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._conn() as conn:
            conn.executescript(_SCHEMA)

    @contextmanager
    def _conn(self) -> Iterator[sqlite3.Connection]:
        conn = connect(self.path)
        try:
            yield conn
        finally:
            conn.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._conn() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    @staticmethod
    def _get(conn: sqlite3.Connection, deployment_id: str) -> Deployment | None:
        row = conn.execute(f"SELECT {_COLUMNS} FROM deployments WHERE deployment_id = ?",
                           (deployment_id,)).fetchone()
        return _row(row) if row else None

    @staticmethod
    def _put(conn: sqlite3.Connection, d: Deployment) -> None:
        conn.execute(
            f"INSERT OR REPLACE INTO deployments ({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?)",
            (d.deployment_id, d.name, d.cron, d.timezone, int(d.enabled), d.target, d.prompt,
             d.version, int(d.deleted), d.updated_at),
        )

    # ------------------------------------------------------------------ changes

    def create(self, deployment_id: str, *, cron: str, timezone: str = "UTC",
               name: str | None = None, target: str = "default", prompt: str = "",
               enabled: bool = True) -> Deployment:
        """A new Deployment (version 1, or one above a deleted record of the same ID).

        Raises InvalidSchedule for a bad cron or zone, DeploymentExists for a live ID.
        """
        if not deployment_id or not deployment_id.strip():
            raise ValueError("a Deployment needs an ID")
        calendar.validate(cron, timezone)
        with self._write() as conn:
            old = self._get(conn, deployment_id)
            if old is not None and not old.deleted:
                raise DeploymentExists(f"deployment {deployment_id!r} already exists")
            record = Deployment(deployment_id, name or deployment_id, cron, timezone, enabled,
                                target, prompt, (old.version if old else 0) + 1, False,
                                time.time())
            self._put(conn, record)
        return record

    def edit(self, deployment_id: str, *, name: str | None = None, cron: str | None = None,
             timezone: str | None = None, target: str | None = None,
             prompt: str | None = None, enabled: bool | None = None) -> Deployment:
        """Change some fields; the version goes up by one (also when nothing changed)."""
        with self._write() as conn:
            old = self._get(conn, deployment_id)
            if old is None or old.deleted:
                raise DeploymentNotFound(f"deployment {deployment_id!r} does not exist")
            new_cron = cron if cron is not None else old.cron
            new_tz = timezone if timezone is not None else old.timezone
            calendar.validate(new_cron, new_tz)
            record = Deployment(
                deployment_id,
                name if name is not None else old.name,
                new_cron,
                new_tz,
                enabled if enabled is not None else old.enabled,
                target if target is not None else old.target,
                prompt if prompt is not None else old.prompt,
                old.version + 1,
                False,
                time.time(),
            )
            self._put(conn, record)
        return record

    def set_enabled(self, deployment_id: str, enabled: bool) -> Deployment:
        return self.edit(deployment_id, enabled=enabled)

    def delete(self, deployment_id: str) -> Deployment:
        """Mark deleted (a tombstone with a higher version)."""
        with self._write() as conn:
            old = self._get(conn, deployment_id)
            if old is None or old.deleted:
                raise DeploymentNotFound(f"deployment {deployment_id!r} does not exist")
            record = Deployment(old.deployment_id, old.name, old.cron, old.timezone, old.enabled,
                                old.target, old.prompt, old.version + 1, True, time.time())
            self._put(conn, record)
        return record

    # ------------------------------------------------------------------ reads

    def get(self, deployment_id: str) -> Deployment | None:
        """The live record, or None (deleted records are not returned)."""
        with self._conn() as conn:
            record = self._get(conn, deployment_id)
        return record if record is not None and not record.deleted else None

    def all(self, *, include_deleted: bool = False) -> list[Deployment]:
        with self._conn() as conn:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM deployments ORDER BY deployment_id").fetchall()
        records = [_row(r) for r in rows]
        return records if include_deleted else [r for r in records if not r.deleted]

