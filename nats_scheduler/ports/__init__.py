"""The store, as the scheduler needs it: ports named in its own words.

A replica's runtime (``runtime/``) and the reads behind ``list_runs`` and ``get_run``
(``projections/reads.py``) depend on these Protocols only, never on the store that fills
them. Each module's docstring is its port's contract: what it guarantees under concurrency
and what it raises.

- :mod:`.runs`: the Run journal (``RunJournal``): one Run per ID, one writer per Run.
- :mod:`.history`: the Run history (``RunHistory``): every Run listed once, in order, kept
  for a retention.
- :mod:`.leases`: the lease table (``LeaseTable``): who may dispatch an open Run.
- :mod:`.schedules`: the Schedule journal (``ScheduleJournal``): changes decided on the
  stored state.
- :mod:`.replicas`: the live replicas (``ReplicaRegistry``) and the store's clock.
- :mod:`.feeds`: how a projection follows its journal (``Feed``).
- :mod:`.checkpoints`: checkpoints of the Schedule table (``TableCheckpoints``), where the
  store keeps them.

:class:`StorePorts` is all of them for one process. Two implementations: JetStream
(``jetstream/ports.py``, production) and memory (``memory/``, a tool for tests and the
deterministic simulation, never a production backend); one contract suite,
``tests/test_ports_contract.py``, runs against both.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

from .checkpoints import TableCheckpoints
from .history import RunHistory
from .leases import LeaseTable
from .replicas import ReplicaRegistry
from .runs import RunJournal
from .schedules import ScheduleJournal

T = TypeVar("T")


class StorePorts(Protocol):
    """Every port one replica uses, over one connection to one store."""

    runs: RunJournal
    history: RunHistory
    leases: LeaseTable
    schedules: ScheduleJournal
    replicas: ReplicaRegistry
    checkpoints: TableCheckpoints | None
    """None when the store keeps no checkpoints (the start-up then reads every Schedule)."""

    @property
    def connected(self) -> bool:
        """Whether the store can be written now (a write would not wait for a reconnect)."""
        ...

    @property
    def retry_seconds(self) -> float:
        """How long one operation is retried through transient failures before it is
        ``SchedulerUnavailable`` (``store_retry_seconds``)."""
        ...

    @property
    def max_payload(self) -> int:
        """The largest event the store takes, in bytes (0: not known)."""
        ...

    async def retrying(self, what: str, op: Callable[[], Awaitable[T]],
                       retry_seconds: float | None = None) -> T:
        """``op`` under the store's retry policy: transient failures retried for
        ``retry_seconds`` (default :attr:`retry_seconds`), then ``SchedulerUnavailable``
        naming ``what`` in AstraBox's words."""
        ...

    async def close(self) -> None:
        """Close the connection (idempotent; never raises)."""
        ...
