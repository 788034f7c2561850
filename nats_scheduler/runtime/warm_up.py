"""The warm-up: the Runs stored before this start, loaded into the views once the replica is
ready (each deployment's newest Run, the last day's Runs).

A failed attempt is tried again (:data:`WARM_UP_RETRY_SECONDS`): the usual cause is this
replica's own event loop, too busy during a large load to read the store's answers in time
(a million Schedules applied at once), and nothing else loads the Runs stored before this
start: the views would lack them until each deployment's next Run, and an unfinished one
whose key expired while no replica ran would stay out of the recovery sweep's set
(docs/architecture.md, section 5). Loading again is harmless: each Run is taken by its
sequence.
"""

from __future__ import annotations

import itertools
import logging

from ..clock import Clock, sleep_for
from ..ports.history import RunHistory
from ..projections.ledger import Ledger
from ..projections.reads import load_newest, load_recent
from ..projections.schedule_table import ScheduleTable
from .memory import release_freed_memory

log = logging.getLogger(__name__)

WARM_UP_RETRY_SECONDS = (15.0, 60.0, 300.0)
"""Seconds before a failed warm-up is tried again: the first wait, the second, then every
later one (a store out for long is tried every five minutes)."""


async def warm_up(ledger: Ledger, history: RunHistory, table: ScheduleTable,
                  clock: Clock) -> None:
    """Load each deployment's newest Run and the last day's Runs into the ledger's summaries
    (last Run, failures, last scheduled); returns once they are, trying again after a
    failure (see the module docstring)."""
    for attempt in itertools.count():
        try:
            await load_newest(ledger, history,
                              [record.deployment_id for record in table.all()])
            await load_recent(ledger, history, clock.now())
            return
        except Exception:
            wait = WARM_UP_RETRY_SECONDS[min(attempt, len(WARM_UP_RETRY_SECONDS) - 1)]
            log.warning("could not load the last day's runs; trying again in %.0f s "
                        "(views fill in as runs change meanwhile)", wait, exc_info=True)
        finally:
            release_freed_memory()  # the load's and the warm-up's transient objects
        await sleep_for(clock, wait)
