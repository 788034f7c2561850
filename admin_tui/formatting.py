"""How the console writes times, states and events: pure functions, no I/O, no wall clock.

Every function takes ``now`` from the caller (the app's injected clock), so a screen
rendered twice at the same instant is the same screen — which is what the snapshot tests
rely on. The 1 s repaint timer only calls these again with a newer ``now``.
"""

from __future__ import annotations

from datetime import UTC, datetime

from rich.text import Text

from nats_scheduler.admin.callers import who_text
from nats_scheduler.core import events as ev
from nats_scheduler.core.calendar import load_zone
from nats_scheduler.seam import InvalidSchedule, RunState

DASH = "—"

STATE_STYLES = {
    "enabled": "green",
    "disabled": "dim",
    "held": "bold yellow",
    "deleted": "dim strike",
    RunState.PENDING.value: "cyan",
    RunState.DISPATCHING.value: "bold cyan",
    RunState.DISPATCHED.value: "green",
    RunState.FAILED.value: "bold red",
}


def styled(value: str | None, style: str | None = None) -> Text:
    """A cell: ``value`` in its state style (or ``style``), a dash when empty."""
    if not value:
        return Text(DASH, style="dim")
    return Text(value, style=style or STATE_STYLES.get(value, ""))


def span(seconds: float) -> str:
    """A short duration: ``42 s``, ``5 min``, ``2 h 5 min``, ``3 d 4 h``."""
    s = int(abs(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    if s < 86_400:
        hours, minutes = divmod(s // 60, 60)
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(s // 3600, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


def lateness(seconds: float | None) -> str:
    """A firing's lateness: ``4 ms`` below a second, ``1.2 s`` below 100 s, ``5 min`` above."""
    if seconds is None:
        return DASH
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    return f"{seconds:.1f} s" if seconds < 100 else span(seconds)


def relative(instant: datetime | None, now: datetime) -> str:
    """``in 42 s`` for the future, ``3 min ago`` for the past, a dash for None."""
    if instant is None:
        return DASH
    delta = (instant - now).total_seconds()
    if -1 < delta < 1:
        return "now"
    return f"in {span(delta)}" if delta > 0 else f"{span(delta)} ago"


def utc(instant: datetime | None, *, seconds: bool = False) -> str:
    """``2026-03-29 01:00Z`` (aware UTC), a dash for None."""
    if instant is None:
        return DASH
    fmt = "%Y-%m-%d %H:%M:%SZ" if seconds else "%Y-%m-%d %H:%MZ"
    return instant.astimezone(UTC).strftime(fmt)


def clock_utc(instant: datetime | None) -> str:
    """``12:03:07`` UTC, for the event tail."""
    return DASH if instant is None else instant.astimezone(UTC).strftime("%H:%M:%S")


def in_zone(instant: datetime | None, timezone: str) -> str:
    """``2026-03-29 03:00 CEST``: the instant on the Schedule's wall clock.

    Zones come from the pinned tzdata (``calendar.load_zone``), the same database the
    provider computes due times with, so the console never disagrees with the ticker.
    """
    if instant is None:
        return DASH
    try:
        zone = load_zone(timezone)
    except InvalidSchedule:
        return utc(instant)
    local = instant.astimezone(zone)
    return f"{local:%Y-%m-%d %H:%M} {local.tzname()}"


def hold_end(hold: ev.Hold | None, now: datetime) -> str:
    """`` until 2026-03-28 18:00Z (in 6 h)`` for a hold that ends by itself, else ``""``."""
    if hold is None or hold.until is None:
        return ""
    return f" until {utc(hold.until)} ({relative(hold.until, now)})"


def short_id(value: str | None, width: int = 12) -> str:
    """Run IDs are 26 characters; tables show their head (kind letter + digest start)."""
    if not value:
        return DASH
    return value if len(value) <= width else value[: width - 1] + "…"


def compact(instant: datetime | None, now: datetime) -> str:
    """``in 42s``, ``in 5m``, ``in 13h``, ``3d ago``: relative time for narrow table cells."""
    if instant is None:
        return DASH
    delta = (instant - now).total_seconds()
    s = int(abs(delta))
    if s < 1:
        return "now"
    text = (f"{s}s" if s < 60 else f"{s // 60}m" if s < 3600
            else f"{s // 3600}h" if s < 86_400 else f"{s // 86_400}d")
    return f"in {text}" if delta > 0 else f"{text} ago"


def zone_short(instant: datetime | None, timezone: str) -> str:
    """``03-29 03:00 CEST``: month-day and wall time in the Schedule's zone."""
    if instant is None:
        return DASH
    try:
        local = instant.astimezone(load_zone(timezone))
    except InvalidSchedule:
        return utc(instant)
    return f"{local:%m-%d %H:%M} {local.tzname()}"


def event_tag(event: object) -> str:
    """The stable wire tag of an event, e.g. ``run.created``."""
    tag = getattr(type(event), "__struct_config__", None)
    return str(getattr(tag, "tag", None) or type(event).__name__)


def event_deployment(event: object) -> str | None:
    """The deployment an event belongs to (Run and Schedule events both carry one)."""
    if isinstance(event, ev.RunEvent):
        return event.run.deployment_id
    if isinstance(event, ev.ScheduleEvent):
        return event.schedule.deployment_id
    return None


def event_run_id(event: object) -> str | None:
    return event.run.run_id if isinstance(event, ev.RunEvent) else None


def event_summary(event: object) -> str:
    """One line saying what happened, in operators' words."""
    if isinstance(event, ev.RunEvent):
        run = event.run
        parts = [f"{run.state.value}", f"{run.trigger.value}", f"attempt {run.attempts}"]
        if isinstance(event, ev.RunSessionStarted):
            parts.append(f"session {event.session_id}")
        if isinstance(event, ev.RunDispatched):
            parts.append(f"turn {event.turn_id}")
        if isinstance(event, (ev.RunAttemptFailed, ev.RunFailed)):
            parts.append(event.error)
        if isinstance(event, ev.RunReleased):
            parts.append(event.reason)
        if run.replay_of:
            parts.append(f"replay of {short_id(run.replay_of, 20)}")
        if run.requested_by and isinstance(event, ev.RunCreated):
            parts.append(f"by {run.requested_by}")
        return " · ".join(parts)
    if isinstance(event, (ev.ScheduleHeld, ev.ScheduleReleased)):
        ends = f" until {utc(event.until)}" if event.until is not None else ""
        return f"by {who_text(event.by, event.caller, event.on_behalf_of)}{ends}: {event.reason}"
    if isinstance(event, ev.ScheduleEvent):
        s = event.schedule
        return f"{s.name} · {s.cron} · {s.timezone} · {'enabled' if s.enabled else 'disabled'}"
    return ""
