"""The maintainer docs name code that exists: a page that drifts from the code fails here.

``docs/architecture.md`` and its siblings name modules, classes, methods, functions,
constants, settings and tests in backticks. Each such name is checked against the source
tree (parsed, not imported):

- a path (``runtime/firing.py``, ``jetstream/``, ``tests/x.py::test_name``, where ``*`` or
  ``...`` ends a prefix) must exist, and the test must be a test function of that file; a
  bare file name (``ticker.py``) must be the name of a file of this repository;
- ``core/schedulecore.plan_reconcile`` must be defined at the top of that module;
- a dotted chain (``Class.member``, ``Class.method().attr``, ``module.name``,
  ``provider.fire_due``) must resolve link by link: its owner is a class (members include
  those of its bases), a module of the packages, an object the docs name by its usual
  variable (``provider``, ``handler``, ``kv``, ...), or a library module; a chain whose owner
  is none of these (an event tag ``run.created``, a metric ``fire.lateness``, an endpoint
  ``replica.status``) must be spelled in a string literal of the code;
- a bare ``CONSTANT`` or ``ClassName`` must be defined somewhere in the packages (or among
  the client library's errors and types), an ``ASTRABOX_*`` setting read by the code;
- a bare ``snake_case`` name, or any name called (``start()``, ``apply(enabled=False)``), or
  set (``pause_visibility_seconds = 0.5``, ``sync_interval: always``), must occur in the
  code: defined, assigned, an attribute, an argument or keyword, or a string key; or be a
  field of the client library's stream and bucket configurations.

Backticked text that is none of these (single words, JSON, formulas, subjects, headers) is
not judged. The folder tree of ``docs/architecture.md`` section 0 is checked too: every file
and folder it lists exists, and a folder whose files it lists lists all of its modules.
"""

from __future__ import annotations

import ast
import dataclasses
import fnmatch
import importlib
import importlib.util
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("nats_scheduler", "admin_tui")
# The pages that describe the code to a maintainer.
PAGES = ("architecture.md", "design.md", "failure-modes.md", "operations.md")
# Code whose docstring maps the docs onto it: the stages of one Run (relative to ROOT).
DOCSTRINGS = ("nats_scheduler/runtime/__init__.py",)
# Where a bare file name the docs give may live (besides the packages).
FILE_ROOTS = ("", "docs", "tests", "tests/faults", "tests/harness", "bench", "cluster")
_CODE = re.compile(r"`([^`\n]+)`")
_PATH = re.compile(r"^(?P<path>[\w./-]+\.(?:py|md|tcss|conf)|[\w-]+(?:/[\w.-]+)*/)"
                   r"(?:::(?P<test>[\w.*]+))?(?:\s.*)?$")
_MODULE_MEMBER = re.compile(r"^(?P<path>\w+(?:/\w+)+)\.(?P<member>[A-Za-z_]\w*)(?:\(\))?$")
_ARGS = re.compile(r"\([^()]*\)")
_CHAIN = re.compile(r"^[A-Za-z_]\w*(?:\(\))?(?:\.[A-Za-z_]\w*(?:\(\))?)+$")
_CONSTANT = re.compile(r"^[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+$")
_CLASS = re.compile(r"^[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+$|^[A-Z][a-z]{3,}$")
_SETTING = re.compile(r"^ASTRABOX_[A-Z_]+$")
_IDENTIFIER = re.compile(r"^(?P<name>[a-z_][a-z0-9_]*)(?P<rest>\(.*\)|\s*[:=]\s*\S.*)?$")
_WORD = re.compile(r"^[A-Za-z_]\w*$")
_CAPITALS = re.compile(r"^[A-Z][A-Z0-9]{2,}$")
_HEADER = re.compile(r"^(?P<header>Nats-[A-Za-z-]+)(?::\s.*)?$")
_COMMAND = re.compile(r"^nats-scheduler (?P<command>[a-z][a-z-]*)(?:\s.*)?$")
# Words in CamelCase or capitals that name something outside this code base.
_FOREIGN = {"JetStream", "DataTable", "Pilot", "OpenTelemetry", "Textual", "PostgreSQL",
            "SQLite", "MongoDB", "AstraBox", "DBOS", "Quartz", "TimeBroker", "Kubernetes",
            "CronJob", "Temporal", "Jepsen", "NATS", "SIGSTOP", "SIGCONT", "SIGKILL",
            "SIGTERM", "SIGINT", "KV_P_LEASES", "KV_P_REPLICAS", "P_RUNS", "P_SCHEDULES",
            "P_LEASES", "P_REPLICAS", "P_RUNINDEX", "P_CHECKPOINTS", "P_OUTAGES", "RUN_NOW",
            "NTP", "Ctrl",
            "None", "True", "False", "Enter", "Escape", "Home", "End", "PgUp", "PgDn", "Tab",
            "Space", "ASTRABOX_SCHEDULER_PROVIDER", "PATH"}
