"""``SqliteRunHandler``: an AstraBox stand-in whose state all processes share.

Multi-process tests and benchmarks run several provider replicas as separate OS processes
(:mod:`tests.harness.replica`). To prove "one Session per Run" across them, the handler's
idempotency and its call records must live where every process sees them: one SQLite file
(WAL mode, ``BEGIN IMMEDIATE`` transactions, so concurrent processes serialise on the write
lock).

Like AstraBox, ``start_session`` and ``admit_turn`` are idempotent on the Run ID: the first
call creates the Session (or turn), every later call - from any process - returns it.
Each call is recorded (process, method, Run, attempt, session) so tests can count.

Behaviour can be steered per deployment through the ``rules`` table (set from a test
process): ``fail_transient:N`` (the next N calls fail), ``fail_permanent``, ``slow:SECONDS``,
``slow_start:SECONDS`` and ``slow_admit:SECONDS`` (sleep inside the call),
``garbage_start:KIND`` and ``garbage_admit:KIND`` (return ``""``, ``None`` or ``42`` instead of
an ID, for KIND ``empty``, ``none``, ``int``; recorded as ``garbage``), ``deaf_admit``
(``admit_turn`` never returns and ignores cancellation, like a client library that swallows
it; recorded as ``deaf``), and the two deterministic ones that multi-process tests use to
have a call in flight at a known point:

- ``hang_start``: ``start_session`` records a ``hang`` call on entry, then waits until the
  rule is cleared (or changed), then proceeds. A test waits for that record, then kills or
  pauses the process: "killed before start_session returned".
- ``hang_admit``: the same in ``admit_turn``, i.e. after the Session ID was returned and
  stored: "killed between start_session and admit_turn".

Waiting polls the shared file, so clearing the rule from the test process releases every
process blocked on it; a cancelled call (lost lease, drain) stops waiting at once.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nats_scheduler.devhost.records import use_wal
from nats_scheduler.seam import RunInvocation, RunPermanentError

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (run_id TEXT PRIMARY KEY, session_id TEXT NOT NULL,
                                     deployment_id TEXT NOT NULL, created_by TEXT NOT NULL,
                                     created_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS turns (run_id TEXT PRIMARY KEY, turn_id TEXT NOT NULL,
                                  session_id TEXT NOT NULL, created_by TEXT NOT NULL,
                                  created_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS calls (id INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL,
                                  process TEXT NOT NULL, method TEXT NOT NULL,
                                  run_id TEXT NOT NULL, deployment_id TEXT NOT NULL,
                                  trigger TEXT NOT NULL, attempt INTEGER NOT NULL,
                                  session_id TEXT, outcome TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS rules (deployment_id TEXT PRIMARY KEY, rule TEXT NOT NULL);
"""

_NO_GARBAGE = object()
_GARBAGE: dict[str, object] = {"empty": "", "none": None, "int": 42}
"""What a ``garbage_*`` rule returns instead of a Session or turn ID."""

HANG_POLL_SECONDS = 0.02
"""How often a call blocked by a ``hang_*`` rule looks whether the rule was cleared."""


async def _ignore_cancellation_forever() -> None:
    """Never return, and swallow every cancellation (a deaf call)."""
    while True:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            continue


@dataclass(frozen=True)
class CallRecord:
    """One handler call as recorded in the shared file."""

    at: float
    process: str
    method: str
    run_id: str
    deployment_id: str
    trigger: str
    attempt: int
    session_id: str | None
    outcome: str


def _connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=30.0, isolation_level=None)
    use_wal(conn)  # several replica processes open the same new file at once
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA busy_timeout=30000")
    return conn


