"""The maintainer docs name code that exists: a page that drifts from the code fails here.

``docs/architecture.md`` and its siblings name modules, classes, methods, constants, settings
and tests in backticks. Each such name is checked against the source tree (parsed, not
imported): a path must exist, ``Class.member`` must be defined in that class, ``module.name``
at the top of that module, a bare ``CONSTANT`` or ``ClassName`` somewhere in the packages
(or among the client library's errors), an ``ASTRABOX_*`` setting in the code that reads
it, and ``tests/...py::test_name`` (a ``*`` or ``...`` ends a prefix) must be a test
function of that file. Backticked text that is none of these (event
tags, JSON, formulas, subjects) is not judged.
"""

from __future__ import annotations

import ast
import fnmatch
import importlib
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("nats_scheduler", "admin_tui")
# The pages that describe the code to a maintainer.
PAGES = ("architecture.md", "design.md", "failure-modes.md", "operations.md")
# Module names whose dotted references (``runcore.claim``) are checked; other dotted words in
# the docs name objects (``handler.start_session``, ``kv.create``), not modules.
CHECKED_MODULES = {"names", "runcore", "schedulecore", "calendar", "ownership", "validation",
                   "events", "tasks", "clock"}
_CODE = re.compile(r"`([^`\n]+)`")
_PATH = re.compile(r"^(?P<path>[\w./-]+\.(?:py|md|tcss|conf)|[\w-]+(?:/[\w.-]+)*/)"
                   r"(?:::(?P<test>[\w.*]+))?(?:\s.*)?$")
_DOTTED = re.compile(r"^(?P<owner>[A-Za-z_]\w*)\.(?P<member>_{0,2}[A-Za-z]\w*)(?:\(\))?$")
_CONSTANT = re.compile(r"^[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+$")
_CLASS = re.compile(r"^[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+$|^[A-Z][a-z]{3,}$")
_SETTING = re.compile(r"^ASTRABOX_[A-Z_]+$")
# Words in CamelCase or capitals that name something outside this code base.
_FOREIGN = {"JetStream", "DataTable", "Pilot", "OpenTelemetry", "Textual", "PostgreSQL",
            "SQLite", "MongoDB", "AstraBox", "DBOS", "Quartz", "TimeBroker", "Kubernetes",
            "CronJob", "Temporal", "Jepsen", "NATS", "SIGSTOP", "SIGCONT", "SIGKILL",
            "SIGTERM", "SIGINT", "KV_P_LEASES", "KV_P_REPLICAS", "P_RUNS", "P_SCHEDULES",
            "P_LEASES", "P_REPLICAS", "P_RUNINDEX", "RUN_NOW", "NTP", "Ctrl", "None", "True",
            "False", "Enter", "Escape", "Home", "End", "PgUp", "PgDn", "Tab", "Space",
            "ASTRABOX_SCHEDULER_PROVIDER"}
# The client library's errors and types, which the design pages name as they handle them.
_CLIENT_MODULES = ("nats.errors", "nats.js.errors", "nats.js.api", "nats.js.kv")


@dataclass
class CodeIndex:
    """What the packages define, read from their syntax trees."""

    modules: dict[str, list[Path]] = field(default_factory=dict)  # short name -> files
    top_level: dict[Path, set[str]] = field(default_factory=dict)
    classes: dict[str, set[str]] = field(default_factory=dict)  # class -> members
    anywhere: set[str] = field(default_factory=set)  # every assigned or defined name

    def add(self, path: Path) -> None:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        self.modules.setdefault(path.stem, []).append(path)
        names: set[str] = set()
        for node in tree.body:
            names |= _defined(node)
            if isinstance(node, ast.ClassDef):
                self._add_class(node)
        self.top_level[path] = names
        self.anywhere |= names

    def _add_class(self, node: ast.ClassDef) -> None:
        members = self.classes.setdefault(node.name, set())
        for child in ast.walk(node):
            members |= _defined(child)
            if isinstance(child, ast.Attribute) and isinstance(child.ctx, ast.Store):
                members.add(child.attr)
        self.anywhere |= members