# Server headers the pages name that neither this code nor the client spells.
_FOREIGN_HEADERS = {"Nats-Expected-Last-Subject-Sequence-Subject"}
# The client library's errors and types, which the design pages name as they handle them.
_CLIENT_MODULES = ("nats.errors", "nats.js.errors", "nats.js.api", "nats.js.kv")
# The client's configurations, whose fields the pages name (``allow_msg_ttl``, ``max_age``).
_CLIENT_CONFIGS = (("nats.js.api", "StreamConfig"), ("nats.js.api", "KeyValueConfig"),
                   ("nats.js.api", "ConsumerConfig"))
# Objects the pages name by the variable the code gives them: the classes they are.
OBJECTS: dict[str, tuple[str, ...]] = {
    "provider": ("NatsSchedulerProvider",), "handler": ("RunHandler",),
    "runtime": ("Runtime",), "run": ("RunRecord",), "schedule": ("ScheduleRecord",),
}
# Objects of the client library, by the variable the code gives them.
CLIENT_OBJECTS = {"kv": ("nats.js.kv", "KeyValue"), "js": ("nats.js", "JetStreamContext"),
                  "nc": ("nats.aio.client", "Client")}
# Names of other libraries' APIs the pages name bare (croniter's, compared in design.md).
_FOREIGN_IDENTIFIERS = {"second_at_beginning"}


@dataclass
class CodeIndex:
    """What the packages define, read from their syntax trees."""

    modules: dict[str, list[Path]] = field(default_factory=dict)  # short name -> files
    top_level: dict[Path, set[str]] = field(default_factory=dict)
    classes: dict[str, set[str]] = field(default_factory=dict)  # class -> own members
    bases: dict[str, set[str]] = field(default_factory=dict)  # class -> base class names
    anywhere: set[str] = field(default_factory=set)  # every assigned or defined name
    identifiers: set[str] = field(default_factory=set)  # every name the code spells
    literals: set[str] = field(default_factory=set)  # string literals without whitespace
    test_spellings: set[str] = field(default_factory=set)  # names and words of tests/

    def add(self, path: Path) -> None:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        self.modules.setdefault(path.stem, []).append(path)
        names: set[str] = set()
        for node in tree.body:
            names |= _defined(node)
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                self._add_class(node)
        self.top_level[path] = names
        self.anywhere |= names
        self._add_spellings(tree)

    def _add_class(self, node: ast.ClassDef) -> None:
        members = self.classes.setdefault(node.name, set())
        for child in ast.walk(node):
            members |= _defined(child)
            if isinstance(child, ast.Attribute) and isinstance(child.ctx, ast.Store):
                members.add(child.attr)
        self.bases.setdefault(node.name, set()).update(
            base.id if isinstance(base, ast.Name) else base.attr
            for base in node.bases if isinstance(base, ast.Name | ast.Attribute))
        self.anywhere |= members | {node.name}

    def add_test(self, path: Path) -> None:
        """A test module's names and words: what a fault test calls its handlers (``deaf``)."""
        spelled = CodeIndex()
        spelled._add_spellings(ast.parse(path.read_text(encoding="utf-8")))
        self.test_spellings |= spelled.identifiers | spelled.literals

    def _add_spellings(self, tree: ast.Module) -> None:
        docstrings = {id(node.value) for node in ast.walk(tree)
                      if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Name):
                self.identifiers.add(node.id)
            elif isinstance(node, ast.Attribute):
                self.identifiers.add(node.attr)
            elif isinstance(node, ast.arg | ast.keyword) and node.arg:
                self.identifiers.add(node.arg)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                self.identifiers.add(node.name)
            elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
                  and id(node) not in docstrings and not re.search(r"\s", node.value)):
                self.literals.add(node.value)
                if _WORD.match(node.value):
                    self.identifiers.add(node.value)

    def members(self, cls: str, seen: frozenset[str] = frozenset()) -> set[str]:
        """A class's members, its bases' included (bases defined in the packages)."""
        found = set(self.classes.get(cls, set()))
        for base in self.bases.get(cls, set()) - seen - {cls}:
            found |= self.members(base, seen | {cls})
        return found

    def module_files(self, relative: str) -> list[Path]:
        """The package files a path like ``core/schedulecore`` names."""
        return [p for p in (ROOT / f"{relative}.py", ROOT / "nats_scheduler" / f"{relative}.py")
                if p in self.top_level]


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
    for path in sorted((ROOT / "tests").rglob("*.py")):
        if path != Path(__file__).resolve():  # its made-up names must stay unknown
            index.add_test(path)
    return index


