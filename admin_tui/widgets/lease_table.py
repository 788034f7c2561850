"""Run leases: which process holds which Run, and until when."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from rich.text import Text

from nats_scheduler.admin.api import LeaseView

from ..formatting import relative, short_id
from .keyed_table import KeyedTable

COLUMNS = (
    ("run", "Run", 14),
    ("holder", "Holder", 30),
    ("expires", "Expires", 16),
)


class LeaseTable(KeyedTable):
    def __init__(self, **kwargs: object) -> None:
        super().__init__(COLUMNS, **kwargs)

    def show(self, leases: Sequence[LeaseView], now: datetime) -> None:
        self.set_rows([(lease.run_id, [
            Text(short_id(lease.run_id, 14), style="cyan"),
            Text(lease.holder),
            Text(relative(lease.expires_at, now),
                 style="bold red" if lease.expires_at < now else ""),
        ]) for lease in leases])
