"""The scheduler's ports (:mod:`nats_scheduler.ports`) over one JetStream connection.

:func:`open_ports` connects, checks the server, prepares the streams and the lease bucket,
and hands back :class:`JetStreamPorts`: the Run journal (``runlog.py``), the history
(``history.py`` with ``history_reads.py``), the lease table (``leases.py``), the Schedule
journal (``schedulelog.py``) and the live replicas (``presence.py``), all over one
:class:`~.store.Store`. How they publish (atomic batches, grouped writes, the thresholds
the fsync setting decides), retry and fail over stays behind them, in the store.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from ..clock import Clock
from ..ports.runs import RunProjection
from ..ports.schedules import ScheduleCopies
from ..settings import NatsSettings
from .checkpoints import Checkpoints
from .connection import connect
from .foreign import ForeignLog
from .history_reads import PagedHistory
from .leases import Leases
from .permissions import ViolationLog
from .presence import JetStreamReplicas
from .runlog import RunLog
from .schedulelog import ScheduleLog
from .store import Store

T = TypeVar("T")


class JetStreamPorts:
    """Every port of one replica, over ``store`` (see the module docstring).

    ``ledger`` and ``table`` are the process's projections, which the journals keep current
    with their own writes (read your writes); ``on_stale`` hears of a Schedule change first
    decided on a stale copy.
    """

    def __init__(self, store: Store, *, ledger: RunProjection, table: ScheduleCopies,
                 clock: Clock, identity: str,
                 on_stale: Callable[[], None] | None = None) -> None:
        settings = store.settings
        self.store = store
        self.history = PagedHistory(store)
        self.leases = Leases(store, clock, identity, settings.lease_seconds)
        self.schedules = ScheduleLog(store, table, on_stale=on_stale)
        self.runs = RunLog(store, ledger, history=self.history, leases=self.leases)
        self.replicas = JetStreamReplicas(store.js, store.names, replicas=settings.replicas,
                                          foreign=store.foreign)
        self.checkpoints = Checkpoints(store) if store.checkpoints else None

    @property
    def connected(self) -> bool:
        return self.store.connected

    @property
    def retry_seconds(self) -> float:
        return self.store.retry_seconds

    @property
    def max_payload(self) -> int:
        return self.store.max_payload

    async def retrying(self, what: str, op: Callable[[], Awaitable[T]],
                       retry_seconds: float | None = None) -> T:
        return await self.store.retrying(what, op, retry_seconds)

    async def close(self) -> None:
        await self.store.close()


async def open_store(settings: NatsSettings, identity: str, *,
                     count_error: Callable[[str], None] | None = None,
                     count_foreign: Callable[[str, str], None] | None = None,
                     before_ensure: Callable[[Store], Awaitable[None]] | None = None) -> Store:
    """Connect as ``identity``, check the server and prepare the streams and the lease
    bucket (``SchedulerUnavailable``, ``SchedulerConfigurationError``). ``before_ensure``
    reads the store as it was before this process changed anything (the outage record's
    last writes). ``count_foreign`` hears of each foreign message a reader skips: the kind
    of its stream, and which (jetstream/foreign.py)."""
    violations = ViolationLog()  # the admin service, if it serves here, checks with it
    store = Store(await connect(settings, identity, error_cb=violations.on_error), settings,
                  count_error=count_error, violations=violations,
                  foreign=ForeignLog(count_foreign))
    try:
        await store.check_server()
        if before_ensure is not None:
            await before_ensure(store)
        await store.ensure()
    except BaseException:
        await store.close()
        raise
    return store