def _references(page: Path) -> Iterator[tuple[int, str]]:
    return _references_in(page.read_text(encoding="utf-8"))


def _references_in(text: str) -> Iterator[tuple[int, str]]:
    for number, line in enumerate(text.splitlines(), 1):
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


def _check_file_name(index: CodeIndex, name: str) -> str | None:
    if Path(name).stem in index.modules and name.endswith(".py"):
        return None
    if any((ROOT / folder / name).is_file() for folder in FILE_ROOTS):
        return None
    if any(any((ROOT / package).rglob(name)) for package in PACKAGES):
        return None
    return f"no file named {name}"


def _check_module_member(index: CodeIndex, path: str, member: str) -> str | None:
    files = index.module_files(path)
    if not files:
        return f"no module {path}.py"
    if not any(member in index.top_level[p] for p in files):
        return f"module {path}.py has no top-level {member}"
    return None


def _client_class(module: str, name: str) -> type:
    return getattr(importlib.import_module(module), name)  # type: ignore[no-any-return]


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ModuleNotFoundError, ValueError):  # a parent is not a package
        return False


def _library_resolves(links: list[str]) -> bool:
    """Whether ``a.b.c`` names something in an installed library (``time.monotonic``,
    ``nats.micro``, ``nats.js.api.Header.EXPECTED_LAST_SUBJECT_SEQUENCE``)."""
    depth = 1
    while depth < len(links) and _importable(".".join(links[:depth + 1])):
        depth += 1
    obj: object = importlib.import_module(".".join(links[:depth]))
    for link in links[depth:]:
        if not hasattr(obj, link):
            return False
        obj = getattr(obj, link)
    return True


def _client_object(name: str) -> object | None:
    """A class or value of the client library by its bare name (``DeliverPolicy``)."""
    for module in _CLIENT_MODULES:
        found = getattr(importlib.import_module(module), name, None)
        if found is not None:
            return found
    return None


def _check_chain(index: CodeIndex, text: str) -> str | None:
    links = [link.removesuffix("()") for link in _ARGS.sub("()", text).split(".")]
    owner, member, rest = links[0], links[1], links[2:]
    if owner in index.classes:
        if member not in index.members(owner):
            return f"class {owner} has no member {member}"
    elif owner in OBJECTS:
        module_level = any(member in index.top_level[p] for p in index.modules.get(owner, []))
        if not module_level and not any(member in index.members(c) for c in OBJECTS[owner]):
            if _spelled(index, text):
                return None  # an event tag (``run.created``)
            return f"{owner} ({', '.join(OBJECTS[owner])}) has no member {member}"
    elif owner in index.modules:
        if not any(member in index.top_level[p] for p in index.modules[owner]):
            if _spelled(index, text):
                return None  # a metric (``schedules.stale_copies``)
            return f"module {owner} has no top-level {member}"
    elif owner in CLIENT_OBJECTS:
        if not hasattr(_client_class(*CLIENT_OBJECTS[owner]), member):
            return f"{owner} ({CLIENT_OBJECTS[owner][1]}) has no member {member}"
    elif _importable(owner):
        return None if _library_resolves(links) else f"{text}: not in the library {owner}"
    elif (client := _client_object(owner)) is not None:
        if not hasattr(client, member):
            return f"{owner} (the client's) has no member {member}"
    elif _spelled(index, text):
        return None  # an event tag, a metric, an endpoint, spelled by the code
    else:
        return f"nothing named {text}: neither code nor a string the code spells"
    everything = index.anywhere | index.identifiers
    unknown = [link for link in rest if link not in everything]
    if unknown:
        return f"{text}: nothing named {unknown[0]}"
    return None


