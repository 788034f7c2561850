"""AstraBox's side of dispatch, simulated: idempotent on the Run ID, and as unreliable as told.

Like AstraBox, a repeated ``start_session`` of one Run returns the same Session, a repeated
``admit_turn`` the same turn. Each call takes a drawn moment, and may be drawn to fail
transiently, fail for good (``RunPermanentError``), or hang (longer than any call timeout),
as a real AstraBox may. Every call is recorded the way the invariant checker reads a
handler's record (``HandlerCall``), stamped with the store's clock (one clock in the
simulation: the checker's tolerance for the handler's host clock is not needed).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from ..admin.invariant_inputs import HandlerCall
from ..seam import RunInvocation, RunPermanentError


@dataclass(frozen=True)
class Behaviour:
    """How likely each way a call may go, per call (the rest succeed)."""

    transient: float = 0.05
    permanent: float = 0.005
    hang: float = 0.002
    latency: tuple[float, float] = (0.005, 0.2)
    """Seconds a call takes, drawn uniformly between."""
    hang_seconds: float = 600.0


@dataclass(eq=False)
class SimHandler:
    """One AstraBox, shared by every replica (as its database is)."""

    rng: random.Random
    now: Callable[[], datetime]
    behaviour: Behaviour = field(default_factory=Behaviour)
    trace: Callable[[str], None] = lambda line: None
    calls: list[HandlerCall] = field(default_factory=list)
    sessions: dict[str, str] = field(default_factory=dict)
    turns: dict[str, str] = field(default_factory=dict)

    def for_process(self, process: str) -> ProcessHandler:
        """The handler a replica calls (its calls are recorded under its name)."""
        return ProcessHandler(self, process)

    async def call(self, process: str, method: str, invocation: RunInvocation) -> str:
        b, rng = self.behaviour, self.rng
        draw = rng.random()
        latency = rng.uniform(*b.latency)
        run_id = invocation.run_id
        self.trace(f"handler {process} {method} {run_id} attempt {invocation.attempt}")
        if draw < b.hang:
            self._record(method, invocation, process, "in_progress", None)
            await asyncio.sleep(b.hang_seconds)
        await asyncio.sleep(latency)
        if b.hang <= draw < b.hang + b.permanent:
            self._record(method, invocation, process, "permanent", None)
            raise RunPermanentError(f"AstraBox refused run {run_id} (simulated)")
        if b.hang + b.permanent <= draw < b.hang + b.permanent + b.transient:
            self._record(method, invocation, process, "transient", None)
            raise ConnectionError(f"AstraBox did not answer for run {run_id} (simulated)")
        if method == "start_session":
            returned = self.sessions.setdefault(run_id, f"sess-{run_id}")
        else:
            returned = self.turns.setdefault(run_id, f"turn-{run_id}")
        self._record(method, invocation, process, "ok", returned)
        return returned

    def _record(self, method: str, invocation: RunInvocation, process: str, outcome: str,
                returned: str | None) -> None:
        self.calls.append(HandlerCall(at=self.now(), method=method, run_id=invocation.run_id,
                                      session_id=invocation.session_id, process=process,
                                      outcome=outcome, returned=returned))


@dataclass(eq=False)
class ProcessHandler:
    """The :class:`~nats_scheduler.seam.RunHandler` of one replica."""

    shared: SimHandler
    process: str

    async def start_session(self, invocation: RunInvocation) -> str:
        return await self.shared.call(self.process, "start_session", invocation)

    async def admit_turn(self, invocation: RunInvocation) -> str:
        return await self.shared.call(self.process, "admit_turn", invocation)
