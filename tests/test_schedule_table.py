"""The Schedule table's bookkeeping: the enabled count and the values records share.

Pure projection logic (no server): the count the capacity check uses must follow every
kind of change, and sharing repeated values between records (texts, payloads, instants, the
ID with the ledger) must not change any record, nor make the garbage collector walk them.
"""

from __future__ import annotations

import gc
from datetime import UTC, datetime, timedelta

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from nats_scheduler.core.events import Hold, RunRecord, ScheduleRecord
from nats_scheduler.ports.checkpoints import CheckpointRow
from nats_scheduler.projections.ledger import Ledger
from nats_scheduler.projections.schedule_table import ScheduleTable
from nats_scheduler.seam import RunPayload, RunState, Schedule, Trigger

NOW = datetime(2030, 1, 1, tzinfo=UTC)


def record(dep: str, *, enabled: bool = True, deleted: bool = False,
           prompt: str | None = None) -> ScheduleRecord:
    """Decoded, so each has its own copies of every text, as each stored event has."""
    made = ScheduleRecord.of(Schedule(dep, dep, "0 3 * * *", "Europe/Paris", enabled,
                                      RunPayload("agent:x", prompt or f"prompt of {dep}"), 1),
                             updated_at=NOW, deleted=deleted)
    return msgspec.json.decode(msgspec.json.encode(made), type=ScheduleRecord)


def test_the_enabled_count_follows_every_change() -> None:
    table = ScheduleTable()
    for seq, dep in enumerate(["a", "b", "c"], start=1):
        table.apply(seq, record(dep))
    assert table.enabled_count() == 3
    assert table.enabled_count(excluding="a") == 2
    assert table.enabled_count(excluding="zzz") == 3
    table.apply(4, record("a", enabled=False))
    assert table.enabled_count() == 2 and table.enabled_count(excluding="a") == 2
    table.apply(5, record("b", deleted=True))
    assert table.enabled_count() == 1
    assert not table.apply(5, record("b")), "an older or equal sequence is ignored"
    table.apply(6, record("b"))
    table.apply(7, record("a"))
    assert table.enabled_count() == 3


def test_records_share_repeated_texts_and_keep_their_values() -> None:
    table = ScheduleTable()
    given = [record(f"dep-{i}") for i in range(3)]
    for seq, r in enumerate(given, start=1):
        table.apply(seq, r)
    kept = [table.get(r.deployment_id) for r in given]
    assert [msgspec.structs.asdict(k) for k in kept if k] == [
        msgspec.structs.asdict(r) for r in given]
    first, second = kept[0], kept[1]
    assert first is not None and second is not None
    assert given[0].cron is not given[1].cron, "the records given have their own copies"
    assert first.cron is second.cron and first.timezone is second.timezone
    assert first.payload.target is second.payload.target
    assert first.name is first.deployment_id


def test_records_share_equal_payloads_and_instants_and_stay_out_of_the_collector() -> None:
    table = ScheduleTable()
    given = [record(f"dep-{i}", prompt="the same digest") for i in range(3)]
    for seq, r in enumerate(given, start=1):
        table.apply(seq, r)
    kept = [table.get(r.deployment_id) for r in given]
    assert [msgspec.structs.asdict(k) for k in kept if k] == [
        msgspec.structs.asdict(r) for r in given]
    first, second = kept[0], kept[1]
    assert first is not None and second is not None
    assert given[0].updated_at is not given[1].updated_at
    assert first.payload is second.payload and first.updated_at is second.updated_at
    assert not gc.is_tracked(first), "a record can hold no cycle: the collector skips it"
    assert all(not gc.is_tracked(entry) for entry in table._entries.values())


