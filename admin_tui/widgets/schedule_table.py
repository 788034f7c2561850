"""The Schedules table: one row per Schedule, health problems highlighted."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from rich.text import Text

from nats_scheduler.admin.api import Health, ScheduleView

from ..formatting import DASH, compact, styled, zone_short
from ..schedule_model import ScheduleModel, age_out
from .virtual_table import VirtualTable

COLUMNS = (
    ("name", "Name", 16),
    ("cron", "Cron", 14),
    ("zone", "Zone", 16),
    ("state", "State", 8),
    ("next", "Next due (zone)", 16),
    ("utc", "UTC", 5),
    ("in", "In", 7),
    ("last", "Last run", 14),
    ("fail", "F24h", 4),
)


@dataclass(frozen=True)
class HealthFlags:
    """The admin service's health signals, indexed by deployment."""

    silent: frozenset[str] = frozenset()
    stuck: frozenset[str] = frozenset()
    failed: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, health: Health | None) -> HealthFlags:
        if health is None:
            return cls()
        failed: dict[str, int] = {}
        for run in health.failed_runs:
            failed[run.deployment_id] = failed.get(run.deployment_id, 0) + 1
        return cls(
            silent=frozenset(health.silent_stops),
            stuck=frozenset(r.deployment_id for r in health.stuck_runs),
            failed=failed,
        )

    def problems(self, deployment_id: str) -> list[str]:
        found = []
        if deployment_id in self.silent:
            found.append("silent stop: a due time passed without a Run")
        if deployment_id in self.stuck:
            found.append("stuck Run: pending or dispatching past its lease")
        if self.failed.get(deployment_id):
            found.append(f"{self.failed[deployment_id]} failed Run(s) in 24 h")
        return found


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def state_cell(s: ScheduleView) -> Text:
    """The state; ``held ◷`` for a hold that ends by itself (the panel below says when)."""
    cell = styled(s.state)
    if s.hold is not None and s.hold.until is not None:
        cell.append(" ◷", style="yellow")
    return cell


def schedule_cells(s: ScheduleView, flags: HealthFlags, now: datetime) -> list[Text]:
    """The cells of one row; pure, so the 1 s repaint only changes what changed."""
    warn = s.deployment_id in flags.silent or s.deployment_id in flags.stuck
    name = Text(("⚠ " if warn else "") + _clip(s.name, 14 if warn else 16),
                style="bold red" if warn else "bold")
    upcoming = age_out(s, now)
    due = upcoming[0] if upcoming and s.state == "enabled" else None
    last = styled(s.last_run_state.value if s.last_run_state else None)
    if s.last_run_at is not None:
        last.append(" " + compact(s.last_run_at, now).replace(" ago", ""), style="dim")
    fails = max(s.failures_24h, flags.failed.get(s.deployment_id, 0))
    return [
        name,
        Text(_clip(s.cron, 14)),
        Text(_clip(s.timezone, 16)),
        state_cell(s),
        Text(zone_short(due, s.timezone)) if due else Text(DASH, style="dim"),
        Text(due.strftime("%H:%M")) if due else Text(DASH, style="dim"),
        Text(compact(due, now)) if due else Text(DASH, style="dim"),
        last,
        Text(str(fails), style="bold red") if fails else Text("0", style="dim"),
    ]


class ScheduleTable(VirtualTable):
    """Rows keyed by deployment ID, drawn from the model: only visible rows build cells."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(COLUMNS, self._cells, **kwargs)
        self._model: ScheduleModel | None = None
        self._flags = HealthFlags()
        self._now: datetime | None = None

    def show(self, model: ScheduleModel, rows: list[str], flags: HealthFlags,
             now: datetime, *, changed: set[str] | None = None) -> None:
        """Show ``rows`` (IDs in ``model``) as of ``now``; cells are built when drawn.
        ``changed``: only these rows changed (None: any may have)."""
        same_flags = flags == self._flags
        self._model, self._flags, self._now = model, flags, now
        self.set_rows(rows, changed=changed if same_flags else None)

    def _cells(self, key: str) -> list[Text]:
        view = self._model.get(key) if self._model is not None else None
        if view is None or self._now is None:
            return [Text("")] * len(COLUMNS)
        return schedule_cells(view, self._flags, self._now)
