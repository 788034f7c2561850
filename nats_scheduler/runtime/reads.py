"""The read path of Runs, re-exported for ``runtime/wiring.py``: it lives in
``projections/reads.py``, below both the runtime and the admin store reader that share it.
"""

from __future__ import annotations

from ..projections.reads import RunReads, load_ledger, load_newest, load_recent

__all__ = ["RunReads", "load_ledger", "load_newest", "load_recent"]