def _reader(path: Path) -> sqlite3.Connection:
    """A connection that only reads (the file is in WAL mode already: no switch, no lock),
    usable from the worker threads ``asyncio.to_thread`` picks."""
    conn = sqlite3.connect(path, timeout=30.0, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA busy_timeout=30000")
    return conn


class SqliteRunHandler:
    """A RunHandler shared by every process that opens the same SQLite file."""

    def __init__(self, path: str | os.PathLike[str], *, process: str | None = None) -> None:
        self.path = Path(path)
        self.process = process or f"pid-{os.getpid()}"
        conn = _connect(self.path)
        try:
            conn.executescript(_SCHEMA)
        finally:
            conn.close()

    # ------------------------------------------------------------------ RunHandler

    async def start_session(self, invocation: RunInvocation) -> str:
        garbage = await self._apply_rule(invocation, "start_session")
        if garbage is not _NO_GARBAGE:
            return garbage  # type: ignore[return-value]
        session = await asyncio.to_thread(self._start_session, invocation)
        return session

    async def admit_turn(self, invocation: RunInvocation) -> str:
        garbage = await self._apply_rule(invocation, "admit_turn")
        if garbage is not _NO_GARBAGE:
            return garbage  # type: ignore[return-value]
        if invocation.session_id is None:
            raise RunPermanentError("admit_turn needs the Session ID of the Run")
        return await asyncio.to_thread(self._admit_turn, invocation)

    # ------------------------------------------------------------------ steering

    def set_rule(self, deployment_id: str, rule: str | None) -> None:
        """Steer calls of one deployment (see the module docstring); None clears."""
        conn = _connect(self.path)
        try:
            if rule is None:
                conn.execute("DELETE FROM rules WHERE deployment_id = ?", (deployment_id,))
            else:
                conn.execute("INSERT OR REPLACE INTO rules VALUES (?, ?)", (deployment_id, rule))
        finally:
            conn.close()

    async def _apply_rule(self, invocation: RunInvocation, method: str) -> object:
        """Act on the deployment's rule; a garbage answer to return instead, if any."""
        rule = await asyncio.to_thread(self._take_rule, invocation.deployment_id)
        if rule is None:
            return _NO_GARBAGE
        kind, _, arg = rule.partition(":")
        if (kind, method) in (("garbage_start", "start_session"), ("garbage_admit", "admit_turn")):
            await asyncio.to_thread(self._record, invocation, method, "garbage")
            return _GARBAGE[arg or "empty"]
        if (kind, method) == ("deaf_admit", "admit_turn"):
            await asyncio.to_thread(self._record, invocation, method, "deaf")
            await _ignore_cancellation_forever()
        if (kind, method) in (("hang_start", "start_session"), ("hang_admit", "admit_turn")):
            await asyncio.to_thread(self._record, invocation, method, "hang")
            await self._wait_cleared(invocation.deployment_id, rule)
            return _NO_GARBAGE
        if kind == "fail_transient":
            self._record(invocation, method, "transient")
            raise ConnectionError("handler unavailable (steered)")
        if kind == "fail_permanent":
            self._record(invocation, method, "permanent")
            raise RunPermanentError("rejected by the handler (steered)")
        if kind == "slow" or (kind == "slow_admit" and method == "admit_turn") or (
            kind == "slow_start" and method == "start_session"
        ):
            await asyncio.sleep(float(arg or "1"))
        return _NO_GARBAGE

    async def _wait_cleared(self, deployment_id: str, rule: str) -> None:
        """Block until the deployment's rule is no longer ``rule`` (polls the shared file).

        On one connection kept open, reading only: a test SIGSTOPs a process blocked here,
        and a connection opened and closed at every poll could be stopped holding the
        file's lock (its WAL switch, or the checkpoint of a last close), so every other
        process's write failed as "database is locked" until it woke.

        A cancelled wait (the replica lost the Run's lease) leaves its read running in its
        worker thread; closing the connection under that read crashes CPython's sqlite3
        (SIGSEGV), so the close waits for the read to end first."""
        conn = await asyncio.to_thread(_reader, self.path)
        read: asyncio.Future[Any] | None = None
        try:
            while True:
                read = asyncio.ensure_future(asyncio.to_thread(lambda: conn.execute(
                    "SELECT rule FROM rules WHERE deployment_id = ?",
                    (deployment_id,)).fetchone()))
                row = await asyncio.shield(read)
                if (None if row is None else str(row[0])) != rule:
                    return
                await asyncio.sleep(HANG_POLL_SECONDS)
        finally:
            if read is not None:
                await asyncio.wait({read})
            await asyncio.to_thread(conn.close)

    def rule(self, deployment_id: str) -> str | None:
        """The rule currently set for a deployment, if any."""
        conn = _connect(self.path)
        try:
            row = conn.execute("SELECT rule FROM rules WHERE deployment_id = ?",
                               (deployment_id,)).fetchone()
            return None if row is None else str(row[0])
        finally:
            conn.close()

    def _take_rule(self, deployment_id: str) -> str | None:
        conn = _connect(self.path)
        try:
            conn.execute("BEGIN IMMEDIATE")
            row = conn.execute("SELECT rule FROM rules WHERE deployment_id = ?",
                               (deployment_id,)).fetchone()
            if row is None:
                conn.execute("COMMIT")
                return None
            rule: str = row[0]
            kind, _, arg = rule.partition(":")
            if kind == "fail_transient":
                left = int(arg or "1") - 1
                if left <= 0:
                    conn.execute("DELETE FROM rules WHERE deployment_id = ?", (deployment_id,))
                else:
                    conn.execute("UPDATE rules SET rule = ? WHERE deployment_id = ?",
                                 (f"fail_transient:{left}", deployment_id))
            conn.execute("COMMIT")
            return rule
        finally:
            conn.close()

    # ------------------------------------------------------------------ idempotent calls

    def _start_session(self, invocation: RunInvocation) -> str:
        conn = _connect(self.path)
        try:
            conn.execute("BEGIN IMMEDIATE")
            row = conn.execute("SELECT session_id FROM sessions WHERE run_id = ?",
                               (invocation.run_id,)).fetchone()
            if row is None:
                count = conn.execute("SELECT COUNT(*) FROM sessions").fetchone()[0]
                session = f"sess-{count + 1}"
                conn.execute("INSERT INTO sessions VALUES (?, ?, ?, ?, ?)",
                             (invocation.run_id, session, invocation.deployment_id,
                              self.process, time.time()))
            else:
                session = row[0]
            self._insert_call(conn, invocation, "start_session", "ok")
            conn.execute("COMMIT")
            return session
        finally:
            conn.close()

    def _admit_turn(self, invocation: RunInvocation) -> str:
        conn = _connect(self.path)
        try:
            conn.execute("BEGIN IMMEDIATE")
            row = conn.execute("SELECT turn_id FROM turns WHERE run_id = ?",
                               (invocation.run_id,)).fetchone()
            if row is None:
                count = conn.execute("SELECT COUNT(*) FROM turns").fetchone()[0]
                turn = f"turn-{count + 1}"
                conn.execute("INSERT INTO turns VALUES (?, ?, ?, ?, ?)",
                             (invocation.run_id, turn, invocation.session_id, self.process,
                              time.time()))
            else:
                turn = row[0]
            self._insert_call(conn, invocation, "admit_turn", "ok")
            conn.execute("COMMIT")
            return turn
        finally:
            conn.close()

    def _record(self, invocation: RunInvocation, method: str, outcome: str) -> None:
        conn = _connect(self.path)
        try:
            self._insert_call(conn, invocation, method, outcome)
        finally:
            conn.close()

    def _insert_call(self, conn: sqlite3.Connection, invocation: RunInvocation, method: str,
                     outcome: str) -> None:
        conn.execute(
            "INSERT INTO calls (at, process, method, run_id, deployment_id, trigger, attempt,"
            " session_id, outcome) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (time.time(), self.process, method, invocation.run_id, invocation.deployment_id,
             str(invocation.trigger), invocation.attempt, invocation.session_id, outcome),
        )

    # ------------------------------------------------------------------ reading (tests)

    def sessions(self) -> dict[str, str]:
        """run_id -> session_id for every Session ever started."""
        conn = _connect(self.path)
        try:
            return dict(conn.execute("SELECT run_id, session_id FROM sessions").fetchall())
        finally:
            conn.close()

    def turns(self) -> dict[str, str]:
        conn = _connect(self.path)
        try:
            return dict(conn.execute("SELECT run_id, turn_id FROM turns").fetchall())
        finally:
            conn.close()

    def calls(self, run_id: str | None = None) -> list[CallRecord]:
        conn = _connect(self.path)
        try:
            query = ("SELECT at, process, method, run_id, deployment_id, trigger, attempt,"
                     " session_id, outcome FROM calls")
            rows = (conn.execute(query + " WHERE run_id = ? ORDER BY id", (run_id,))
                    if run_id else conn.execute(query + " ORDER BY id"))
            return [CallRecord(*row) for row in rows.fetchall()]
        finally:
            conn.close()
