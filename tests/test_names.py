"""Subject encoding of IDs: one token, injective, never a wildcard or a separator; the
builders of every other name, and that no module but ``names.py`` spells one."""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
import types
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nats_scheduler import names as names_module
from nats_scheduler.jetstream.decisions import DecisionNonces
from nats_scheduler.names import (
    JS_API_INFO,
    Names,
    consumer_create_subject,
    direct_get_subject,
    inbox_filter,
    inbox_reply_prefix,
    is_kv_stream,
    kv_filter,
    kv_stream,
    kv_subject,
    requested_run_id,
    run_event_msg_id,
    schedule_event_msg_id,
    scheduled_run_id,
    stream_create_subject,
    stream_delete_subject,
    stream_info_subject,
    stream_msg_delete_subject,
    stream_msg_get_subject,
    stream_purge_subject,
    token,
    untoken,
)

ROOT = Path(__file__).resolve().parent.parent

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


# ----------------------------------------------------------------- the other builders
# The values below are the ones the modules spelled out before names.py built them all: an
# installation's streams, buckets, permissions and audit trail must not change with it.


def test_jetstream_api_subjects() -> None:
    assert JS_API_INFO == "$JS.API.INFO"
    assert direct_get_subject("P_RUNS") == "$JS.API.DIRECT.GET.P_RUNS"
    assert stream_info_subject("KV_P_LEASES") == "$JS.API.STREAM.INFO.KV_P_LEASES"
    assert stream_create_subject("S") == "$JS.API.STREAM.CREATE.S"
    assert stream_delete_subject("S") == "$JS.API.STREAM.DELETE.S"
    assert stream_purge_subject("S") == "$JS.API.STREAM.PURGE.S"
    assert stream_msg_get_subject("S") == "$JS.API.STREAM.MSG.GET.S"
    assert stream_msg_delete_subject("S") == "$JS.API.STREAM.MSG.DELETE.S"
    assert consumer_create_subject("S") == "$JS.API.CONSUMER.CREATE.S"


def test_key_value_names() -> None:
    assert kv_stream("P_LEASES") == "KV_P_LEASES"
    assert kv_subject("P_LEASES", "r1") == "$KV.P_LEASES.r1"
    assert kv_filter("P_LEASES") == "$KV.P_LEASES.>"
    assert is_kv_stream("KV_P_REPLICAS") and not is_kv_stream("P_RUNS")
    names = Names("P")
    assert (names.leases_stream, names.leases_filter) == ("KV_P_LEASES", "$KV.P_LEASES.>")
    assert (names.replicas_stream, names.replicas_filter) == ("KV_P_REPLICAS",
                                                              "$KV.P_REPLICAS.>")
    assert names.lease_subject("a.b") == "$KV.P_LEASES.a%2Eb"
    assert names.replica_subject("host.example:1") == "$KV.P_REPLICAS.host=2Eexample=3A1"


def test_admin_and_reply_subjects() -> None:
    names = Names("P")
    assert names.admin_subject("schedules.hold") == "P.admin.schedules.hold"
    assert names.admin_subject("replica.status") == "P.admin.replica.status"
    assert names.admin_filter == "P.admin.>"
    assert names.absent_stream("ab12") == "P_DOCTOR_PROBE_AB12"
    assert inbox_filter("_INBOX.x") == "_INBOX.x.*"
    assert inbox_reply_prefix("_INBOX.x") + "7" == "_INBOX.x.7"


def test_run_subjects_are_told_from_schedule_subjects() -> None:
    names = Names("P")
    assert names.is_run_subject(names.run_subject("d", "r"))
    assert not names.is_run_subject(names.schedule_subject("d"))
    assert not names.is_run_subject(names.index_subject("d"))  # P.runidx.d


def test_decision_msg_ids_keep_their_format() -> None:
    assert run_event_msg_id("r1", 5, "0123456789ab1") == "r1:5:0123456789ab1"
    assert schedule_event_msg_id("a.b", 3, "0123456789abf") == "a%2Eb:3:0123456789abf"


def test_decision_nonces_are_a_writer_part_then_a_hex_counter() -> None:
    nonces = DecisionNonces()
    assert re.fullmatch(r"[0-9a-f]{12}", nonces.writer)
    drawn = [nonces.next() for _ in range(16)]
    assert drawn[0] == nonces.writer + "1" and drawn[9] == nonces.writer + "a"
    assert drawn[15] == nonces.writer + "10" and len(set(drawn)) == 16
    assert DecisionNonces().writer != nonces.writer  # each writer draws its own
    assert DecisionNonces("fixed").next() == "fixed1"


