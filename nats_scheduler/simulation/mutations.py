"""Known bugs, switched on inside the simulation only: each must be caught (violations > 0).

A simulation that finds nothing proves little until it is shown to find what it claims to:
each mutation below puts back a mistake the provider's design rules out, and the simulation
must report it within its default number of seeds (``tests/test_simulation.py``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class Mutation:
    description: str
    apply: Callable[[], Callable[[], None]]
    """Switch the bug on; returns what switches it off."""


def _patch(owner: object, name: str, replacement: object) -> Callable[[], None]:
    original = getattr(owner, name)
    setattr(owner, name, replacement)
    return lambda: setattr(owner, name, original)


MUTATIONS: dict[str, Mutation] = {}


@contextlib.contextmanager
def switched_on(name: str | None) -> Iterator[None]:
    if name is None:
        yield
        return
    undo = MUTATIONS[name].apply()
    try:
        yield
    finally:
        undo()


def _create_without_expected_sequence() -> Callable[[], None]:
    """The create appended whatever the Run's journal holds: no uniqueness in the store."""
    from ..memory.runs import MemoryRunJournal
    from ..ports.runs import Stored

    async def create(self, event, *, msg_id, retry_seconds=None):  # type: ignore[no-untyped-def]
        async def once() -> Stored:
            await self._store.operation()
            return Stored(self._stored(event.run, event, msg_id), event.run, True)
        return await self._retrying("could not store a run", once, retry_seconds)

    return _patch(MemoryRunJournal, "create", create)


def _lease_without_cas() -> Callable[[], None]:
    """A lease taken by writing it, whoever holds it and however lately they renewed it: no
    compare-and-set on its revision, so no proof that it went unrenewed."""
    from ..memory.leases import MemoryLeases
    from ..ports.leases import Lease

    async def acquire(self, run_id):  # type: ignore[no-untyped-def]
        await self._store.operation()
        slot = self._slot(run_id)
        value = self._value(run_id)
        revision = self._write(run_id, value)
        previous = (slot.value.holder if slot is not None and slot.value.holder
                    not in ("", self.identity) else None)
        return Lease(run_id, run_id, revision, value), previous

    undo_acquire = _patch(MemoryLeases, "acquire", acquire)
    undo_expired = _patch(MemoryLeases, "expired", lambda self, value: True)
    return lambda: (undo_acquire(), undo_expired())  # type: ignore[func-returns-value]


def _fire_by_host_clock() -> Callable[[], None]:
    """Due times fired by the host's clock, not the store's: a fast host fires early."""
    from ..clock import ServerClock

    return _patch(ServerClock, "wrap", classmethod(lambda cls, clock: clock))


def _admit_before_session_stored() -> Callable[[], None]:
    """``admit_turn`` called before the Session ID ``start_session`` returned is stored."""
    import msgspec

    from ..core import runcore
    from ..ports.runs import Conflict
    from ..runtime.dispatcher import Dispatcher, _LostRun
    from ..seam import RunPermanentError, SchedulerError

    async def attempt(self, flight):  # type: ignore[no-untyped-def]
        try:
            session_id = await self._call(self._handler.start_session,
                                          runcore.invocation(flight.record), flight)
            early = msgspec.structs.replace(flight.record, session_id=session_id)
            turn_id = await self._call(self._handler.admit_turn, runcore.invocation(early),
                                       flight)
            if flight.record.session_id is None:
                await self._append(flight, runcore.session_started(
                    flight.record, session_id=session_id, now=self._clock.now(),
                    actor=self.identity))
            await self._append(flight, runcore.dispatched(
                flight.record, turn_id=turn_id, now=self._clock.now(), actor=self.identity))
        except RunPermanentError as exc:
            await self._append(flight, runcore.failed(
                flight.record, error=runcore.describe_failure(exc), now=self._clock.now(),
                actor=self.identity))
        except (_LostRun, Conflict, SchedulerError):
            raise
        except Exception as exc:
            await self._after_transient(flight, exc)

    return _patch(Dispatcher, "_attempt", attempt)


def _foreign_taken_for_a_run() -> Callable[[], None]:
    """A Run's journal takes its subject's very last message for the Run, foreign or not:
    a foreign message on a Run's subject refuses its holder's next append, and one on a
    Run about to be created breaks its create (the JetStream journal before it read past
    them)."""
    from ..memory import runs
    from ..memory.store import StoredEvent

    def last_message(events: list[StoredEvent] | None) -> StoredEvent | None:
        return events[-1] if events else None

    return _patch(runs, "last_ours", last_message)


MUTATIONS.update({
    "foreign-taken-for-a-run": Mutation(
        "a Run's journal takes a foreign message on its subject for the Run's last event",
        _foreign_taken_for_a_run),
    "create-without-expected-sequence": Mutation(
        "a Run's create is stored even when the Run exists (no uniqueness constraint)",
        _create_without_expected_sequence),
    "lease-without-cas": Mutation(
        "a lease is taken by writing it, whoever holds it (no compare-and-set)",
        _lease_without_cas),
    "fire-by-host-clock": Mutation(
        "due times are fired by the host's clock instead of the store's",
        _fire_by_host_clock),
    "admit-before-session-stored": Mutation(
        "admit_turn is called before the Session ID is stored",
        _admit_before_session_stored),
})
