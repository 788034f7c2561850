"""Subject encoding of IDs: one token, injective, never a wildcard or a separator."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nats_scheduler.names import (
    Names,
    requested_run_id,
    scheduled_run_id,
    token,
    untoken,
)

TOKEN_RE = re.compile(r"^[A-Za-z0-9_\-%]+$")
HOSTILE = ["a", "a.b", "a..b", "*", ">", "a b", "$JS.API.STREAM.LIST", "ünï©ødé", "a%2Eb",
           "\x00\x1f", "x" * 255, "🙂" * 255, "tab\there", "new\nline"]


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_ids_become_one_safe_token(value: str) -> None:
    tok = token(value)
    assert TOKEN_RE.match(tok), tok
    assert untoken(tok) == value


def test_distinct_ids_never_share_a_token() -> None:
    tokens = [token(v) for v in HOSTILE]
    assert len(set(tokens)) == len(HOSTILE)
    assert token("a.b") != token("a%2Eb")


@settings(max_examples=300, derandomize=True)
@given(st.text(min_size=1, max_size=255).filter(lambda s: not any(
    0xD800 <= ord(c) <= 0xDFFF for c in s)))
def test_token_roundtrips_any_text(value: str) -> None:
    tok = token(value)
    assert TOKEN_RE.match(tok)
    assert untoken(tok) == value


@pytest.mark.parametrize("value", ["", "x" * 256, "bad\ud800surrogate"])
def test_unusable_ids_are_refused(value: str) -> None:
    with pytest.raises(ValueError):
        token(value)


def test_subjects_have_fixed_token_counts() -> None:
    names = Names("P")
    assert names.run_subject("a.b", "r.1").count(".") == 3
    assert names.schedule_subject("a.b").count(".") == 2
    assert names.deployment_runs_filter("a") == "P.run.a.*"
    assert names.run_ids_of_subject(names.run_subject("a.b", "r 1")) == ("a.b", "r 1")


def test_run_ids_are_deterministic_where_they_must_be() -> None:
    due = datetime(2030, 1, 1, 3, 0, tzinfo=UTC)
    assert scheduled_run_id("d", due) == scheduled_run_id("d", due)
    assert scheduled_run_id("d", due) != scheduled_run_id("e", due)
    assert requested_run_id("d", "k") == requested_run_id("d", "k")
    assert requested_run_id("d", "k") != requested_run_id("e", "k")
    assert TOKEN_RE.match(scheduled_run_id("d", due))