def _fresh_copy_of_names() -> types.ModuleType:
    """names.py executed once more, apart from the imported one (which stays as it is); in
    the package, so its relative imports resolve."""
    spec = importlib.util.spec_from_file_location("nats_scheduler._names_copy",
                                                  names_module.__file__)
    assert spec is not None and spec.loader is not None
    copy = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = copy  # dataclasses look their module up while it executes
    try:
        spec.loader.exec_module(copy)
    finally:
        del sys.modules[spec.name]
    return copy


def test_names_module_keeps_no_process_state() -> None:
    """Constants and pure builders only: loading names.py again yields the same values (a
    nonce drawn at import would differ), and nothing in it counts (the writer's nonces live
    with the writer: jetstream/decisions.py)."""
    copy = vars(_fresh_copy_of_names())
    for name, value in vars(names_module).items():
        if name.startswith("__") or callable(value) or isinstance(value, types.ModuleType):
            continue
        assert not isinstance(value, list | dict | set | bytearray), name
        assert not hasattr(value, "__next__"), name  # a counter, e.g. itertools.count
        assert copy[name] == value, name


# ------------------------------------------------------ no name spelled outside names.py

ALLOWED = {ROOT / "nats_scheduler" / "names.py"}
PACKAGES = [ROOT / "nats_scheduler", ROOT / "admin_tui"]
NAME_PARTS = ("$JS.", "$KV.", "KV_", "Nats-")
HEADER_NAMES = frozenset(value for name, value in vars(names_module).items()
                         if name.startswith("HDR_") and isinstance(value, str))


def _header_lookups(tree: ast.AST) -> set[int]:
    """ids of the strings used as header names: ``h.get(X)``, ``h[X]``, ``{X: ...}``,
    ``X in h`` (so ``"Status"`` in ``__all__`` is no header)."""
    found: set[ast.AST] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "get" and node.args:
            found.add(node.args[0])
        elif isinstance(node, ast.Subscript):
            found.add(node.slice)
        elif isinstance(node, ast.Dict):
            found.update(key for key in node.keys if key is not None)
        elif isinstance(node, ast.Compare) and isinstance(node.ops[0], ast.In | ast.NotIn):
            found.add(node.left)
    return {id(node) for node in found}


def spelled_names(source: str) -> list[tuple[int, str]]:
    """(line, text) of every NATS name a module spells out instead of asking names.py.

    A string holding ``$JS.``, ``$KV.``, ``KV_`` or ``Nats-``; a header name (``Status``
    and ``Description`` only where used as one: ``headers.get("Status")``); an f-string
    joining a ``...prefix`` to ``.`` or ``_`` (``f"{names.prefix}.run."``). Docstrings and
    other bare string statements are prose and may name anything.
    """
    tree = ast.parse(source)
    prose = {id(node.value) for node in ast.walk(tree)
             if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}
    lookups = _header_lookups(tree)
    found: set[tuple[int, str]] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and id(node) not in prose:
            if any(part in node.value for part in NAME_PARTS) or (
                    node.value in HEADER_NAMES and ("-" in node.value or id(node) in lookups)):
                found.add((node.lineno, node.value))
        elif isinstance(node, ast.JoinedStr) and any(
                isinstance(first, ast.FormattedValue)
                and ast.unparse(first.value).endswith("prefix")
                and isinstance(then, ast.Constant) and str(then.value)[:1] in "._"
                for first, then in zip(node.values, node.values[1:], strict=False)):
            found.add((node.lineno, ast.unparse(node)))
    return sorted(found)


def test_the_scan_finds_a_spelled_name() -> None:
    source = ('"""Docstrings may say Nats-Msg-Id and $KV.X.>."""\n'
              'A = f"$JS.API.DIRECT.GET.{s}"\n'
              'B = {"Status": 1}\n'
              '__all__ = ["Status"]  # a word, not a header\n'
              'OPERATION = "KV-Operation"\n'
              'C = f"{n.prefix}.run."\n'
              'D = f"{names.admin_prefix}.{endpoint}"\n'
              'E = f"{inbox}.*"  # not a prefix: left to review\n')
    assert [line for line, _ in spelled_names(source)] == [2, 3, 5, 6, 7]


def test_no_module_but_names_spells_a_nats_name() -> None:
    modules = [p for package in PACKAGES for p in sorted(package.rglob("*.py"))
               if p not in ALLOWED]
    assert len(modules) > 50  # the scan did find the packages
    spelled = [f"{path.relative_to(ROOT)}:{line}: {text!r}" for path in modules
               for line, text in spelled_names(path.read_text("utf-8"))]
    assert spelled == [], "build these in nats_scheduler/names.py:\n" + "\n".join(spelled)