def test_the_ledger_keys_its_summaries_with_the_tables_own_ids() -> None:
    """One copy of each deployment ID per process: the table's key, the record's ID and
    name, and the ledger's summary key are the same object (a million IDs)."""
    table = ScheduleTable()
    ledger = Ledger(shared_id=table.shared_id)
    table.apply(1, record("dep-1"))
    stored = table.get("dep-1")
    assert stored is not None
    run = RunRecord(run_id="r1", deployment_id="".join(["dep", "-1"]), trigger=Trigger.RUN_NOW,
                    due_at=None, created_at=NOW, updated_at=NOW, state=RunState.PENDING,
                    payload=stored.payload, session_id=None, turn_id=None, attempts=0,
                    error=None, replay_of=None, requested_by=None)
    assert run.deployment_id is not stored.deployment_id
    ledger.apply(1, run)
    assert table.shared_id(run.deployment_id) is stored.deployment_id
    keys = [k for k in ledger._summaries._last if k == "dep-1"]
    assert keys and keys[0] is stored.deployment_id
    assert table.shared_id("unknown") == "unknown"


def test_in_order_lists_every_schedule_by_id_and_keeps_up_with_new_ones() -> None:
    table = ScheduleTable()
    for seq, dep in enumerate(["c", "a", "e"], start=1):
        table.apply(seq, record(dep))
    assert [r.deployment_id for r in table.in_order()] == ["a", "c", "e"]
    table.apply(4, record("b", deleted=True))  # deleted ones are listed too
    table.apply(5, record("d"))
    table.apply(6, record("a", enabled=False))  # a change: no new ID
    assert [r.deployment_id for r in table.in_order()] == ["a", "b", "c", "d", "e"]
    assert [r.deployment_id for r in table.in_order(after="b")] == ["c", "d", "e"]
    assert [r.deployment_id for r in table.in_order(after="bb")] == ["c", "d", "e"]
    assert list(table.in_order(after="e")) == []
    first = next(iter(table.in_order()))
    assert first.deployment_id == "a" and not first.enabled, "the current record"


_rows = st.lists(st.tuples(
    st.integers(1, 40),                       # the event's position
    st.sampled_from(["a", "b", "c", "d"]),    # the deployment
    st.sampled_from([None, "a", "named"]),   # its name (None: the ID)
    st.sampled_from(["0 3 * * *", "*/5 * * * *"]),
    st.booleans(), st.booleans(),             # enabled, deleted
    st.sampled_from(["p", "q"]),              # the prompt
    st.integers(0, 3),                        # the stamp, in minutes after NOW
    st.booleans(),                            # held
), max_size=30)


@given(first=_rows, second=_rows)
@settings(max_examples=150, deadline=None)
def test_a_bulk_load_of_rows_builds_what_applying_their_records_builds(
        first: list[tuple[object, ...]], second: list[tuple[object, ...]]) -> None:
    """The start-up's bulk load of a checkpoint (``load_rows``) is a shortcut of applying each
    row's record: the same entries, counts and order, also over a table holding Schedules
    already, rows out of order and repeated, and listeners told of every record taken."""
    def rows(drawn: list[tuple[object, ...]]) -> list[CheckpointRow]:
        made = [CheckpointRow(
            seq, dep, name, cron, "Europe/Paris", enabled, "agent:x", prompt, 1, deleted,
            NOW + timedelta(minutes=minutes),
            Hold(by="op", reason="r", at=NOW) if held else None)
            for seq, dep, name, cron, enabled, deleted, prompt, minutes, held in drawn]
        # decoded, as a checkpoint's part is: each row with its own copies of every value
        return msgspec.json.decode(msgspec.json.encode(made), type=list[CheckpointRow])

    applied, loaded = ScheduleTable(), ScheduleTable()
    told: dict[str, list[tuple[ScheduleRecord | None, ScheduleRecord]]] = {
        "applied": [], "loaded": []}
    for name, table in (("applied", applied), ("loaded", loaded)):
        table.subscribe_changes(lambda old, new, into=told[name]: into.append((old, new)))
        for row in rows(first):  # a table that holds Schedules already (the follower's)
            table.apply(row.seq, row.record())
    taken = sum(applied.apply(row.seq, row.record()) for row in rows(second))
    assert loaded.load_rows(rows(second)) == taken
    assert loaded.entries() == applied.entries()
    assert loaded.enabled_count() == applied.enabled_count()
    assert list(loaded.in_order()) == list(applied.in_order())
    assert told["loaded"] == told["applied"]
    for entry in loaded.entries():  # one copy of each value, kept by the table's pools
        assert entry.record.deployment_id is loaded.shared_id(entry.record.deployment_id)
        assert not gc.is_tracked(entry.record)
