"""The checks of one Run on its own events and the handler's calls: ``projection``,
``early``, ``sessions``, ``admit_order``, ``unfinished`` and ``stolen`` (the list and their
meaning: ``admin/invariants.py``). Pure; each returns the violations it finds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

from ..core.events import RunClaimed, RunCreated, RunRecord, RunSessionStarted
from ..jetstream.leases import LeaseValue
from ..projections.ledger import Ledger
from ..seam import RunState
from .invariant_inputs import HandlerCall, Options, RunHistory, Window
from .invariant_report import Violation

# ----------------------------------------------------------------------------- one Run


def projection_of(run_id: str, state: RunRecord, ledger: Ledger | None) -> list[Violation]:
    """What the ledger holds is the replayed state (a finished Run it no longer holds is not
    a difference: the ledger is bounded; one it holds in another state is)."""
    if ledger is None:
        return []
    held = ledger.get(run_id)
    if (held is None and state.finished) or held == state:
        return []
    shown = "nothing" if held is None else held.state.value
    return [Violation("projection", run_id,
                      f"ledger holds {shown}, the events say {state.state.value}")]


def early_of(run: RunRecord, events: RunHistory, options: Options) -> list[Violation]:
    """A scheduled Run created, or first claimed (so started), before its due time by the
    server's timestamps, beyond ``early_tolerance``. Only when the tickers alone fired due
    times (a test or an operator may fire one ahead on purpose)."""
    if options.early_tolerance is None or not options.ticker_only or run.due_at is None:
        return []
    bound = run.due_at - timedelta(seconds=options.early_tolerance)
    first = events[0][0]
    if first.stored_at < bound:
        early = (run.due_at - first.stored_at).total_seconds()
        return [Violation("early", run.run_id,
                          f"created {early:.3f} s before its due time {run.due_at.isoformat()}")]
    claims = [stored for stored, event in events if isinstance(event, RunClaimed)]
    if claims and claims[0].stored_at < bound:
        early = (run.due_at - claims[0].stored_at).total_seconds()
        return [Violation("early", run.run_id,
                          f"started {early:.3f} s before its due time {run.due_at.isoformat()}")]
    return []


# ----------------------------------------------------------------------------- sessions


def sessions_of(run_id: str, events: RunHistory, calls: Sequence[HandlerCall],
                 tolerance: float = 0.5) -> list[Violation]:
    """One Session ID per Run, in its events and the handler's calls; retries reuse it."""
    found = []
    sessions = {event.run.session_id for _, event in events if event.run.session_id}
    sessions |= {e.session_id for _, e in events if isinstance(e, RunSessionStarted)}
    for call in calls:
        returned = call.returned if call.method == "start_session" else None
        sessions |= {s for s in (call.session_id, returned) if s}
    if len(sessions) > 1:
        found.append(Violation("sessions", run_id,
                               f"{len(sessions)} sessions: {', '.join(sorted(sessions))}"))
    found += _session_not_reused(run_id, events, list(calls), tolerance)
    return found


def calls_by_run(calls: Sequence[HandlerCall] | None) -> dict[str, list[HandlerCall]]:
    by_run: dict[str, list[HandlerCall]] = {}
    for call in calls or ():
        by_run.setdefault(call.run_id, []).append(call)
    return by_run


def _session_stored_at(events: RunHistory) -> datetime | None:
    for stored, event in events:
        if isinstance(event, RunSessionStarted):
            return stored.stored_at
    return None


def _session_not_reused(run_id: str, events: RunHistory, calls: list[HandlerCall],
                        tolerance: float) -> list[Violation]:
    """A ``start_session`` call without the Session ID that was stored before it."""
    stored_at = _session_stored_at(events)
    if stored_at is None:
        return []
    late = [c for c in calls if c.method == "start_session" and c.session_id is None
            and c.at - stored_at > timedelta(seconds=tolerance)]
    if not late:
        return []
    return [Violation("sessions", run_id,
                      f"start_session called without the stored session "
                      f"{(late[0].at - stored_at).total_seconds():.1f} s after it was stored")]


def admit_order_of(run_id: str, events: RunHistory, calls: Sequence[HandlerCall],
                    tolerance: float) -> list[Violation]:
    """Every ``admit_turn`` call came after the Run's ``run.session_started`` was stored."""
    admits = [c for c in calls if c.method == "admit_turn"]
    if not admits:
        return []
    stored_at = _session_stored_at(events)
    first = min(c.at for c in admits)
    if stored_at is None:
        return [Violation("admit_order", run_id,
                          "admit_turn called but no session was ever stored")]
    if first + timedelta(seconds=tolerance) < stored_at:
        early = (stored_at - first).total_seconds()
        return [Violation("admit_order", run_id,
                          f"admit_turn called {early:.3f} s before the session was stored")]
    return []


# ----------------------------------------------------------------------------- liveness


def unfinished_of(run_id: str, state: RunRecord, events: RunHistory,
                   leases: Mapping[str, LeaseValue], now: datetime, grace: float
                   ) -> list[Violation]:
    """The Run is finished, held under a live lease, or moved within ``grace``."""
    if state.state in (RunState.DISPATCHED, RunState.FAILED):
        return []
    lease = leases.get(run_id)
    if lease is not None and lease.expires_at > now:
        return []
    since = events[-1][0].stored_at
    if state.retry_at is not None and state.retry_at > since:
        since = state.retry_at
    idle = (now - since).total_seconds()
    if idle <= grace:
        return []
    return [Violation("unfinished", run_id,
                      f"{state.state.value} for {idle:.1f} s, nobody holds it")]


def alive_by_identity(windows: Sequence[Window]) -> dict[str, list[Window]]:
    alive: dict[str, list[Window]] = {}
    for window in windows:
        if window.identity is not None:
            alive.setdefault(window.identity, []).append(window)
    return alive


def stolen_of(run_id: str, events: RunHistory, alive: Mapping[str, list[Window]],
               lease_seconds: float) -> list[Violation]:
    """No takeover from a holder that was alive all along since it could last have renewed.

    A takeover stored at ``T`` from holder ``X`` is legitimate only if ``X`` stopped renewing
    for a lease: so ``X``'s liveness windows must not cover ``[max(T - lease, X's claim), T]``.
    """
    if not alive:
        return []
    found = []
    span = timedelta(seconds=lease_seconds)
    claimed_at: dict[str, datetime] = {}
    for stored, event in events:
        if isinstance(event, RunCreated) and event.holder is not None:
            claimed_at[event.holder] = stored.stored_at  # a create with its claim
        if not isinstance(event, RunClaimed):
            continue
        victim = event.takeover_from
        if victim is not None and victim != event.holder:  # not a restart taking its own
            since = max(stored.stored_at - span, claimed_at.get(victim, stored.stored_at))
            if any(w.covers(since, stored.stored_at) for w in alive.get(victim, [])):
                found.append(Violation("stolen", run_id,
                                       f"{event.holder} took it from {victim}, alive "
                                       f"throughout, at #{stored.seq}"))
        claimed_at[event.holder] = stored.stored_at
    return found
