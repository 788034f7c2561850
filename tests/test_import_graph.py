"""The import graph of ``nats_scheduler`` and ``admin_tui`` points down the layers, has no
cycle, and no module grows past a size a reader can hold.

The graph is read from the source with ``ast`` (nothing is imported): every ``import`` and
``from ... import``, at the top of a module, under ``if TYPE_CHECKING:`` and inside
functions alike. A type-only or deferred import is still a dependency a reader must follow,
and a cycle hidden behind ``TYPE_CHECKING`` or a function-level import is still a cycle.
``from package import name`` is an edge to ``package.name`` when that is a module, else to
the package (its ``__init__``). Importing ``a.b.c`` is not counted as importing ``a`` and
``a.b``: Python runs those ``__init__`` files, but they hold no dependencies of their own
(``nats_scheduler/__init__.py`` defers to ``provider`` on first attribute access; an import
of the package itself from inside would be an edge to ``nats_scheduler``, the top layer).

The units of the package graph are the subpackages of ``nats_scheduler`` (``core``,
``jetstream``, ``projections``, ``runtime``, ``admin``, ``cli``, ``devhost``, ``natsserver``,
``testing``), each top-level module of ``nats_scheduler`` on its own (``names``, ``seam``,
``settings``, ``clock``, ``tasks`` sit at the bottom beside ``core``, ``provider`` at the top:
as one unit they would make every layer look circular), and ``admin_tui`` as a whole.

Beyond having no cycle, every import points down :data:`LAYERS`: the pure core and the
seam at the bottom, then the adapters, the projections, the two services of a process (the
loops and the operator surfaces), the hosts, and the command line on top. Above the pure
layer the units of one layer know nothing of each other (the admin service reaches the
provider's loops only through the port it defines, ``admin/host.py``, and the dev host is
handed the console it shows); within the pure layer the order is the cycle tests' to judge.

``core`` is the functional core: its modules import nothing of ``nats_scheduler`` outside
``core`` but ``seam``. The seam is pure data: the contract's value types (frozen msgspec
Structs), enums, errors and Protocols, importing nothing of the package, nats-py or any
adapter; core's records extend its types. ``settings`` is not allowed although it is data
too: its validation looks at files (credentials, certificates), and core needs none of it
(the values it needs are passed in).

Only the adapters speak nats-py: every ``import nats`` / ``from nats...`` of the packages is
in ``jetstream/`` or in :data:`NATS_PY_CONNECTION_MODULES`, the connection module the command
line and the console share (``admin/client.py``: it sends the admin requests and owns the
connection). Elsewhere the server is reached through ``jetstream/``'s adapters, named in the
scheduler's words, so a change of client library stays in one folder.

Run ``python tests/test_import_graph.py`` to print the whole offending list at once.
"""

from __future__ import annotations

import ast
import functools
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("nats_scheduler", "admin_tui")
SUBPACKAGES = ("core", "ports", "jetstream", "memory", "projections", "runtime", "admin",
               "cli", "devhost", "natsserver", "testing", "simulation")
# What core may import from outside itself: pure data (see the module docstring).
CORE_MAY_IMPORT = {"nats_scheduler.seam"}
LAYERS: tuple[tuple[str, frozenset[str]], ...] = tuple(
    (name, frozenset(units)) for name, units in (
        ("pure: the seam, settings, names, time, the functional core, the store's ports, "
         "the release",
         {"nats_scheduler.seam", "nats_scheduler.settings", "nats_scheduler.names",
          "nats_scheduler.clock", "nats_scheduler.tasks", "nats_scheduler.core",
          "nats_scheduler.ports", "nats_scheduler.release"}),
        ("adapters: the server, the in-memory store, the nats-server process, the terminal, "
         "the test kit",
         {"nats_scheduler.jetstream", "nats_scheduler.memory", "nats_scheduler.natsserver",
          "nats_scheduler.command_line", "nats_scheduler.testing"}),
        ("projections: in-memory state from the events, and the reads over it",
         {"nats_scheduler.projections"}),
        ("services: the running loops, the operator surfaces",
         {"nats_scheduler.runtime", "nats_scheduler.admin"}),
        ("hosts: the provider, the dev host, the console",
         {"nats_scheduler.provider", "nats_scheduler.devhost", "admin_tui"}),
        ("entry points: the command line, the simulation, the package's lazy exports",
         {"nats_scheduler.cli", "nats_scheduler.simulation", "nats_scheduler"}),
    ))
"""The package-graph units from the bottom up. An import points to a layer below, never up,
and never sideways but in the first (pure) layer."""
SIDEWAYS_LAYERS = frozenset({0})
"""The layers whose units may import one another (``clock`` and ``names`` use ``core``,
``core`` and ``settings`` the seam)."""
NATS_PY_CONNECTION_MODULES = frozenset({"nats_scheduler.admin.client"})
"""The modules outside ``jetstream/`` allowed to import nats-py (see the module docstring)."""
MAX_LINES = 450
# The two modules allowed past the limit: the calendar is one algorithm (parse, expand, step
# over DST) whose parts share private tables; the conformance suite is one test class.
LONG_MODULES = {"nats_scheduler/core/calendar.py", "nats_scheduler/testing/conformance.py"}


