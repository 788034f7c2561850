"""What the Run log's writes answer, named: an announcement, a stored Run.

Plain tuples once (``(int | None, Lease | None)``, ``(int, RunRecord, bool)``), read by
position in the firing, the provider and the dispatcher; named here so that a reader of
``runtime/firing.py`` sees what each part is. Both are tuples still, so unpacking works.
"""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

from ..core.events import RunRecord
from .leases import Lease


class Announcement(NamedTuple):
    """A Run's history entry and open key, written before its ``run.created``."""

    index_seq: int | None
    """The history entry's sequence (the same for every announcer); None without history."""
    lease: Lease | None
    """The creator's lease when THIS announcement opened the key, else None."""
    created_at: datetime | None = None
    """The entry's ``created_at``: the Run's own, which its create must carry (the key
    the history lists it by, jetstream/history_writes.py); None without history."""


class Stored(NamedTuple):
    """A Run as a create found it in the store."""

    seq: int
    """The sequence of its stored state."""
    run: RunRecord
    created: bool
    """Whether THIS call stored it (else another writer did, and ``run`` is theirs)."""
