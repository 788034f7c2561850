"""The dev host's Deployment records and its command line (no server needed)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from nats_scheduler.devhost.cli import main
from nats_scheduler.devhost.records import (
    DeploymentExists,
    DeploymentNotFound,
    DeploymentStore,
    use_wal,
)
from nats_scheduler.seam import InvalidSchedule, RunPayload, Schedule


def test_every_change_raises_the_version_even_across_delete(tmp_path: Path) -> None:
    store = DeploymentStore(tmp_path / "a.db")
    created = store.create("daily", cron="0 9 * * *", timezone="Europe/Berlin", prompt="hi")
    assert created.version == 1
    assert created.to_schedule() == Schedule("daily", "daily", "0 9 * * *", "Europe/Berlin",
                                             True, RunPayload("default", "hi"), 1)
    assert store.edit("daily", prompt="hello").version == 2
    disabled = store.set_enabled("daily", False)
    assert (disabled.version, disabled.enabled, disabled.prompt) == (3, False, "hello")
    deleted = store.delete("daily")
    assert deleted.deleted and deleted.version == 4
    assert store.get("daily") is None and store.all() == []
    assert [d.version for d in store.all(include_deleted=True)] == [4]
    again = store.create("daily", cron="* * * * *")
    assert again.version == 5 and again.enabled  # above the tombstone: the provider applies it


def test_invalid_and_conflicting_changes_are_refused(tmp_path: Path) -> None:
    store = DeploymentStore(tmp_path / "a.db")
    with pytest.raises(InvalidSchedule):
        store.create("bad", cron="61 * * * *")
    with pytest.raises(InvalidSchedule):
        store.create("bad", cron="* * * * *", timezone="Mars/Olympus")
    store.create("one", cron="* * * * *")
    with pytest.raises(DeploymentExists):
        store.create("one", cron="* * * * *")
    with pytest.raises(InvalidSchedule):
        store.edit("one", cron="* * *")
    for change in (lambda: store.edit("two", prompt="x"), lambda: store.delete("two")):
        with pytest.raises(DeploymentNotFound):
            change()
    assert store.get("one") is not None and store.get("one").version == 1  # type: ignore[union-attr]


def test_command_line_changes_records_with_exit_codes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "cli.db")
    assert main(["--db", db, "create", "walk", "--cron", "* * * * *", "--prompt", "p"]) == 0
    assert main(["create", "--db", db, "walk", "--cron", "* * * * *"]) == 2
    assert main(["disable", "walk", "--db", db]) == 0
    assert main(["edit", "walk", "--db", db, "--timezone", "Asia/Tokyo", "--json"]) == 0
    out = capsys.readouterr().out
    edited = json.loads(out[out.index("{"):])
    assert (edited["version"], edited["timezone"], edited["enabled"]) == (3, "Asia/Tokyo", False)
    assert main(["create", "bad", "--db", db, "--cron", "x"]) == 2
    assert main(["delete", "nope", "--db", db]) == 3
    err = capsys.readouterr().err
    assert "error:" in err and "Traceback" not in err
    assert main(["list", "--db", db, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(d["deployment_id"], d["version"]) for d in listed] == [("walk", 3)]
    assert main(["sessions", "--db", db]) == 0
    assert "SESSION" in capsys.readouterr().out


class _LockedTwice:
    """A connection whose WAL switch meets another process's lock twice (SQLite answers
    that at once, without its busy timeout, when two processes open a new file)."""

    def __init__(self) -> None:
        self.asked = 0

    def execute(self, sql: str) -> None:
        assert sql == "PRAGMA journal_mode=WAL"
        self.asked += 1
        if self.asked <= 2:
            raise sqlite3.OperationalError("database is locked")


def test_the_wal_switch_is_asked_again_while_another_process_holds_the_lock() -> None:
    conn = _LockedTwice()
    use_wal(conn)  # type: ignore[arg-type]
    assert conn.asked == 3


def test_a_wal_switch_failing_otherwise_is_not_retried() -> None:
    class Broken:
        def execute(self, sql: str) -> None:
            raise sqlite3.OperationalError("disk I/O error")

    with pytest.raises(sqlite3.OperationalError, match="disk I/O"):
        use_wal(Broken())  # type: ignore[arg-type]