def _spelled(index: CodeIndex, text: str) -> bool:
    """Whether a dotted name is (part of) a string the code spells: a tag, a metric."""
    return text in index.literals or any(
        literal.endswith(f".{text}") or f".{text}." in literal for literal in index.literals)


def _client_names() -> set[str]:
    """The fields of the client's configurations and the members of its objects."""
    names = {f.name for module, name in _CLIENT_CONFIGS
             for f in dataclasses.fields(_client_class(module, name))}
    for module, name in CLIENT_OBJECTS.values():
        names |= set(dir(_client_class(module, name)))
    return names


def _check_identifier(index: CodeIndex, name: str, rest: str | None) -> str | None:
    """A ``snake_case`` name, called or set or alone, must be spelled by the code (or the
    client); a plain word only when it stands alone or is called."""
    called = (rest or "").startswith("(")
    if "_" not in name and not called:
        if rest:
            return None  # ``word: value``, ``word = value``: output or a formula
        # a plain word (``enqueue``, ``poison``, a fault test's ``deaf``): spelled by the
        # code or its tests; shorter ones are formulas' variables (``r``, ``ts``)
        if len(name) < 4 or name in index.identifiers | index.literals | index.test_spellings:
            return None
        return f"neither the code nor its tests spell {name}"
    if (name in index.identifiers or name in index.anywhere or name in _client_names()
            or name in _FOREIGN_IDENTIFIERS):
        return None
    return f"nothing in the code is named {name}"


def problem(index: CodeIndex, settings: str, text: str) -> str | None:
    """What is wrong with one backticked reference, or None when it holds or is not code."""
    if match := _PATH.match(text):
        path = match.group("path")
        if path.startswith(("P.", "$")):
            return None
        if "/" in path:
            return _check_path(path, match.group("test"))
        return _check_file_name(index, path)
    if match := _MODULE_MEMBER.match(text):
        return _check_module_member(index, match.group("path"), match.group("member"))
    if text.startswith("P."):
        return None  # a subject under the prefix (``P.checkpoint.head``): names.py's layout
    if _CHAIN.match(_ARGS.sub("()", text)):
        return _check_chain(index, text)
    if text in _FOREIGN:
        return None
    if match := _HEADER.match(text):
        header = match.group("header")
        known = (header in index.literals or header in _FOREIGN_HEADERS
                 or header in {h.value for h in _client_class("nats.js.api", "Header")})
        return None if known else f"no header {header} in the code or the client"
    if match := _COMMAND.match(text):
        command = match.group("command")
        return None if command in index.literals else f"no command nats-scheduler {command}"
    if _SETTING.match(text):
        return None if text in settings else f"no setting {text}"
    if _CONSTANT.match(text) or _CLASS.match(text) or _CAPITALS.match(text):
        known = text in index.anywhere or text in index.literals or _in_client(text)
        return None if known else f"nothing named {text}"
    if match := _IDENTIFIER.match(text):
        return _check_identifier(index, match.group("name"), match.group("rest"))
    return None


def _in_client(name: str) -> bool:
    return any(hasattr(importlib.import_module(m), name) for m in _CLIENT_MODULES)


# ---------------------------------------------------------------------- the folder tree


def tree_entries(text: str) -> list[str]:
    """The paths the first fenced block of section 0 lists, relative to the repository.

    A line names a file (``x.py``) or a folder (``x/``) as its first word; its indentation
    says which folder above it holds it. Other lines continue a description."""
    section = text.split("\n## 0.", 1)[1]
    block = section.split("```", 2)[1]
    entries: list[str] = []
    stack: list[tuple[int, str]] = []
    for line in block.splitlines()[1:]:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        word = line.split()[0]
        if not (word.endswith("/") or word.endswith(".py")):
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        name = word.rstrip("/")
        path = f"{stack[-1][1]}/{name}" if stack else name
        entries.append(path + ("/" if word.endswith("/") else ""))
        if word.endswith("/"):
            stack.append((indent, path))
    return entries


def tree_problems(entries: list[str]) -> list[str]:
    """Entries that do not exist, and modules missing from a folder whose files are listed."""
    wrong = [f"no {entry}" for entry in entries if not (ROOT / entry).exists()]
    listed = {entry for entry in entries if entry.endswith(".py")}
    for folder in {str(Path(entry).parent) for entry in listed}:
        for module in sorted((ROOT / folder).glob("*.py")):
            relative = module.relative_to(ROOT).as_posix()
            if module.name not in ("__init__.py", "__main__.py") and relative not in listed:
                wrong.append(f"{relative} is not in the tree")
    return wrong


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


