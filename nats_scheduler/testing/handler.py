"""``RecordingRunHandler``: an in-memory stand-in for AstraBox's side of dispatch.

It implements :class:`~nats_scheduler.seam.RunHandler` the way AstraBox does — both calls
are idempotent on ``invocation.run_id`` (a repeated ``start_session`` returns the same
``sess-<n>``, a repeated ``admit_turn`` the same ``turn-<n>``) — records every call in
order, and can be told to misbehave per deployment, per Run and per method:

=========================  =====================================================================
``fail_transiently(n)``    raise ``ConnectionError`` for the next ``n`` matching calls
``fail_forever()``         raise ``ConnectionError`` for every matching call (retries run out)
``fail_permanently()``     raise :class:`~nats_scheduler.seam.RunPermanentError`
``block()``                hold matching calls until :meth:`Gate.release` (observe DISPATCHING,
                           draining); returns the :class:`Gate`
``hang()``                 like ``block`` but meant never to be released (per-call timeouts)
=========================  =====================================================================

Rules are matched most specific first (a Run's rules, then its deployment's, then rules for
every call); among rules of the same scope the oldest still-active one wins, so rules can be
stacked ("fail twice, then block"). Nothing here knows about any scheduler engine.

It also checks what AstraBox would reject and lists it in :attr:`RecordingRunHandler.violations`:
``admit_turn`` without the Session ID ``start_session`` returned, a Run whose identity
(deployment, trigger, due time, payload, replay_of) changes between calls, or an attempt
number that goes down.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal, TypedDict, Unpack

from nats_scheduler.seam import RunInvocation, RunPermanentError

__all__ = [
    "CallOutcome",
    "Gate",
    "HandlerCall",
    "Method",
    "RecordingRunHandler",
]

Method = Literal["start_session", "admit_turn"]


class Match(TypedDict, total=False):
    """Which calls an instruction applies to: one Run, one deployment, one method, or all.

    The most specific instruction wins (a Run's over its deployment's over every call's).
    """

    run_id: str
    deployment_id: str
    method: Method
"""The name of a :class:`~nats_scheduler.seam.RunHandler` method."""

_POLL_INTERVAL = 0.01


class CallOutcome(StrEnum):
    """What became of one handler call."""

    IN_PROGRESS = "in_progress"
    """Still running (blocked, hanging, or abandoned by the caller without cancelling)."""
    OK = "ok"
    """Returned a Session or turn ID."""
    TRANSIENT = "transient"
    """Raised an ordinary exception: the provider should retry."""
    PERMANENT = "permanent"
    """Raised ``RunPermanentError``: the provider must not retry."""
    CANCELLED = "cancelled"
    """The caller cancelled the call (e.g. its per-call timeout fired, or it stopped)."""


@dataclass
class HandlerCall:
    """One recorded call. The handler fills in the outcome when the call ends."""

    index: int
    """Position in :attr:`RecordingRunHandler.calls`, from 0."""
    method: Method
    invocation: RunInvocation
    started_at: float
    """``time.monotonic()`` when the call arrived."""
    outcome: CallOutcome = CallOutcome.IN_PROGRESS
    finished_at: float | None = None
    result: str | None = None
    """The Session or turn ID returned, when ``outcome`` is OK."""
    error: str | None = None
    """``str()`` of the exception raised, when the call failed."""

    @property
    def run_id(self) -> str:
        return self.invocation.run_id

    @property
    def deployment_id(self) -> str:
        return self.invocation.deployment_id


class Gate:
    """Holds the calls that reach it until :meth:`release` (or the handler closes).

    Tests use :meth:`wait_until_blocked` to know a call is in flight, then inspect the
    provider (the Run is DISPATCHING) or stop it (draining).
    """

    def __init__(self, limit: int | None = None) -> None:
        self._limit = limit
        self._open = asyncio.Event()
        self._aborted = False
        self.arrivals = 0
        """How many calls have reached the gate so far."""
        self.blocked = 0
        """How many calls are waiting at the gate right now."""

    @property
    def released(self) -> bool:
        return self._open.is_set()

    @property
    def active(self) -> bool:
        """Whether the gate still catches calls (not released, limit not reached)."""
        return not self.released and (self._limit is None or self.arrivals < self._limit)

    def release(self) -> None:
        """Let every held call (and every later one) through."""
        self._open.set()

    def abort(self) -> None:
        """Wake every held call with a transient failure (used when the handler closes)."""
        self._aborted = True
        self._open.set()

    async def wait_until_blocked(self, count: int = 1, timeout: float = 10.0) -> None:
        """Return once ``count`` calls have reached this gate; TimeoutError after ``timeout``."""
        deadline = time.monotonic() + timeout
        while self.arrivals < count:
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"{self.arrivals} of {count} expected call(s) reached the gate in {timeout}s"
                )
            await asyncio.sleep(_POLL_INTERVAL)

    async def pass_through(self) -> None:
        """Called by the handler: wait here until released."""
        self.arrivals += 1
        self.blocked += 1
        try:
            await self._open.wait()
        finally:
            self.blocked -= 1
        if self._aborted:
            raise ConnectionError("handler closed while the call was held")


@dataclass
class _Rule:
    """One instruction: how to answer the calls it matches, and for how many calls."""

    action: Literal["transient", "permanent", "gate"]
    run_id: str | None
    deployment_id: str | None
    method: Method | None
    remaining: int | None  # None: unlimited
    message: str
    gate: Gate | None = None

    @property
    def scope(self) -> int:
        """Lower is more specific: 0 per Run, 1 per deployment, 2 every call."""
        return 0 if self.run_id is not None else 1 if self.deployment_id is not None else 2

    @property
    def active(self) -> bool:
        if self.gate is not None:
            return self.gate.active
        return self.remaining is None or self.remaining > 0

    def matches(self, method: Method, invocation: RunInvocation) -> bool:
        return (
            self.active
            and (self.method is None or self.method == method)
            and (self.run_id is None or self.run_id == invocation.run_id)
            and (self.deployment_id is None or self.deployment_id == invocation.deployment_id)
        )


@dataclass
class _RunRecord:
    first: RunInvocation
    last_attempt: int
    session_id: str | None = None
    turn_id: str | None = None
    sessions: set[str] = field(default_factory=set)


class RecordingRunHandler:
    """An AstraBox stand-in implementing ``RunHandler``; see the module docstring."""

    def __init__(self) -> None:
        self._calls: list[HandlerCall] = []
        self._rules: list[_Rule] = []
        self._runs: dict[str, _RunRecord] = {}
        self._ids = itertools.count(1)
        self._closed = False
        self.violations: list[str] = []
        """Things AstraBox would reject that a provider did; empty for a correct provider."""

    # ------------------------------------------------------------------ RunHandler

    async def start_session(self, invocation: RunInvocation) -> str:
        """Start the Run's Session, or return the one already started for this run_id."""
        return await self._call("start_session", invocation)

    async def admit_turn(self, invocation: RunInvocation) -> str:
        """Admit the Run's turn, or return the one already admitted for this run_id."""
        return await self._call("admit_turn", invocation)

    # ------------------------------------------------------------------ instructions

    def fail_transiently(
        self, times: int, *, message: str = "handler unavailable", **match: Unpack[Match]
    ) -> None:
        """Raise ``ConnectionError(message)`` for the next ``times`` matching calls."""
        if times < 1:
            raise ValueError("times must be >= 1")
        self._add("transient", match, times, message)

    def fail_forever(self, *, message: str = "handler unavailable", **match: Unpack[Match]) -> None:
        """Raise ``ConnectionError(message)`` for every matching call, so retries run out."""
        self._add("transient", match, None, message)

    def fail_permanently(
        self, *, message: str = "the deployment rejected this run", **match: Unpack[Match]
    ) -> None:
        """Raise ``RunPermanentError(message)`` for every matching call."""
        self._add("permanent", match, None, message)

    def block(self, *, times: int | None = None, **match: Unpack[Match]) -> Gate:
        """Hold matching calls (at most ``times`` of them) until the returned gate is released.

        A released call then behaves normally (later rules, idempotent IDs).
        """
        gate = Gate(times)
        self._add("gate", match, None, "", gate)
        return gate

    def hang(self, *, times: int | None = None, **match: Unpack[Match]) -> Gate:
        """Never answer matching calls (at most ``times`` of them): only a cancel ends them.

        Same mechanism as :meth:`block`; the gate is returned so a test can wait for the
        call to arrive, and so :meth:`close` can still wake abandoned calls.
        """
        return self.block(times=times, **match)

    def clear(self) -> None:
        """Forget every instruction; release every gate (held calls proceed normally)."""
        for rule in self._rules:
            if rule.gate is not None:
                rule.gate.release()
        self._rules.clear()

    def close(self) -> None:
        """Shut down like AstraBox would: held calls and every later call fail transiently.

        Used at teardown so no call stays parked forever after the provider stopped.
        """
        self._closed = True
        for rule in self._rules:
            if rule.gate is not None:
                rule.gate.abort()

    # ------------------------------------------------------------------ inspection

    @property
    def calls(self) -> tuple[HandlerCall, ...]:
        """Every call so far, in arrival order."""
        return tuple(self._calls)

    def calls_for(self, run_id: str, method: Method | None = None) -> list[HandlerCall]:
        """The calls of one Run (optionally of one method), in arrival order."""
        return [
            c for c in self._calls if c.run_id == run_id and (method is None or c.method == method)
        ]

    def calls_for_deployment(
        self, deployment_id: str, method: Method | None = None
    ) -> list[HandlerCall]:
        """The calls of every Run of one deployment (optionally of one method), in order."""
        return [
            c
            for c in self._calls
            if c.deployment_id == deployment_id and (method is None or c.method == method)
        ]

    def run_ids(self, deployment_id: str) -> set[str]:
        """The distinct run IDs the handler was called for in one deployment."""
        return {c.run_id for c in self._calls if c.deployment_id == deployment_id}

    def session_of(self, run_id: str) -> str | None:
        """The Session ID started for the Run, or None."""
        record = self._runs.get(run_id)
        return record.session_id if record else None

    def turn_of(self, run_id: str) -> str | None:
        """The turn ID admitted for the Run, or None."""
        record = self._runs.get(run_id)
        return record.turn_id if record else None

    def sessions_created(self, run_id: str) -> int:
        """How many distinct Sessions were created for the Run (AstraBox keeps this at 1)."""
        record = self._runs.get(run_id)
        return len(record.sessions) if record else 0

    async def wait_for_call(
        self, predicate: Callable[[HandlerCall], bool], timeout: float = 10.0
    ) -> HandlerCall:
        """The first recorded call matching ``predicate``, waiting up to ``timeout`` seconds.

        The predicate sees calls in their current state, so it can wait for an outcome too
        (``lambda c: c.method == "admit_turn" and c.outcome == CallOutcome.OK``).
        """
        deadline = time.monotonic() + timeout
        while True:
            for call in self._calls:
                if predicate(call):
                    return call
            if time.monotonic() >= deadline:
                raise TimeoutError(f"no matching handler call within {timeout}s")
            await asyncio.sleep(_POLL_INTERVAL)

    # ------------------------------------------------------------------ internals

    def _add(
        self,
        action: Literal["transient", "permanent", "gate"],
        match: Match,
        remaining: int | None,
        message: str,
        gate: Gate | None = None,
    ) -> None:
        self._rules.append(_Rule(action, match.get("run_id"), match.get("deployment_id"),
                                 match.get("method"), remaining, message, gate))

    def _rule_for(self, method: Method, invocation: RunInvocation) -> _Rule | None:
        matching = [r for r in self._rules if r.matches(method, invocation)]
        # min() keeps the first of equal scopes: the oldest active rule wins.
        return min(matching, key=lambda r: r.scope, default=None)

    async def _call(self, method: Method, invocation: RunInvocation) -> str:
        call = HandlerCall(len(self._calls), method, invocation, time.monotonic())
        self._calls.append(call)
        self._check_identity(method, invocation)
        try:
            result = await self._answer(method, invocation)
        except RunPermanentError as exc:
            self._finish(call, CallOutcome.PERMANENT, error=str(exc))
            raise
        except asyncio.CancelledError:
            self._finish(call, CallOutcome.CANCELLED)
            raise
        except Exception as exc:
            self._finish(call, CallOutcome.TRANSIENT, error=str(exc))
            raise
        self._finish(call, CallOutcome.OK, result=result)
        return result

    async def _answer(self, method: Method, invocation: RunInvocation) -> str:
        if self._closed:
            raise ConnectionError("handler closed")
        rule = self._rule_for(method, invocation)
        if rule is not None:
            if rule.gate is not None:
                await rule.gate.pass_through()
                return await self._answer(method, invocation)
            if rule.remaining is not None:
                rule.remaining -= 1
            if rule.action == "permanent":
                raise RunPermanentError(rule.message)
            raise ConnectionError(rule.message)
        if method == "start_session":
            return self._start_session(invocation)
        return self._admit_turn(invocation)

    def _start_session(self, invocation: RunInvocation) -> str:
        record = self._runs[invocation.run_id]
        if invocation.session_id not in (None, record.session_id):
            self._violate(
                f"run {invocation.run_id}: start_session with session {invocation.session_id}, "
                f"but its session is {record.session_id}"
            )
        if record.session_id is None:
            record.session_id = f"sess-{next(self._ids)}"
            record.sessions.add(record.session_id)
        return record.session_id

    def _admit_turn(self, invocation: RunInvocation) -> str:
        record = self._runs[invocation.run_id]
        if invocation.session_id is None or invocation.session_id != record.session_id:
            self._violate(
                f"run {invocation.run_id}: admit_turn with session {invocation.session_id}, "
                f"but start_session returned {record.session_id}"
            )
            raise RunPermanentError("admit_turn needs the Session ID that start_session returned")
        if record.turn_id is None:
            record.turn_id = f"turn-{next(self._ids)}"
        return record.turn_id

    def _check_identity(self, method: Method, invocation: RunInvocation) -> None:
        record = self._runs.get(invocation.run_id)
        if record is None:
            self._runs[invocation.run_id] = _RunRecord(invocation, invocation.attempt)
            return
        first = record.first
        for name in ("deployment_id", "trigger", "due_at", "payload", "replay_of"):
            if getattr(first, name) != getattr(invocation, name):
                self._violate(f"run {invocation.run_id}: {name} changed between calls ({method})")
        if invocation.attempt < record.last_attempt:
            self._violate(
                f"run {invocation.run_id}: attempt went down from {record.last_attempt} "
                f"to {invocation.attempt} ({method})"
            )
        record.last_attempt = max(record.last_attempt, invocation.attempt)

    def _violate(self, message: str) -> None:
        self.violations.append(message)

    @staticmethod
    def _finish(
        call: HandlerCall,
        outcome: CallOutcome,
        *,
        result: str | None = None,
        error: str | None = None,
    ) -> None:
        call.outcome = outcome
        call.result = result
        call.error = error
        call.finished_at = time.monotonic()