def _defined(node: ast.AST) -> set[str]:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return {node.name}
    if isinstance(node, ast.Assign):
        return {t.id for t in node.targets if isinstance(t, ast.Name)}
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return {node.target.id}
    if isinstance(node, ast.ImportFrom | ast.Import):
        return {(a.asname or a.name).split(".")[0] for a in node.names}
    return set()


def _index() -> CodeIndex:
    index = CodeIndex()
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            index.add(path)
    return index


def _references(page: Path) -> Iterator[tuple[int, str]]:
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        for match in _CODE.finditer(line):
            yield number, match.group(1).strip()


def _test_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {n.name for n in ast.walk(tree)
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)}


def _check_path(path: str, test: str | None) -> str | None:
    candidates = [ROOT / path, ROOT / "nats_scheduler" / path, ROOT / "docs" / path]
    found = next((c for c in candidates if c.exists()), None)
    if found is None:
        return f"no file or folder {path}"
    if test is None:
        return None
    pattern = test.replace("...", "*")
    names = _test_names(found)
    if not any(fnmatch.fnmatchcase(name, pattern) for name in names):
        return f"{path} has no test {test}"
    return None


def _check_dotted(index: CodeIndex, owner: str, member: str) -> str | None:
    if owner in index.classes:
        if member not in index.classes[owner]:
            return f"class {owner} has no member {member}"
        return None
    files = index.modules.get(owner, []) if owner in CHECKED_MODULES else []
    if files and not any(member in index.top_level[p] for p in files):
        return f"module {owner} has no top-level {member}"
    return None


def problem(index: CodeIndex, settings: str, text: str) -> str | None:
    """What is wrong with one backticked reference, or None when it holds or is not code."""
    if match := _PATH.match(text):
        if "/" in match.group("path") and not match.group("path").startswith(("P.", "$")):
            return _check_path(match.group("path"), match.group("test"))
        return None
    if match := _DOTTED.match(text):
        return _check_dotted(index, match.group("owner"), match.group("member"))
    if text in _FOREIGN:
        return None
    if _SETTING.match(text):
        return None if text in settings else f"no setting {text}"
    if _CONSTANT.match(text) or _CLASS.match(text):
        known = text in index.anywhere or _in_client(text)
        return None if known else f"nothing named {text}"
    return None


def _in_client(name: str) -> bool:
    return any(hasattr(importlib.import_module(m), name) for m in _CLIENT_MODULES)


@pytest.fixture(scope="module")
def code_index() -> CodeIndex:
    return _index()


def _sources() -> str:
    """Every package source, where a setting's name is read (settings.py, the devhost)."""
    return "\n".join(p.read_text(encoding="utf-8")
                     for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("page", PAGES)
def test_every_name_a_maintainer_page_gives_exists(page: str, code_index: CodeIndex) -> None:
    settings = _sources()
    wrong = [f"docs/{page}:{number}: `{text}`: {why}"
             for number, text in _references(ROOT / "docs" / page)
             if (why := problem(code_index, settings, text))]
    assert not wrong, "\n".join(wrong)


def test_the_checker_catches_a_name_that_does_not_exist(code_index: CodeIndex) -> None:
    settings = _sources()
    assert problem(code_index, settings, "runtime/nowhere.py") is not None
    assert problem(code_index, settings, "Firing.no_such_method") is not None
    assert problem(code_index, settings, "names.no_such_name") is not None
    assert problem(code_index, settings, "NO_SUCH_CONSTANT") is not None
    assert problem(code_index, settings, "ASTRABOX_NATS_NO_SUCH") is not None
    assert problem(code_index, settings, "tests/test_multiprocess.py::test_nothing_*") is not None
    # and accepts what does exist
    assert problem(code_index, settings, "runtime/firing.py") is None
    assert problem(code_index, settings, "Firing.fire_many") is None
    assert problem(code_index, settings, "names.token") is None
    assert problem(code_index, settings, "FIRE_READ_MAX_AGE") is None
    assert problem(code_index, settings, "ASTRABOX_NATS_PREFIX") is None