@pytest.mark.parametrize("source", DOCSTRINGS)
def test_every_name_the_run_stages_give_exists(source: str, code_index: CodeIndex) -> None:
    path = ROOT / source
    docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
    assert docstring and "dispatched" in docstring
    settings = _sources()
    wrong = [f"{source} docstring line {number}: `{text}`: {why}"
             for number, text in _references_in(docstring.replace("``", "`"))
             if (why := problem(code_index, settings, text))]
    assert not wrong, "\n".join(wrong)


def test_the_architecture_tree_lists_what_exists() -> None:
    entries = tree_entries((ROOT / "docs" / "architecture.md").read_text(encoding="utf-8"))
    assert "nats_scheduler/runtime/firing.py" in entries and "admin_tui/" in entries
    assert not tree_problems(entries), "\n".join(tree_problems(entries))


def test_the_checker_catches_a_name_that_does_not_exist(code_index: CodeIndex) -> None:
    settings = _sources()
    made_up = [
        "runtime/nowhere.py", "nowhere.py", "Firing.no_such_method", "Dispatcher._hold_it",
        "names.no_such_name", "runcore.no_such_command", "core/schedulecore.no_such_plan",
        "core/nowhere.plan", "ServerClock.estimate().no_such_width",
        "provider.runtime.no_such_followers", "provider.fire_sometime", "handler.no_such_call",
        "kv.no_such_call(last=revision)", "time.no_such_clock", "run.no_such_tag",
        "fire.no_such_metric", "NO_SUCH_CONSTANT", "NoSuchClass", "ASTRABOX_NATS_NO_SUCH",
        "tests/test_multiprocess.py::test_nothing_*", "fire_sometime", "fire_sometime()",
        "frobnicate()", "no_such_setting = 0.5", "no_such_option: always", "frobnicate",
        "NOSUCH", "Nats-No-Such-Header", "nats-scheduler frobnicate --json",
    ]
    missed = [text for text in made_up if problem(code_index, settings, text) is None]
    assert not missed, f"accepted made-up names: {missed}"
    # and accepts what does exist
    real = [
        "runtime/firing.py", "ticker.py", "Firing.fire_many", "Dispatcher._attempts",
        "Dispatcher._refused_after_pause", "names.token", "runcore.claim",
        "core/schedulecore.plan_reconcile", "ServerClock.estimate().width",
        "provider.runtime.followers", "provider.fire_due", "handler.start_session",
        "kv.create", "time.monotonic", "nats.micro", "run.created", "run.attempts",
        "fire.lateness", "replica.status", "FIRE_READ_MAX_AGE", "Held", "LeaseValue",
        "ASTRABOX_NATS_PREFIX", "tests/test_multiprocess.py::test_holder_killed_*",
        "fire_due", "start()", "apply(enabled=False)", "pause_visibility_seconds = 0.5",
        "sync_interval: always", "allow_msg_ttl", "max_msgs_per_subject: -1", "no_hdr",
        "enqueue", "deaf", "FREE", "SCHED", "Nats-TTL", "Nats-Expected-Last-Subject-Sequence: 0",
        "nats-scheduler doctor", "nats-scheduler check --json",
    ]
    refused = {text: problem(code_index, settings, text) for text in real}
    assert not any(refused.values()), f"refused real names: {refused}"


def test_the_tree_check_catches_a_missing_and_an_unlisted_module() -> None:
    page = ("# t\n\n## 0. Code\n\n```\nnats_scheduler/\n  names.py    names\n"
            "  runtime/    loops\n    firing.py    the firing protocol\n"
            "                 a continued description.py line\n    nowhere.py   made up\n"
            "admin_tui/   the console\n```\n")
    entries = tree_entries(page)
    assert entries == ["nats_scheduler/", "nats_scheduler/names.py", "nats_scheduler/runtime/",
                       "nats_scheduler/runtime/firing.py", "nats_scheduler/runtime/nowhere.py",
                       "admin_tui/"]
    found = tree_problems(entries)
    assert "no nats_scheduler/runtime/nowhere.py" in found
    assert "nats_scheduler/runtime/ticker.py is not in the tree" in found
    assert "nats_scheduler/seam.py is not in the tree" in found
