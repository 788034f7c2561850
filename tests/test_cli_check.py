"""``nats-scheduler check`` against a real store: clean history exits 0, a broken one 7."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest

from nats_scheduler.admin.invariants import Options, check
from nats_scheduler.admin.stored_events import load_history
from nats_scheduler.cli.main import main
from nats_scheduler.names import Names
from nats_scheduler.seam import EnqueueRequest, RunPayload, RunState, Schedule, Trigger
from nats_scheduler.testing.handler import RecordingRunHandler
from tests.harness.servers import connect_fast, unique_prefix
from tests.providers import eventually, running

pytestmark = pytest.mark.anyio

FAR = datetime(2032, 2, 29, 3, 0, tzinfo=UTC)


async def run_cli(capsys: pytest.CaptureFixture[str], url: str, prefix: str,
                  *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = await anyio.to_thread.run_sync(
        main, ["check", *argv, "--url", url, "--prefix", prefix, "--timeout", "3"])
    out, err = capsys.readouterr()
    return code, out, err


async def test_check_passes_a_real_history_and_fails_a_poisoned_one(
    nats_url: str, capsys: pytest.CaptureFixture[str], tmp_path: Path,
) -> None:
    prefix = unique_prefix()
    handler = RecordingRunHandler()
    async with running(nats_url, prefix, handler) as provider:
        await provider.apply(Schedule("d", "d", "0 3 29 2 *", "UTC", True,
                                      RunPayload("t", "p"), 1))
        fired = await provider.fire_due("d", FAR)
        now = await provider.enqueue(EnqueueRequest("d", Trigger.RUN_NOW))
        assert fired is not None

        async def finished() -> bool:
            runs = await provider.list_runs("d")
            return len(runs) == 2 and all(r.state == RunState.DISPATCHED for r in runs)

        await eventually(finished, timeout=10)
        # the loader and the checker agree with the provider's own ledger
        nc = await connect_fast(nats_url)
        try:
            history = await load_history(nc, prefix)
        finally:
            await nc.close()
        assert [e.type for e in history.runs].count("run.dispatched") == 2
        report = check(history, Options(ledger=provider.ledger, early_tolerance=None))
        assert report.ok, report.text()
        assert report.runs == 2
        assert all(provider.ledger.get(r) is not None for r in (fired.run_id, now.run_id))

    # the far due time was fired by hand, years before it is due: ``early`` unless the
    # checker is told that due times were fired by hand
    code, out, _ = await run_cli(capsys, nats_url, prefix)
    assert code == 7, out
    assert f"early: {fired.run_id}: created" in out and "before its due time" in out
    code, out, _ = await run_cli(capsys, nats_url, prefix, "--early-tolerance", "off")
    assert code == 0, out
    assert out.startswith("checked 2 runs, 1 schedules")
    assert "events/s" in out  # the rate
    # --since: only the Runs created from then on are judged (here: none)
    code, out, _ = await run_cli(capsys, nats_url, prefix, "--since", "now")
    assert code == 0, out
    assert out.startswith("checked 0 runs, 1 schedules")

    # the handler's record of calls as JSON Lines: consistent with the store
    # (the recording handler stamps calls on the monotonic clock: convert to wall time)
    offset = time.time() - time.monotonic()
    calls = tmp_path / "calls.jsonl"
    calls.write_text("\n".join(json.dumps({
        "at": c.started_at + offset, "method": str(c.method), "run_id": c.run_id,
        "session_id": c.invocation.session_id, "returned": c.result})
        for c in handler.calls) + "\n")
    code, out, _ = await run_cli(capsys, nats_url, prefix, "--calls", str(calls),
                                 "--early-tolerance", "off")
    assert code == 0, out

    # replicas alive only for the last minutes: the far due time cannot have been theirs
    start = (datetime.now(UTC) - timedelta(minutes=3)).isoformat()
    code, out, _ = await run_cli(capsys, nats_url, prefix, "--alive", f"{start}/now/a",
                                 "--json", "--early-tolerance", "off")
    report_json = json.loads(out)
    assert code == 7 and not report_json["ok"]
    assert [(v["check"], v["subject"]) for v in report_json["violations"]] == [
        ("invented", "d@2032-02-29T03:00Z")]

    # a message on an event subject that is not an event: "foreign", exit 7
    nc = await connect_fast(nats_url)
    try:
        await nc.jetstream().publish(Names(prefix).run_subject("d", "junk"), b"{not json")
    finally:
        await nc.close()
    code, out, _ = await run_cli(capsys, nats_url, prefix)
    assert code == 7
    assert "foreign:" in out and "junk" in out

    # an unreadable calls file is an invalid request
    (tmp_path / "bad.jsonl").write_text("{}\n")
    code, _, err = await run_cli(capsys, nats_url, prefix, "--calls", str(tmp_path / "bad.jsonl"))
    assert code == 2 and "not a handler call record" in err
