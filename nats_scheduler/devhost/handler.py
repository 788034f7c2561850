"""The dev host's RunHandler: AstraBox's side of a Run, kept in the Deployment database.

Like AstraBox, ``start_session`` and ``admit_turn`` are idempotent on the Run ID: the first
call creates the Session (or turn) row, every later call from any replica returns it. The
rows live in the same SQLite file as the Deployment records, so every replica shares them
and a test (or ``devhost sessions``) can read them. Every call is also logged, so a repeated
call after a takeover is visible.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from ..seam import RunInvocation, RunPermanentError
from .records import connect

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    run_id TEXT PRIMARY KEY, session_id TEXT NOT NULL UNIQUE, deployment_id TEXT NOT NULL,
    trigger TEXT NOT NULL, target TEXT NOT NULL, prompt TEXT NOT NULL,
    created_by TEXT NOT NULL, created_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS turns (
    run_id TEXT PRIMARY KEY, turn_id TEXT NOT NULL UNIQUE, session_id TEXT NOT NULL,
    created_by TEXT NOT NULL, created_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS handler_calls (
    id INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, process TEXT NOT NULL,
    method TEXT NOT NULL, run_id TEXT NOT NULL, attempt INTEGER NOT NULL);
"""


@dataclass(frozen=True)
class SessionRow:
    """A Session started for a Run, with its turn once admitted."""

    run_id: str
    session_id: str
    deployment_id: str
    trigger: str
    prompt: str
    created_by: str
    created_at: float
    turn_id: str | None


class DevHostRunHandler:
    """A RunHandler shared by every dev-host replica that opens the same database."""

    def __init__(self, path: str | os.PathLike[str], *, process: str | None = None) -> None:
        self.path = Path(path)
        self.process = process or f"pid-{os.getpid()}"
        conn = connect(self.path)
        try:
            conn.executescript(_SCHEMA)
        finally:
            conn.close()

    async def start_session(self, invocation: RunInvocation) -> str:
        return await asyncio.to_thread(self._start_session, invocation)

    async def admit_turn(self, invocation: RunInvocation) -> str:
        if invocation.session_id is None:
            raise RunPermanentError("admit_turn needs the Session ID of the Run")
        return await asyncio.to_thread(self._admit_turn, invocation)

    def _transaction(self) -> sqlite3.Connection:
        conn = connect(self.path)
        conn.execute("BEGIN IMMEDIATE")
        return conn

    def _log(self, conn: sqlite3.Connection, method: str, invocation: RunInvocation) -> None:
        conn.execute(
            "INSERT INTO handler_calls (at, process, method, run_id, attempt) VALUES (?,?,?,?,?)",
            (time.time(), self.process, method, invocation.run_id, invocation.attempt))

    def _start_session(self, invocation: RunInvocation) -> str:
        conn = self._transaction()
        try:
            row = conn.execute("SELECT session_id FROM sessions WHERE run_id = ?",
                               (invocation.run_id,)).fetchone()
            if row is not None:
                session: str = row[0]
            else:
                count = conn.execute("SELECT COUNT(*) FROM sessions").fetchone()[0]
                session = f"session-{count + 1}"
                conn.execute(
                    "INSERT INTO sessions VALUES (?,?,?,?,?,?,?,?)",
                    (invocation.run_id, session, invocation.deployment_id,
                     str(invocation.trigger), invocation.payload.target,
                     invocation.payload.prompt, self.process, time.time()))
            self._log(conn, "start_session", invocation)
            conn.execute("COMMIT")
            return session
        finally:
            conn.close()

    def _admit_turn(self, invocation: RunInvocation) -> str:
        conn = self._transaction()
        try:
            row = conn.execute("SELECT turn_id FROM turns WHERE run_id = ?",
                               (invocation.run_id,)).fetchone()
            if row is not None:
                turn: str = row[0]
            else:
                count = conn.execute("SELECT COUNT(*) FROM turns").fetchone()[0]
                turn = f"turn-{count + 1}"
                conn.execute("INSERT INTO turns VALUES (?,?,?,?,?)",
                             (invocation.run_id, turn, invocation.session_id, self.process,
                              time.time()))
            self._log(conn, "admit_turn", invocation)
            conn.execute("COMMIT")
            return turn
        finally:
            conn.close()


def read_sessions(path: str | os.PathLike[str], deployment_id: str | None = None
                  ) -> list[SessionRow]:
    """Every Session (oldest first), optionally of one deployment, with its turn."""
    DevHostRunHandler(path, process="reader")  # make sure the tables exist
    conn = connect(Path(path))
    try:
        query = ("SELECT s.run_id, s.session_id, s.deployment_id, s.trigger, s.prompt,"
                 " s.created_by, s.created_at, t.turn_id FROM sessions s"
                 " LEFT JOIN turns t ON t.run_id = s.run_id")
        if deployment_id is None:
            rows = conn.execute(query + " ORDER BY s.created_at").fetchall()
        else:
            rows = conn.execute(query + " WHERE s.deployment_id = ? ORDER BY s.created_at",
                                (deployment_id,)).fetchall()
    finally:
        conn.close()
    return [SessionRow(*row) for row in rows]


def count_calls(path: str | os.PathLike[str], run_id: str) -> dict[str, int]:
    """method -> number of handler calls for one Run."""
    conn = connect(Path(path))
    try:
        rows = conn.execute("SELECT method, COUNT(*) FROM handler_calls WHERE run_id = ?"
                            " GROUP BY method", (run_id,)).fetchall()
    finally:
        conn.close()
    return dict(rows)
