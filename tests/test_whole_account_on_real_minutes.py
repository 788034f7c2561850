"""``nats-scheduler explain`` across real minute boundaries, and the checker on a forged gap.

The scenario (``tests/harness/minute_account.py``, started in the background with the
session: ``tests/conftest.py`` section 6) runs four ``* * * * *`` Schedules on replica
processes of a real server through four real minute boundaries: every process stopped
across two of them and started again, AstraBox disabling and re-enabling one Schedule, an
operator holding and releasing another, a cron edit of the third (the disturbances overlap
on different Schedules: disable and hold across B1, the edit from B1 on, the outage across
B2 and B3, every Schedule firing again at B4). Here its result is
judged: ``explain --json`` says ``no_process``, ``disabled`` and ``held`` for exactly the
due times each affected (by the server's timestamps of what was done), ``run`` with the
derived Run ID for every other, the new cron's due times only from the edit on, and the Run
now beside, uncounted; ``nats-scheduler check`` passes, then reports the one due time whose
Run was purged, and ``explain`` exits 7 on it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from nats_scheduler.core import calendar
from nats_scheduler.names import due_token, scheduled_run_id

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@pytest.fixture(scope="module")
def seen(real_minutes: dict[str, Any]) -> dict[str, Any]:
    assert "error" not in real_minutes, (real_minutes.get("error"), real_minutes.get("logs"))
    return real_minutes


def account(seen: dict[str, Any], deployment: str) -> dict[datetime, dict[str, Any]]:
    answer = seen["explain"][deployment]
    assert answer["exit"] == 0, answer
    body = answer["json"]
    assert set(body) >= {"deployment_id", "since", "until", "due_times", "other_runs"}
    assert body["deployment_id"] == deployment
    return {instant(line["due_at"]): line for line in body["due_times"]}


def close(a: datetime, b: datetime) -> bool:
    """The same server timestamp, read two ways (nanoseconds rounded or cut)."""
    return abs((a - b).total_seconds()) < 0.001


def between(seen: dict[str, Any], due: datetime) -> bool:
    """Whether every replica was stopped at ``due`` (from the stop to the next start)."""
    return instant(seen["stopping"]) < due < instant(seen["starting"])


def assert_run(deployment: str, due: datetime, line: dict[str, Any]) -> None:
    assert line["outcome"] == "run", (deployment, due, line)
    assert line["reason"] is None
    assert line["run_id"] == scheduled_run_id(deployment, due)
    assert line["state"] == "dispatched"
    assert isinstance(line["late_seconds"], float) and 0 <= line["late_seconds"] < 30


def assert_no_process(seen: dict[str, Any], line: dict[str, Any]) -> None:
    assert (line["outcome"], line["reason"], line["run_id"]) == ("skipped", "no_process", None)
    # from the last sign of life (the replicas' leave) to the first start after it
    assert instant(seen["stopping"]) <= instant(line["since"]) <= instant(seen["stopped"])
    assert instant(line["until"]) >= instant(seen["starting"])


def test_every_real_due_time_of_an_untouched_schedule(seen: dict[str, Any]) -> None:
    lines = account(seen, "plain")
    boundaries = [instant(b) for b in seen["boundaries"]]
    assert sorted(lines) == boundaries  # created just before the first, nothing after now
    for due, line in lines.items():
        if between(seen, due):
            assert_no_process(seen, line)
        else:
            assert_run("plain", due, line)
    assert sum(between(seen, due) for due in lines) == 2  # two boundaries with no process
    others = seen["explain"]["plain"]["json"]["other_runs"]
    assert [(r["run_id"], r["trigger"], r["requested_by"]) for r in others] == [
        (seen["run_now"], "run_now", "bob@ops")]


def test_disabled_and_held_for_exactly_the_due_times_they_covered(seen: dict[str, Any]) -> None:
    for deployment, reason in (("toggle", "disabled"), ("held", "held")):
        lines = account(seen, deployment)
        off = instant(seen["off"][deployment])
        on = instant(seen["on"][deployment])
        assert sorted(lines) == [instant(b) for b in seen["boundaries"]]
        covered = [due for due in lines if off < due <= on]
        assert len(covered) == 1, (deployment, covered)
        for due, line in lines.items():
            if off < due <= on:
                assert (line["outcome"], line["reason"]) == ("skipped", reason), line
                assert close(instant(line["since"]), off) and close(instant(line["until"]), on)
                if reason == "held":
                    assert (line["by"], line["note"]) == ("ana@ops", "db migration")
                else:
                    assert line["version"] == 2
            elif between(seen, due):
                assert_no_process(seen, line)
            else:
                assert_run(deployment, due, line)


def test_a_cron_edit_counts_from_its_commit_on(seen: dict[str, Any]) -> None:
    lines = account(seen, "edited")
    edit = instant(seen["edited_at"])
    new_cron = seen["new_cron"]
    until = instant(seen["explain"]["edited"]["json"]["until"])
    boundaries = [instant(b) for b in seen["boundaries"]]
    old = [due for due in boundaries if due <= edit]
    new = calendar.due_times(new_cron, "UTC", edit, until)
    assert old and new and set(boundaries) - set(old) - set(new), (
        "the old cron before the edit, the new one after, and a minute only the old had")
    assert sorted(lines) == old + new
    assert all(lines[due]["cron"] == "* * * * *" for due in old)
    assert all(lines[due]["cron"] == new_cron for due in new)
    assert any(not between(seen, due) for due in new), "a due time of the new cron fired"
    for due, line in lines.items():
        if between(seen, due):
            assert_no_process(seen, line)
        else:
            assert_run("edited", due, line)


def test_the_checker_passes_then_reports_the_forged_gap(seen: dict[str, Any]) -> None:
    check = seen["check"]
    assert check["exit"] == 0 and check["json"]["ok"], check
    forged = seen["forged_check"]
    due = instant(seen["forged"]["due_at"])
    assert forged["exit"] == 7, forged
    assert [(v["check"], v["subject"]) for v in forged["json"]["violations"]] == [
        ("unexplained", f"plain@{due_token(due)}")]
    explained = seen["forged_explain"]
    assert explained["exit"] == 7
    lines = {instant(line["due_at"]): line for line in explained["json"]["due_times"]}
    assert (lines[due]["outcome"], lines[due]["run_id"]) == ("unexplained", None)
