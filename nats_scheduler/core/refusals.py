"""A Schedule a ``reconcile`` refused: which deployment, of what kind, why, and its calendar.

``reconcile`` applies every Schedule it can and refuses the others one by one
(docs/contract.md, "When reconcile refuses Schedules"): one bad record must not stop every
Schedule at a restart. Each refusal is named in an ERROR log, counted in a metric, listed by
``replica.status`` (``nats-scheduler status``, the console) and given to ``explain``, which
marks the due times it took away ``refused``. This module is the refusal's value and how it
is built from the Schedule; no I/O.

A refusal keeps none of the Schedule's payload (a refused prompt may be 600 KB) and only a
calendar short enough to be one, so thousands of them cost little.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from enum import StrEnum

import msgspec

from ..seam import Schedule

MAX_CALENDAR_CHARS = 200
"""A refused cron or time zone longer than this is kept as None: no valid one is as long."""

SHOWN_ID_CHARS = 80
"""An ID that cannot name a deployment is shown cut to this many characters."""


class RefusalKind(StrEnum):
    """Why a Schedule was refused: the metric's ``kind`` and the status's grouping."""

    INVALID = "invalid"
    """Its deployment ID, a text, its cron expression or its time zone cannot be stored."""
    TOO_LARGE = "too_large"
    """Its event would not fit the server's largest message (target and prompt too long)."""
    CAPACITY = "capacity"
    """Enabling it would pass ``max_active_schedules``."""
    DUPLICATE = "duplicate"
    """The list gives its deployment more than once."""


class Refusal(msgspec.Struct, frozen=True, kw_only=True):
    """One refused Schedule, as ``replica.status`` lists it and ``explain`` uses it."""

    deployment_id: str
    """The deployment as given; an ID that cannot name one is shown cut and escaped."""
    kind: str
    """A :class:`RefusalKind` value (text on the wire: a kind added later still decodes)."""
    reason: str
    """What ``apply`` would have raised, in AstraBox's words."""
    at: datetime | None = None
    """When the reconcile refused it (the store's clock)."""
    by: str | None = None
    """The replica that refused it."""
    cron: str | None = None
    """The refused definition's calendar (None when too long to be one)."""
    timezone: str | None = None
    enabled: bool = False


def shown_id(value: object) -> str:
    """``value`` as a log or an answer can carry it: cut, and lone surrogates escaped."""
    text = value if isinstance(value, str) else str(value)
    cut = text[:SHOWN_ID_CHARS] + ("..." if len(text) > SHOWN_ID_CHARS else "")
    return cut.encode("utf-8", "backslashreplace").decode("utf-8")


def _calendar_text(value: object) -> str | None:
    if not isinstance(value, str) or len(value) > MAX_CALENDAR_CHARS:
        return None
    return shown_id(value)


def refusal(schedule: Schedule, kind: RefusalKind, reason: str, *,
            at: datetime | None = None) -> Refusal:
    """The refusal of ``schedule`` (its payload left out)."""
    return Refusal(deployment_id=shown_id(schedule.deployment_id), kind=kind.value,
                   reason=reason,
                   at=at, cron=_calendar_text(schedule.cron),
                   timezone=_calendar_text(schedule.timezone),
                   enabled=schedule.enabled is True)


def repeated(schedules: Sequence[Schedule]) -> dict[str, int]:
    """The deployments given more than once, with how many times, in the order of their
    first appearance (a reconcile walks the whole list only when its IDs are not distinct)."""
    counts = Counter(s.deployment_id for s in schedules)
    return {dep: n for dep, n in counts.items() if n > 1}


def duplicates(schedules: Sequence[Schedule], twice: Mapping[str, int], *,
               at: datetime | None = None) -> list[Refusal]:
    """One refusal per deployment of ``twice`` (from :func:`repeated`), with the calendar
    of its first definition in the list."""
    found: dict[str, Refusal] = {}
    for schedule in schedules:
        dep = schedule.deployment_id
        if dep in twice and dep not in found:
            found[dep] = refusal(schedule, RefusalKind.DUPLICATE,
                                 duplicate_reason(dep, twice[dep]), at=at)
    return list(found.values())


def duplicate_reason(deployment_id: str, times: int) -> str:
    return (f"the schedule of deployment {shown_id(deployment_id)!r} was given {times} times "
            "in one reconcile: none of them is applied, the stored one stays as it was")


def refusal_note(refusal: Refusal, *, stored: bool) -> str:
    """The refusal in one sentence, for the notes of an account of due times."""
    who = f"replica {refusal.by}" if refusal.by else "a replica"
    when = "" if refusal.at is None else refusal.at.strftime(" at %Y-%m-%dT%H:%M:%SZ")
    stays = ("its stored schedule stays in force" if stored
             else "the scheduler has no schedule for it")
    return (f"{who} refused AstraBox's schedule for this deployment{when} "
            f"({refusal.kind}): {refusal.reason}; {stays}")


def by_kind(refusals: Iterable[Refusal]) -> dict[str, int]:
    """How many refusals of each kind (the metric's and the status's breakdown)."""
    return dict(Counter(r.kind for r in refusals))
