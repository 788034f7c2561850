"""The pause-visibility promise in numbers and words, for the code that keeps it and the
code that checks it.

The seam promises that after ``apply(enabled=False)`` returns, no scheduled Run starts later
than ``pause_visibility_seconds`` (docs/architecture.md, "Firing and pause visibility").
The runtime keeps it (``runtime/firing.py``, ``runtime/gate.py``); the invariant
checker (``admin/invariants.py``) judges a history by the same bound and recognises the
gate's refusals by the same error text. Both read them here, in the pure core, so neither
operator surface imports the running loops.
"""

from __future__ import annotations

PAUSE_VISIBILITY_SECONDS = 0.5
"""No scheduled Run stored later than this after ``apply(enabled=False)`` returned is started.

The figures are in bench/pause_visibility.py, the tests in tests/test_pause_visibility.py."""

NOT_STARTED_AFTER_PAUSE = (
    "not started: its schedule was paused, held or deleted before this run was stored"
)
"""The error of a scheduled Run refused by the gate (``PauseGate.may_start``)."""

FIRE_READ_MAX_AGE = 0.2
"""Seconds a Schedule read may age before the Run create it allows is sent (else: read again).

Part of the pause-visibility bound: a create decided on a read older than this never leaves;
a Run stored within it of its creation needs no second look at the gate."""
