"""The Run journal: every Run's events, its first one unique, later ones by one writer.

A Run is its events (``core/events.py``); each carries the Run's whole state after it, so
its last event is the Run. The journal promises, whatever the number of writers and however
they interleave:

- **One Run per ID.** Of all the creates of one Run (every replica firing one due time,
  retries of one Run now) exactly one is stored, however long after the first; the others
  get the stored Run back (``Stored.created`` False).
- **One writer per Run.** A later event is appended only on the position its writer last
  saw (:meth:`RunJournal.append`): a writer behind the Run gets :class:`Conflict`, so two
  processes can never both advance one Run.
- **Read your writes.** What this process stores is applied at once to its projection (the
  ledger, :class:`RunProjection`); what others store reaches it through the feed, a moment
  later, and is applied in position order (an older state never replaces a newer one).

Before its create, a Run is *announced* (:meth:`RunJournal.announce`): its history entry
(its place and key in the history, ``ports/history.py``) and its lease (``ports/leases.py``)
are written first, so a Run that exists always has both.

Implementations: ``jetstream/runlog.py`` (a stream, one subject per Run) and
``memory/runs.py``; ``tests/test_ports_contract.py`` holds both to this contract.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import NamedTuple, Protocol

from ..core.events import RunCreated, RunEventType, RunRecord
from .feeds import Feed
from .leases import Lease


class Conflict(Exception):
    """Another writer stored an event of the same Run (or Schedule) first."""

    def __init__(self, subject: str) -> None:
        super().__init__(subject)
        self.subject = subject


class Announcement(NamedTuple):
    """A Run's history entry and open lease, written before its ``run.created``."""

    index_seq: int | None
    """The history entry's position (the same for every announcer); None without history."""
    lease: Lease | None
    """The creator's lease when THIS announcement opened it, else None."""
    created_at: datetime | None = None
    """The entry's ``created_at``: the Run's own, which its create must carry (the key the
    history lists it by, ``ports/history.py``); None without history."""


class Stored(NamedTuple):
    """A Run as a create found it in the journal."""

    seq: int
    """The position of its stored state."""
    run: RunRecord
    created: bool
    """Whether THIS call stored it (else another writer did, and ``run`` is theirs)."""


class RunProjection(Protocol):
    """Where every Run state the journal stores or reads is applied at once (read your
    writes): the runtime's ``Ledger``."""

    def apply(self, seq: int, record: RunRecord) -> bool:
        """Take ``record`` as stored at ``seq`` (an older one is ignored)."""
        ...

    def apply_event(self, seq: int, event: RunEventType, subject_ids: tuple[str, str]) -> bool:
        """Take a followed event stored at ``seq`` on the Run ``subject_ids`` (deployment,
        run)."""
        ...


class RunJournal(Protocol):
    """Append and read the events of Runs (the module docstring is the contract)."""

    async def announce(self, run: RunRecord) -> Announcement:
        """Write the Run's history entry and open its lease, before its create. Idempotent:
        every replica firing one due time may announce it; they all get the one entry (and
        its key), and the lease only if they opened it."""
        ...

    async def announce_many(self, runs: Sequence[RunRecord]) -> list[Announcement | Exception]:
        """:meth:`announce` for many Runs; a result per Run, in order."""
        ...

    async def create(self, event: RunCreated, *, msg_id: str,
                     retry_seconds: float | None = None) -> Stored:
        """Store a new Run, or find the one that already holds its ID (see the module
        docstring). ``msg_id`` identifies this create among its repeats; ``retry_seconds``
        bounds the store's own retries (0: sent once, for a create decided on a read that
        ages). ``SchedulerUnavailable`` when the store fails."""
        ...

    async def create_many(
        self, events: Sequence[RunCreated], msg_ids: Sequence[str], *,
        still_fresh: Callable[[], bool] = lambda: True,
    ) -> list[Stored | Exception]:
        """:meth:`create` for many Runs, each decided once; a result per Run, in order. When
        the creates cannot all be stored as one, each is sent again on its own only if
        ``still_fresh()``; otherwise every item gets the failure, to be fired again."""
        ...

    async def append(self, expected_seq: int, event: RunEventType) -> int:
        """Append a later event of a Run on the position its writer last saw; the new
        position. :class:`Conflict` when someone else wrote to the Run since."""
        ...

    async def fetch(self, deployment_id: str, run_id: str) -> tuple[int, RunRecord] | None:
        """The Run's stored state and position, from the authority (not a copy a moment
        behind), also applied to the projection; None when it does not exist."""
        ...

    async def find(self, run_id: str) -> tuple[int, RunRecord] | None:
        """:meth:`fetch` by Run ID alone, whatever its deployment."""
        ...

    async def first_stored_at(self, deployment_id: str, run_id: str) -> datetime | None:
        """When the store (its clock) stored the Run's first event; None when unknown."""
        ...

    async def end(self) -> int:
        """The position of the journal's last event (0: none), from the authority."""
        ...

    def feed(self, *, from_seq: int, on_skip: Callable[[], None] | None = None) -> Feed:
        """The events stored from position ``from_seq`` on, applied to the projection as
        they come (each once: this process's own, applied when written, are skipped), in
        position order per Run; an event the projection refuses is skipped and counted
        (``on_skip``), never stops the feed. Not started: :meth:`Feed.subscribe`."""
        ...
