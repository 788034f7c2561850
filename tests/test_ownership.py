"""Rendezvous ownership of due times: stable, even, and moving few keys when members change."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from collections import Counter
from datetime import UTC, datetime, timedelta, timezone

import pytest

from nats_scheduler.core.ownership import owner, owner_key

MEMBERS = ("replica-a", "replica-b", "replica-c")
DUE = datetime(2030, 1, 1, 2, 0, tzinfo=UTC)
KEYS = [owner_key(f"deployment-{i}", DUE + timedelta(minutes=i % 7)) for i in range(30_000)]


def owners(members: tuple[str, ...]) -> list[str]:
    return [owner(members, key) for key in KEYS]


def test_owner_key_is_the_deployment_and_the_utc_due_time() -> None:
    paris = timezone(timedelta(hours=1))
    assert owner_key("daily@report", DUE) == "daily@report@2030-01-01T02:00:00+00:00"
    assert owner_key("d", datetime(2030, 1, 1, 3, 0, tzinfo=paris)) == owner_key("d", DUE)
    with pytest.raises(ValueError, match="timezone-aware"):
        owner_key("d", datetime(2030, 1, 1, 2, 0))


def test_owner_is_deterministic_across_processes() -> None:
    """Pinned answers, and a fresh interpreter (another hash seed) gives the same ones."""
    pinned = {key: owner(MEMBERS, key) for key in KEYS[:50]}
    assert pinned == {key: owner(MEMBERS, key) for key in KEYS[:50]}
    script = (
        "import json, sys\n"
        "from nats_scheduler.core.ownership import owner\n"
        "keys = json.loads(sys.stdin.read())\n"
        f"print(json.dumps({{k: owner({list(MEMBERS)!r}, k) for k in keys}}))\n"
    )
    for seed in ("1", "2"):
        out = subprocess.run(
            [sys.executable, "-c", script], input=json.dumps(list(pinned)), text=True,
            capture_output=True, check=True, env={"PYTHONHASHSEED": seed},
        ).stdout
        assert json.loads(out) == pinned
    # pinned across versions: a change of hash would split replicas of mixed versions
    assert [owner(MEMBERS, f"dep-{i}") for i in (0, 1, 4)] == [
        "replica-b", "replica-c", "replica-a"]


def test_keys_spread_evenly_over_three_members() -> None:
    counts = Counter(owners(MEMBERS))
    assert set(counts) == set(MEMBERS)
    for member in MEMBERS:
        assert abs(counts[member] - 10_000) < 500, counts  # within 5 % of a third


def test_member_order_and_duplicates_do_not_matter() -> None:
    expected = owners(MEMBERS)[:3000]
    for perm in itertools.permutations(MEMBERS):
        assert [owner(perm, k) for k in KEYS[:3000]] == expected
    assert [owner([*MEMBERS, "replica-a"], k) for k in KEYS[:3000]] == expected


def test_a_fourth_member_takes_about_a_quarter_only_from_the_others() -> None:
    before = owners(MEMBERS)
    after = owners((*MEMBERS, "replica-d"))
    moved = [(b, a) for b, a in zip(before, after, strict=True) if b != a]
    assert all(a == "replica-d" for _, a in moved)  # nothing moves between old members
    assert 0.22 < len(moved) / len(KEYS) < 0.28


def test_removing_a_member_moves_only_its_keys() -> None:
    before = owners(MEMBERS)
    after = owners(("replica-a", "replica-c"))
    for b, a in zip(before, after, strict=True):
        if b != "replica-b":
            assert a == b
        else:
            assert a in ("replica-a", "replica-c")


def test_one_member_owns_everything_and_none_is_an_error() -> None:
    assert {owner(["solo"], k) for k in KEYS[:100]} == {"solo"}
    with pytest.raises(ValueError):
        owner([], "k")
