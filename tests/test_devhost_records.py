"""The dev host's Deployment records and its command line (no server needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nats_scheduler.devhost.cli import main
from nats_scheduler.devhost.records import DeploymentExists, DeploymentNotFound, DeploymentStore
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