@dataclass(frozen=True)
class Edge:
    """One import statement: ``source`` imports ``target`` at ``line``."""

    source: str
    target: str
    line: int

    def __str__(self) -> str:
        return f"{self.source} -> {self.target}  ({module_path(self.source)}:{self.line})"


@functools.cache
def module_files() -> dict[str, Path]:
    """Every module of the packages by dotted name (a package by its own name)."""
    modules: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def module_path(name: str) -> str:
    path = module_files().get(name)
    return str(path.relative_to(ROOT)) if path else name


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def _resolve(module: str, is_package: bool, level: int, target: str | None) -> str:
    """The absolute name of ``from <level dots><target> import ...`` written in ``module``."""
    if level == 0:
        return target or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, target] if target else base)


def imports_of(module: str, path: Path, known: set[str]) -> Iterator[Edge]:
    """The edges from the module in ``path`` to other modules of the packages."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return imports_in(tree, module, _is_package(path), known)


def imports_in(tree: ast.Module, module: str, is_package: bool, known: set[str]
               ) -> Iterator[Edge]:
    """The edges from ``module`` to other modules of the packages, wherever written: every
    node of the tree is visited, so function bodies and ``if TYPE_CHECKING:`` count."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in PACKAGES:
                    yield Edge(module, _known_prefix(alias.name, known), node.lineno)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, is_package, node.level, node.module)
            if base.split(".")[0] not in PACKAGES:
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                target = sub if sub in known else _known_prefix(base, known)
                yield Edge(module, target, node.lineno)


def _known_prefix(name: str, known: set[str]) -> str:
    """The longest prefix of ``name`` that is a module (``import a.b.c`` of a missing ``c``)."""
    parts = name.split(".")
    while parts and ".".join(parts) not in known:
        parts.pop()
    return ".".join(parts) or name


@functools.cache
def import_edges() -> list[Edge]:
    """Every import edge between modules of the packages, self-imports left out."""
    files = module_files()
    known = set(files)
    edges: set[Edge] = set()
    for module, path in files.items():
        edges.update(e for e in imports_of(module, path, known) if e.target != module)
    return sorted(edges, key=lambda e: (e.source, e.target, e.line))


def unit_of(module: str) -> str:
    """The package-graph unit of a module (see the module docstring)."""
    parts = module.split(".")
    if parts[0] == "admin_tui":
        return "admin_tui"
    if len(parts) >= 2 and parts[1] in SUBPACKAGES:
        return ".".join(parts[:2])
    return module  # a top-level module of nats_scheduler, or nats_scheduler itself


def cycles(nodes: Iterable[str], edges: Iterable[tuple[str, str]]) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan), each sorted."""
    graph: dict[str, set[str]] = {n: set() for n in nodes}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def _describe(components: list[list[str]], edges: list[Edge], unit: bool) -> str:
    """Each cycle with the import statements that close it."""
    lines: list[str] = []
    for component in components:
        members = set(component)
        lines.append("cycle: " + ", ".join(component))
        for edge in edges:
            a, b = (unit_of(edge.source), unit_of(edge.target)) if unit else (
                edge.source, edge.target)
            if a in members and b in members and a != b:
                lines.append(f"    {edge}")
    return "\n".join(lines)


def module_cycles_report() -> str:
    edges = import_edges()
    found = cycles(module_files(), ((e.source, e.target) for e in edges))
    return _describe(found, edges, unit=False)


def package_cycles_report() -> str:
    edges = import_edges()
    units = {unit_of(m) for m in module_files()}
    pairs = {(unit_of(e.source), unit_of(e.target)) for e in edges}
    found = cycles(units, ((a, b) for a, b in pairs if a != b))
    return _describe(found, edges, unit=True)


def core_escapes() -> list[Edge]:
    """Imports from ``nats_scheduler.core`` to anything of the packages outside it."""
    return [e for e in import_edges()
            if unit_of(e.source) == "nats_scheduler.core"
            and unit_of(e.target) != "nats_scheduler.core"
            and e.target not in CORE_MAY_IMPORT]


def layer_of(unit: str) -> int | None:
    for index, (_, units) in enumerate(LAYERS):
        if unit in units:
            return index
    return None


def unplaced_units() -> list[str]:
    """Units of the package graph that :data:`LAYERS` does not place (a new package or
    top-level module must be given its layer)."""
    return sorted({unit_of(m) for m in module_files()} - {u for _, us in LAYERS for u in us})


def layer_violations() -> list[str]:
    """Every import from a unit up to a higher layer, or sideways to another unit of its
    own layer (but in :data:`SIDEWAYS_LAYERS`), with the layers named."""
    found: list[str] = []
    for edge in import_edges():
        a, b = unit_of(edge.source), unit_of(edge.target)
        source, target = layer_of(a), layer_of(b)
        if source is None or target is None or a == b:
            continue
        if target > source:
            found.append(f"{edge}\n    up from {LAYERS[source][0]!r} to {LAYERS[target][0]!r}")
        elif target == source and source not in SIDEWAYS_LAYERS:
            found.append(f"{edge}\n    sideways within {LAYERS[source][0]!r}")
    return found


def nats_py_imports_in(tree: ast.Module) -> Iterator[tuple[str, int]]:
    """Every import of nats-py in ``tree`` (the module named and its line), wherever written."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "nats":
                    yield alias.name, node.lineno
        elif (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
              and node.module.split(".")[0] == "nats"):
            yield node.module, node.lineno


