"""What the admin service needs of the process that serves it: the port the provider fills.

The admin service (``admin/service.py``) answers from the memory of the process it runs in
and acts through that process's provider, so each action is an event recording who asked
and why. It names what it uses here, as Protocols, and never imports the provider: the
provider (``provider.py``) imports the service and satisfies :class:`AdminHost` as it is.
Everything listed is read-only or an action of the seam; nothing lets the service reach
into the loops beyond the figures ``replica.status`` and ``health`` report.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, Unpack

from ..clock import Clock
from ..core.events import RunRecord, ScheduleRecord
from ..core.refusals import Refusal
from ..core.schedulecore import OperatorNotes
from ..jetstream.store import Store
from ..ports.feeds import Feed
from ..projections.ledger import Ledger
from ..projections.schedule_table import ScheduleTable
from ..seam import EnqueueRequest, Run
from ..settings import NatsSettings


class Served(Protocol):
    """A service a running replica runs beside its loops (the admin service)."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class MetricsSource(Protocol):
    """The replica's figures since it started (``Metrics``)."""

    def snapshot(self) -> object:
        """Plain values, read by attribute into ``ReplicaMetrics``."""
        ...


class RefusalSource(Protocol):
    """The Schedules the process's reconciles refused (``runtime/refusals.py``)."""

    def listed(self) -> list[Refusal]:
        """Those kept by name, in the order they were refused."""
        ...

    @property
    def count(self) -> int:
        """All of them, those counted but not named included."""
        ...

    def get(self, deployment_id: str) -> Refusal | None: ...


class RunningReplica(Protocol):
    """The running parts of the hosting process, between its start and its stop."""

    @property
    def clock(self) -> Clock:
        """The store's clock, as this replica estimates it (a hold's end is judged by it)."""
        ...

    @property
    def metrics(self) -> MetricsSource: ...

    @property
    def refusals(self) -> RefusalSource: ...

    @property
    def followers(self) -> Sequence[Feed]:
        """The projections' followers, with what each skipped (``poisoned``)."""
        ...

    def server_offset(self) -> tuple[float, float] | None:
        """This host's clock minus the store's and its error bound (seconds), or None."""
        ...

    def live_replicas(self) -> int:
        """How many replicas this one counts live, itself included."""
        ...

    async def serve(self, service: Served) -> None:
        """Run ``service`` as the process's one admin service, replacing the one running."""
        ...


class InFlight(Protocol):
    """The dispatcher, as ``replica.status`` sees it."""

    @property
    def in_flight(self) -> list[str]:
        """The Runs whose handler call this process is making."""
        ...

    @property
    def tasks(self) -> int:
        """How many Runs it holds or waits to hold (a count, cheap to ask)."""
        ...


class Planned(Protocol):
    """The ticker, as ``replica.status`` sees it."""

    @property
    def planned(self) -> int:
        """How many Schedules have a planned next due time."""
        ...

    def firing_within(self, seconds: float) -> bool:
        """Whether due times are being fired now, or one comes within ``seconds``."""
        ...


class AdminHost(Protocol):
    """The provider of the process, as the admin service uses it (``NatsSchedulerProvider``)."""

    @property
    def identity(self) -> str: ...

    @property
    def settings(self) -> NatsSettings: ...

    @property
    def store(self) -> Store:
        """The connection, the names and the server's largest message (``max_payload``)."""
        ...

    @property
    def ledger(self) -> Ledger: ...

    @property
    def schedules(self) -> ScheduleTable: ...

    @property
    def ready(self) -> bool:
        """Whether the process has loaded every Schedule."""
        ...

    @property
    def runtime(self) -> RunningReplica | None: ...

    @property
    def dispatcher(self) -> InFlight | None: ...

    @property
    def ticker(self) -> Planned | None: ...

    async def until_ready(self) -> None:
        """Wait until the process has loaded every Schedule (every answer but
        ``replica.status`` waits for it)."""
        ...

    async def hold(self, deployment_id: str, **notes: Unpack[OperatorNotes]) -> ScheduleRecord:
        """Hold, recording who asked (``caller``: the user the server authenticated)."""
        ...

    async def release(self, deployment_id: str,
                      **notes: Unpack[OperatorNotes]) -> ScheduleRecord: ...

    async def runs_page(self, deployment_id: str, *, limit: int = 50,
                        before: str | None = None) -> list[RunRecord]:
        """A page of ``list_runs`` with each Run's whole record."""
        ...

    async def get_run(self, run_id: str) -> Run: ...

    async def enqueue(self, request: EnqueueRequest, *, reason: str | None = None) -> Run: ...
