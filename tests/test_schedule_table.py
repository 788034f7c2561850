"""The Schedule table's bookkeeping: the enabled count and the texts records share.

Pure projection logic (no server): the count the capacity check uses must follow every
kind of change, and sharing repeated texts between records must not change any record.
"""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec

from nats_scheduler.core.events import ScheduleRecord
from nats_scheduler.projections.schedule_table import ScheduleTable
from nats_scheduler.seam import RunPayload, Schedule

NOW = datetime(2030, 1, 1, tzinfo=UTC)


def record(dep: str, *, enabled: bool = True, deleted: bool = False) -> ScheduleRecord:
    """Decoded, so each has its own copies of every text, as each stored event has."""
    made = ScheduleRecord.of(Schedule(dep, dep, "0 3 * * *", "Europe/Paris", enabled,
                                      RunPayload("agent:x", f"prompt of {dep}"), 1),
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