def nats_py_outside_adapters() -> list[str]:
    """The imports of nats-py outside ``jetstream/`` and the allowed connection modules."""
    found: list[str] = []
    for module, path in module_files().items():
        if unit_of(module) == "nats_scheduler.jetstream" or module in NATS_PY_CONNECTION_MODULES:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        found += [f"{module_path(module)}:{line}: imports {name}"
                  for name, line in nats_py_imports_in(tree)]
    return sorted(found)


def long_modules() -> list[str]:
    """The modules of ``nats_scheduler`` over the line limit, but the two allowed."""
    found: list[str] = []
    for path in sorted((ROOT / "nats_scheduler").rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        count = len(path.read_text(encoding="utf-8").splitlines())
        if count > MAX_LINES and rel not in LONG_MODULES:
            found.append(f"{rel}: {count} lines (limit {MAX_LINES})")
    return found


def test_the_graph_sees_every_kind_of_import() -> None:
    """The reader is not blind: it finds a relative import, one under ``TYPE_CHECKING`` and
    one inside a function, and a ``from package import module`` names the module (a canary:
    the other tests pass vacuously if the walker breaks)."""
    sample = ast.parse(
        "from __future__ import annotations\n"
        "from typing import TYPE_CHECKING\n"
        "from .clock import Clock\n"
        "from .core import events\n"
        "if TYPE_CHECKING:\n"
        "    from nats_scheduler.seam import Run\n"
        "def f() -> None:\n"
        "    import nats_scheduler.names\n"
    )
    edges = list(imports_in(sample, "nats_scheduler.sample", False, set(module_files())))
    assert {e.target for e in edges} == {"nats_scheduler.clock", "nats_scheduler.core.events",
                                         "nats_scheduler.seam", "nats_scheduler.names"}
    assert len(import_edges()) > 100


def test_no_cycle_among_modules() -> None:
    report = module_cycles_report()
    assert not report, "import cycles among modules:\n" + report


def test_no_cycle_among_packages() -> None:
    report = package_cycles_report()
    assert not report, "import cycles among packages:\n" + report


def test_every_unit_has_a_layer() -> None:
    unplaced = unplaced_units()
    assert not unplaced, "units with no layer in LAYERS:\n" + "\n".join(unplaced)


def test_imports_point_down_the_layers() -> None:
    found = layer_violations()
    assert not found, "imports pointing up or sideways:\n" + "\n".join(found)


def test_core_imports_nothing_outside_core() -> None:
    escapes = core_escapes()
    assert not escapes, "core imports outside core:\n" + "\n".join(map(str, escapes))


def test_nats_py_only_in_the_adapters() -> None:
    """nats-py is imported by ``jetstream/`` and the connection module only; the reader
    sees every form (a canary: ``nats_scheduler`` is not nats-py)."""
    sample = ast.parse(
        "import nats\n"
        "import nats_scheduler.names\n"
        "from nats.js import api\n"
        "from . import nats\n"
        "def f() -> None:\n"
        "    import nats.errors\n"
    )
    assert sorted(nats_py_imports_in(sample)) == [("nats", 1), ("nats.errors", 6),
                                                  ("nats.js", 3)]
    found = nats_py_outside_adapters()
    assert not found, "nats-py imported outside jetstream/:\n" + "\n".join(found)


def test_no_module_over_the_line_limit() -> None:
    found = long_modules()
    assert not found, "modules over the limit:\n" + "\n".join(found)


def main() -> int:
    sections = [("module cycles", module_cycles_report()),
                ("package cycles", package_cycles_report()),
                ("units without a layer", "\n".join(unplaced_units())),
                ("imports pointing up or sideways", "\n".join(layer_violations())),
                ("core escapes", "\n".join(map(str, core_escapes()))),
                ("nats-py outside the adapters", "\n".join(nats_py_outside_adapters())),
                ("long modules", "\n".join(long_modules()))]
    for title, text in sections:
        print(f"== {title}\n{text or '(none)'}")
    return 1 if any(text for _, text in sections) else 0


if __name__ == "__main__":
    sys.exit(main())
