"""The lease table: who may call the handler for an open Run, and until when.

One lease per open Run. Every change is a compare-and-set on the lease's revision: never
read-then-write. The lease only decides who *tries*; what makes a lost holder harmless is
the Run's own journal (a new holder's claim is appended on the Run's last position, after
which every append of the old holder fails: :mod:`.runs`).

Expiry is judged by each reader on its own elapsed time: a lease is expired once this
process has seen its revision unchanged for a whole lease length. A live holder renews every
third of a lease, so a reader whose clock runs ahead, or a holder whose clock was stepped
back, never makes a live lease look expired. ``expires_at`` stays in the value for the holder
(it re-proves its lease by compare-and-set once its own clock passes it) and for people.

Implementations: ``jetstream/leases.py`` (a KV bucket, one key per open Run) and
``memory/leases.py`` (for tests and the simulation); ``tests/test_ports_contract.py`` holds
both to this contract.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

import msgspec

from ..core.events import RunRecord

FREE = ""
"""The holder of a lease given back unfinished: the Run stays open, and is anyone's to take."""

UNREADABLE = "?"
"""The holder :meth:`LeaseTable.current` reports for a key whose value is not a lease of
ours (a foreign message: jetstream/foreign.py): nobody holds it, so it is anyone's to take at
once, like a lease given back."""


class LeaseValue(msgspec.Struct, frozen=True, kw_only=True):
    """What a lease says (stored as JSON: ``nats kv get P_LEASES <run>`` shows it)."""

    run_id: str
    holder: str
    expires_at: datetime
    acquired_at: datetime


@dataclass(frozen=True)
class Lease:
    """A lease this process holds: the revision is the proof."""

    run_id: str
    key: str
    revision: int
    value: LeaseValue


@dataclass(frozen=True)
class Claimed:
    """A Run this process just stored, claimed by the lease it opened when announcing it.

    Handed to the dispatcher so the first attempt starts at once: no lease to take and no read
    of the Run just written (docs/architecture.md, "Firing at scale").
    """

    lease: Lease
    seq: int
    record: RunRecord


class LeaseTable(Protocol):
    """Acquire, renew and release the leases of one process (:attr:`identity`)."""

    identity: str
    lease_seconds: float

    async def announce(self, run_id: str) -> Lease | None:
        """Open the Run's lease before the Run is stored, held by this process.

        Returns the lease when THIS call opened it (the creator's lease: it dispatches the
        Run without taking it again), None when the Run already has one (another announcer
        holds it), also when this process opened it before (a resend). Every unfinished Run
        has a lease, so a process that starts finds them all (:meth:`open_runs`). A lease
        announced and never renewed expires for readers after a lease length and is gone
        after its time to live (``key_ttl``); the Run's lease is then anyone's to take.
        """
        ...

    async def announce_many(self, run_ids: Sequence[str]) -> list[Lease | Exception | None]:
        """:meth:`announce` for many Runs at once; a result per Run, in order."""
        ...

    async def acquire(self, run_id: str) -> tuple[Lease, str | None] | None:
        """Take the lease if it is free, given back, expired (:meth:`expired`), or already
        ours: ``(lease, previous holder when taken over)``. None when another live process
        holds it, another taker won the race, or the store is struggling (a sweep tries
        again later). Of several takers of one lease exactly one succeeds."""
        ...

    async def renew(self, lease: Lease) -> Lease | None:
        """Extend ``lease`` (its value's ``expires_at`` moves a lease length on); None when it
        was lost: someone else's compare-and-set moved its revision on."""
        ...

    async def release(self, lease: Lease, *, finished: bool) -> None:
        """Give ``lease`` up. A finished Run's lease is left to expire (nothing is written);
        an unfinished Run's lease is kept with its holder :data:`FREE`, without a time to
        live, while it is still ours: the Run stays open and any process may take it at
        once. Never raises for a lost lease or a failing store."""
        ...

    async def current(self, run_id: str) -> tuple[int, LeaseValue] | None:
        """The lease on ``run_id`` as ``(revision, value)``, or None if it has none. Reading
        it is also this process's observation of the revision (see :meth:`expired`)."""
        ...

    def expired(self, value: LeaseValue) -> bool:
        """Whether ``value`` (as :meth:`current` just read it) is no longer renewed: given
        back (:data:`FREE`), unreadable (:data:`UNREADABLE`), or its revision seen unchanged
        by this process for a lease length of its own elapsed time, read at least every half
        lease meanwhile (a gap in the reads, the store not answering, starts the count
        again: the holder could not renew during it either)."""
        ...

    async def forget(self, run_id: str) -> None:
        """Close the lease of a Run that was announced but never stored."""
        ...

    async def open_runs(self) -> dict[str, LeaseValue]:
        """run_id -> lease of every open Run (closed and expired leases left out)."""
        ...
