"""Architecture rules that a test can hold us to.

Theory of operation
-------------------
Every rule is a function that takes a root folder (the one holding ``umcore/`` and ``daemons/``)
and returns its offenders as printable lines; an empty list means the rule holds.  The tests run
each rule twice: on the real tree, where it must find nothing, and on a small fixture tree built
under ``tmp_path`` with the offence put in on purpose, where it must find exactly that, so no rule
can pass by being unable to fail.  Imports are read from the AST, never by importing the code.

The ranks of ``umcore``, lowest first (a package imports only from its own rank or below; see
:data:`RANKS`).  What each imports today is in brackets.

0. ``errors``, ``events`` and ``umcore/__init__.py``: one exception hierarchy, the one base of
   the cores' events, and the version, which every layer may use.
1. ``wire`` and ``config``: the codecs and the options [wire: errors; config: errors].  Neither
   needs the other today; they share a rank so that ``config`` may name wire constants.
   ``wire`` is held tighter still: nothing of ours but ``errors``.
2. The sans-IO cores: ``resolver``, ``transport`` and ``features`` (the client side: a context's
   topic resolution, transport sessions, late join / OTR / request-response), and the daemon
   cores ``lbmrd`` and ``srs`` (and ``store`` for umestored, ``persist`` for persistent sources
   and receivers, which speaks the store's compositions; ``dro`` for tnwgd) [each: wire,
   errors].  Peers, none above another; the package-cycle rule keeps any import between them
   one-way.  No I/O: no asyncio, sockets, selectors, threads, clocks or subprocesses.
3. ``aio``: the asyncio adapters that feed the cores from sockets and timers [transport,
   features, srs, wire, errors].  With ``daemon``, the only rank of ``umcore`` with sockets.
4. ``engine``: composes the adapters and the client cores into running contexts; the API, the
   store and the DRO stand on it [aio, cores, config, errors].
5. ``monitor``: statistics model, lbmmon framing, protobuf, automatic monitoring [aio, config,
   errors].  It samples an engine's public counters and creates its monitoring context with the
   monitored context's own ``create``: it needs nothing above the engine.
6. ``api``: the public facade over the engine [engine, monitor, features, config, errors].
7. ``daemon``: the runtime the daemons share: CLI, logs, pid file, lifecycle, metrics, web pages,
   statistics publisher, service fronts [aio, errors].  Above ``monitor`` and ``api`` because
   its statistics publisher sends ``monitor``'s records over a context.
8. ``tools``: the console programs [api, monitor, config, errors].  ``spark``, the Spark
   pipeline and the ``umestore`` data source, shares the rank [monitor, store, wire, errors].

Sockets are allowed only in ``aio``, ``daemon`` and the daemon shells under ``daemons/``.
``tools`` use the API and open no socket of their own (none does today), so they are held to it.

The cores take input with ``receive_*`` methods; asyncio's callback names (``data_received``,
``datagram_received``, ``connection_made``...) belong to adapters.  Four more rules: no import cycle between umcore's modules (module-level imports: the ones under
``if TYPE_CHECKING:`` or inside a function do not run at import time; ``from umcore.x import y``
where ``y`` is a submodule is an edge to ``y``), and none either when the imports under ``if
TYPE_CHECKING:`` and inside functions count (:func:`design_cycles`); no cycle between umcore's
packages, counting the
imports inside functions too (a lazy import dodges the module cycle, not the dependency); no
module reads another module's underscore names (:func:`friend_access`, a heuristic explained
there); and no ``type: ignore[attr-defined]`` in ``umcore``.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TOP = "umcore"

# Rank of each package of umcore ("" is umcore/__init__.py; MODULES are top-level modules).
# Packages that do not exist yet would be listed (in NOT_YET) so they land on the right rank
# the day they appear; SANS_IO below only names packages that must exist.
RANKS: dict[str, int] = {
    "": 0,
    "errors": 0,
    "events": 0,
    "wire": 1,
    "config": 1,
    "resolver": 2,
    "transport": 2,
    "features": 2,
    "lbmrd": 2,
    "srs": 2,
    "store": 2,
    "persist": 2,
    "dro": 2,
    "aio": 3,
    "engine": 4,
    "monitor": 5,
    "api": 6,
    "daemon": 7,
    "tools": 8,
    "spark": 8,  # the Spark pipeline (issue 21): reads monitor, store and wire like a tool
}
# The ranked names that are modules of umcore's top level, not packages.
MODULES = ("errors", "events")
# Ranked packages not written yet: the only ones allowed to be missing.
NOT_YET: frozenset[str] = frozenset()
# The sans-IO packages, from the table: every one must exist (a rename must update RANKS, not
# silently exempt the new name), and each is checked for I/O imports.
SANS_IO = [name for name, rank in RANKS.items() if rank == 2 and name not in NOT_YET]
# What a sans-IO core may not import: the loop, the network, the clock, threads, processes.
NO_IO = frozenset({"asyncio", "socket", "selectors", "threading", "time", "subprocess", "uvloop"})
# asyncio's callback names: adapters implement them; a core's inputs are ``receive_*``.
ASYNCIO_CALLBACKS = frozenset(
    {"data_received", "datagram_received", "connection_made", "connection_lost", "eof_received"}
)
# What only adapters and daemon runtimes may import.
SOCKET_MODULES = frozenset({"socket", "socketserver", "ssl"})
# The umcore packages where sockets are allowed (the daemon shells in daemons/ are not checked).
SOCKET_PACKAGES = frozenset({"aio", "daemon"})
# Underscore names that are the public API of the standard library's namedtuples and enums:
# reading them on an object is not friend access.  (A module's, such as ``os._exit``, is not
# either: see :func:`_foreign_modules`.)
STDLIB_UNDERSCORE = frozenset(
    {"_replace", "_asdict", "_fields", "_make", "_field_defaults"}
    | {"_value_", "_name_", "_missing_", "_generate_next_value_", "_ignore_"}
)
# Generated code (protoc's output) is not ours to hold to these rules.
GENERATED = ("umcore/monitor/pb/",)
TYPE_IGNORE_ATTR = re.compile(r"type:\s*ignore\[[^\]]*\battr-defined\b")


# --- reading the tree ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Import:
    """One import statement's target, resolved to a module name where it is one of ours."""

    module: str  # the imported module ("umcore.wire.lbmr"), or the from-module for a name
    names: tuple[str, ...]  # names of a from-import (empty for ``import x``)
    line: int
    in_function: bool  # inside a function body: runs when called, not at import
    type_checking: bool  # under ``if TYPE_CHECKING:``: never runs


def _rel(root: Path, path: Path) -> str:
    return path.relative_to(root).as_posix()


def modules(root: Path, top: str = TOP) -> dict[str, Path]:
    """Every module of package ``top`` under ``root``, by dotted name (a package by its name)."""
    found: dict[str, Path] = {}
    base = root / top
    for path in sorted(base.rglob("*.py")):
        rel = _rel(root, path)
        if rel.startswith(GENERATED):
            continue
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _python_files(root: Path, folders: tuple[str, ...]) -> Iterator[Path]:
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            if not _rel(root, path).startswith(GENERATED):
                yield path


def _module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports(root: Path, path: Path) -> list[Import]:
    """The imports of one file, relative ones resolved, each marked whether it runs at import."""
    tree = ast.parse(path.read_text("utf-8"), str(path))
    name = _module_name(root, path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: list[Import] = []

    def visit(node: ast.AST, in_function: bool, tc: bool) -> None:
        if isinstance(node, ast.Import):
            out.extend(Import(a.name, (), node.lineno, in_function, tc) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            names = tuple(a.name for a in node.names)
            out.append(Import(module, names, node.lineno, in_function, tc))
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                visit(child, in_function, True)
            for child in node.orelse:
                visit(child, in_function, tc)
            return
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            in_function = True
        for child in ast.iter_child_nodes(node):
            visit(child, in_function, tc)

    visit(tree, False, False)
    return out


def _targets(imp: Import, known: dict[str, Path]) -> list[str]:
    """The modules of ours an import loads: ``from p import m`` names the submodule ``p.m``."""
    if imp.module != TOP and not imp.module.startswith(TOP + "."):
        return []
    if not imp.names:
        return [imp.module] if imp.module in known else []
    subs = [f"{imp.module}.{n}" for n in imp.names if f"{imp.module}.{n}" in known]
    rest = [n for n in imp.names if f"{imp.module}.{n}" not in known]
    return subs + ([imp.module] if rest and imp.module in known else [])


def _package(module: str) -> str:
    """``umcore.wire.lbmr`` -> ``wire``; ``umcore.errors`` -> ``errors``; ``umcore`` -> ``""``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def import_graph(
    root: Path, *, in_functions: bool, type_checking: bool = False
) -> dict[str, dict[str, str]]:
    """module -> {imported module of ours -> ``file:line`` of the first such import}; imports
    under ``if TYPE_CHECKING:`` count when ``type_checking``, the ones inside functions when
    ``in_functions``."""
    known = modules(root)
    graph: dict[str, dict[str, str]] = {}
    for name, path in known.items():
        edges = graph.setdefault(name, {})
        for imp in imports(root, path):
            if (imp.type_checking and not type_checking) or (imp.in_function and not in_functions):
                continue
            for target in _targets(imp, known):
                if target != name:
                    edges.setdefault(target, f"{_rel(root, path)}:{imp.line}")
    return graph


# --- the rules ----------------------------------------------------------------------------------


def missing_packages(root: Path, names: list[str]) -> list[str]:
    """Packages the rules name that do not exist (a rule over nothing holds vacuously)."""
    return [
        f"{TOP}/{n}/ does not exist"
        for n in names
        if not (root / TOP / n / "__init__.py").is_file()
    ]


def io_in_cores(root: Path, names: list[str]) -> list[str]:
    """Imports of the loop, sockets, clocks, threads or processes in a sans-IO package."""
    offenders = missing_packages(root, names)
    for name in names:
        for path in _python_files(root, (f"{TOP}/{name}",)):
            for imp in imports(root, path):
                if imp.module.split(".")[0] in NO_IO:
                    offenders.append(f"{_rel(root, path)}:{imp.line}: imports {imp.module}")
    return offenders


def asyncio_names_in_cores(root: Path, names: list[str]) -> list[str]:
    """Methods of a sans-IO core named as asyncio's callbacks (the vocabulary: a core takes
    input with ``receive_*``; ``data_received`` and friends belong to adapters)."""
    offenders = []
    for name in names:
        for path in _python_files(root, (f"{TOP}/{name}",)):
            tree = ast.parse(path.read_text("utf-8"), str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.FunctionDef) and node.name in ASYNCIO_CALLBACKS:
                    offenders.append(f"{_rel(root, path)}:{node.lineno}: def {node.name}")
    return offenders


def sockets_outside_adapters(root: Path) -> list[str]:
    """Socket imports anywhere in umcore but ``aio`` and ``daemon`` (shells in daemons/ may)."""
    offenders = []
    for path in _python_files(root, (TOP,)):
        if _package(_module_name(root, path)) in SOCKET_PACKAGES:
            continue
        for imp in imports(root, path):
            if imp.module.split(".")[0] in SOCKET_MODULES:
                offenders.append(f"{_rel(root, path)}:{imp.line}: imports {imp.module}")
    return offenders


def _components(graph: dict[str, dict[str, str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm, iterative:
    deep import chains would exhaust the recursion limit), each sorted, in sorted order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, {})))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return sorted(components)


def _report_components(graph: dict[str, dict[str, str]], what: str) -> list[str]:
    """One offender per cycle: its members, then every edge inside it with where it is made."""
    offenders = []
    for component in _components(graph):
        members = set(component)
        edges = [
            f"{where}: {a} -> {b}"
            for a in component
            for b, where in sorted(graph[a].items())
            if b in members
        ]
        offenders.append(f"{what} cycle among {', '.join(component)}:\n    " + "\n    ".join(edges))
    return offenders


def cycles(root: Path) -> list[str]:
    """Import cycles among umcore's modules, counting the imports that run at import time."""
    return _report_components(import_graph(root, in_functions=False), "import")


def design_cycles(root: Path) -> list[str]:
    """Cycles among umcore's modules counting every import, also those under ``if
    TYPE_CHECKING:`` and inside functions: such an import dodges the cycle at run time, not in
    the design (a type named in both directions ties the two modules together).  A package's
    ``__init__`` re-exporting its own modules is the one exception."""
    graph = import_graph(root, in_functions=True, type_checking=True)
    for a, edges in graph.items():
        if modules(root)[a].name == "__init__.py":
            for b in [b for b in edges if b.startswith(a + ".")]:
                del edges[b]
    return _report_components(graph, "design")


def package_cycles(root: Path) -> list[str]:
    """Cycles among umcore's packages, counting imports inside functions too: a function-level
    import that dodges a module cycle still ties the two packages together (only the ones under
    ``if TYPE_CHECKING:`` are left out).  This also orders the peers of one rank."""
    graph: dict[str, dict[str, str]] = {}
    for a, edges in import_graph(root, in_functions=True).items():
        for b, where in edges.items():
            pa, pb = _package(a) or TOP, _package(b) or TOP
            if pa != pb:
                graph.setdefault(pa, {}).setdefault(pb, where)
                graph.setdefault(pb, {})
    return _report_components(graph, "package")


def upward_imports(root: Path, ranks: dict[str, int] = RANKS) -> list[str]:
    """Imports from a higher rank, at any depth but under TYPE_CHECKING (a function-level import
    still makes the lower layer depend on the higher one); an unranked package is an offence too."""
    offenders = []
    known = modules(root)
    for name, path in known.items():
        here = _package(name)
        if here not in ranks:
            offenders.append(f"{_rel(root, path)}: package {here!r} has no rank in RANKS")
            continue
        for imp in imports(root, path):
            if imp.type_checking:
                continue
            for target in _targets(imp, known):
                there = _package(target)
                if ranks.get(there, -1) > ranks[here]:
                    offenders.append(
                        f"{_rel(root, path)}:{imp.line}: {here or TOP} (rank {ranks[here]})"
                        f" imports {target} (rank {ranks[there]})"
                    )
    return offenders


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _defined_private(tree: ast.Module) -> set[str]:
    """The underscore names a module defines: functions, classes, attributes set on ``self`` or
    ``cls``, ``__slots__`` entries, and names bound at module or class level (dataclass fields)."""
    defined: set[str] = set()

    def bind(target: ast.AST, *, scoped: bool) -> None:
        for sub in ast.walk(target):
            if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name):
                if sub.value.id in ("self", "cls", "mcs"):
                    defined.add(sub.attr)
            elif scoped and isinstance(sub, ast.Name):
                defined.add(sub.id)

    def slots(value: ast.AST | None) -> None:
        if value is not None:
            for sub in ast.walk(value):
                if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                    defined.add(sub.value)

    def visit(node: ast.AST, scoped: bool) -> None:
        # ``scoped``: module or class body, where a bare name binding is a module/class attribute.
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defined.add(child.name)
                visit(child, isinstance(child, ast.ClassDef))
                continue
            if isinstance(child, ast.Assign):
                for target in child.targets:
                    bind(target, scoped=scoped)
                    if isinstance(target, ast.Name) and target.id == "__slots__":
                        slots(child.value)
            elif isinstance(child, (ast.AnnAssign, ast.AugAssign)):
                bind(child.target, scoped=scoped)
                if isinstance(child.target, ast.Name) and child.target.id == "__slots__":
                    slots(child.value)
            visit(child, scoped and not isinstance(child, ast.Lambda))

    visit(tree, True)
    return {name for name in defined if _private(name)}


def _foreign_modules(tree: ast.Module) -> set[str]:
    """Names bound to modules that are not ours (``import os``, ``from lxml import etree``):
    their underscore names (``os._exit``, lxml's ``etree._Element``) are their authors' public
    API, not our friends' insides."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] != TOP:
                    names.add(alias.asname or alias.name.split(".")[0])
        elif (
            isinstance(node, ast.ImportFrom)
            and node.level == 0
            and node.module
            and node.module.split(".")[0] != TOP
        ):
            names.update(alias.asname or alias.name for alias in node.names)
    return names


def friend_access(root: Path, folders: tuple[str, ...] = (TOP, "daemons")) -> list[str]:
    """Reads of another module's underscore names.

    A heuristic from the AST, module by module: the module's own underscore names are the ones it
    defines (:func:`_defined_private`); an attribute access ``expr._x`` (dunders aside) whose
    ``_x`` the module does not define reaches into someone else's object; so does
    ``from umcore.m import _x`` of a private name (a private *module* of one's own package, such as
    ``umcore.wire._shared``, may be imported by its siblings).
    """
    offenders = []
    for path in _python_files(root, folders):
        tree = ast.parse(path.read_text("utf-8"), str(path))
        own = _defined_private(tree)
        name = _module_name(root, path)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        foreign = _foreign_modules(tree)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and _private(node.attr)
                and node.attr not in own
                and node.attr not in STDLIB_UNDERSCORE
                and not (isinstance(node.value, ast.Name) and node.value.id in foreign)
            ):
                offenders.append(f"{_rel(root, path)}:{node.lineno}: {ast.unparse(node)}")
        for imp in imports(root, path):
            if not imp.module.startswith(TOP):
                continue
            for imported in imp.names:
                if not _private(imported):
                    continue
                submodule = f"{imp.module}.{imported}"
                if (
                    submodule.rpartition(".")[0] == package
                    and (root / Path(*submodule.split("."))).with_suffix(".py").exists()
                ):
                    continue  # a private module of our own package
                offenders.append(
                    f"{_rel(root, path)}:{imp.line}: from {imp.module} import {imported}"
                )
    return sorted(offenders, key=_by_place)


def _by_place(line: str) -> tuple[str, int, str]:
    """Sort key of an offender line ``file:line: text``: by file, then line number."""
    file, _, rest = line.partition(":")
    number, _, text = rest.partition(":")
    return (file, int(number) if number.isdigit() else 0, text)


def attr_defined_ignores(root: Path) -> list[str]:
    """``type: ignore[attr-defined]`` comments in umcore (an attribute mypy cannot see is one
    someone patches in or reads from where it should not)."""
    offenders = []
    for path in _python_files(root, (TOP,)):
        for number, line in enumerate(path.read_text("utf-8").splitlines(), 1):
            if TYPE_IGNORE_ATTR.search(line):
                offenders.append(f"{_rel(root, path)}:{number}: {line.strip()}")
    return offenders


def wire_imports_beyond_errors(root: Path) -> list[str]:
    """``wire`` imports nothing of ours but ``errors`` and itself (stricter than its rank, which
    would let it import ``config``)."""
    offenders = []
    known = modules(root)
    for path in _python_files(root, (f"{TOP}/wire",)):
        for imp in imports(root, path):
            for target in _targets(imp, known):
                if _package(target) not in ("errors", "wire"):
                    offenders.append(f"{_rel(root, path)}:{imp.line}: imports {target}")
    return offenders


# --- the real tree ------------------------------------------------------------------------------


def _report(offenders: list[str]) -> str:
    return "\n" + "\n".join(offenders)


def test_every_named_package_exists() -> None:
    named = [name for name in RANKS if name not in ("", *MODULES) and name not in NOT_YET]
    assert missing_packages(REPO, named) == []
    assert all((REPO / TOP / f"{name}.py").is_file() for name in MODULES)


@pytest.mark.parametrize("package", SANS_IO)
def test_sans_io_packages_do_no_io(package: str) -> None:
    offenders = io_in_cores(REPO, [package])
    assert offenders == [], _report(offenders)


def test_cores_take_input_with_receive_not_asyncio_names() -> None:
    offenders = asyncio_names_in_cores(REPO, SANS_IO)
    assert offenders == [], _report(offenders)


def test_sockets_only_in_adapters_and_daemons() -> None:
    offenders = sockets_outside_adapters(REPO)
    assert offenders == [], _report(offenders)


def test_wire_imports_only_errors_from_umcore() -> None:
    offenders = wire_imports_beyond_errors(REPO)
    assert offenders == [], _report(offenders)


def test_no_import_cycle() -> None:
    offenders = cycles(REPO)
    assert offenders == [], _report(offenders)


def test_no_cycle_even_through_type_checking_or_function_imports() -> None:
    offenders = design_cycles(REPO)
    assert offenders == [], _report(offenders)


def test_no_package_cycle() -> None:
    offenders = package_cycles(REPO)
    assert offenders == [], _report(offenders)


def test_no_upward_import() -> None:
    offenders = upward_imports(REPO)
    assert offenders == [], _report(offenders)


def test_no_friend_access() -> None:
    offenders = friend_access(REPO)
    assert offenders == [], _report(offenders)


def test_no_attr_defined_ignore() -> None:
    offenders = attr_defined_ignores(REPO)
    assert offenders == [], _report(offenders)


# --- the rules can fail -------------------------------------------------------------------------


def _tree(root: Path, files: dict[str, str]) -> Path:
    """A fixture tree under ``root``: the given files, plus an empty ``__init__.py`` in every
    folder of ``umcore`` that lacks one."""
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for folder in [root / TOP, *(p for p in (root / TOP).rglob("*") if p.is_dir())]:
        init = folder / "__init__.py"
        if not init.exists():
            init.write_text("")
    return root


def test_imports_are_read_with_their_context(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "umcore/wire/m.py": (
                "from typing import TYPE_CHECKING\n"
                "import socket\n"
                "from asyncio import sleep\n"
                "from . import sib\n"
                "if TYPE_CHECKING:\n"
                "    from umcore.api import Context\n"
                "def f():\n"
                "    import umcore.tools\n"
            ),
            "umcore/wire/sib.py": "",
        },
    )
    found = {
        (i.module, i.names, i.in_function, i.type_checking)
        for i in imports(root, root / "umcore/wire/m.py")
    }
    assert ("socket", (), False, False) in found
    assert ("asyncio", ("sleep",), False, False) in found
    assert ("umcore.wire", ("sib",), False, False) in found
    assert ("umcore.api", ("Context",), False, True) in found
    assert ("umcore.tools", (), True, False) in found


def test_a_named_package_that_does_not_exist_is_reported(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"umcore/wire/m.py": ""})
    assert missing_packages(root, ["wire", "resolver"]) == ["umcore/resolver/ does not exist"]
    assert io_in_cores(root, ["resolver"]) == ["umcore/resolver/ does not exist"]


def test_io_in_a_core_is_reported(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "umcore/transport/ok.py": "import struct\nfrom umcore.wire import lbmc\n",
            "umcore/transport/bad.py": "import socket\n\ndef f():\n    from time import monotonic\n",
        },
    )
    assert io_in_cores(root, ["transport"]) == [
        "umcore/transport/bad.py:1: imports socket",
        "umcore/transport/bad.py:4: imports time",
    ]


def test_a_socket_outside_the_adapters_is_reported(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "umcore/aio/udp.py": "import socket\n",
            "umcore/daemon/web.py": "import socket\n",
            "daemons/lbmrd/app.py": "import socket\n",
            "umcore/api/context.py": "import asyncio\nfrom socket import AF_INET\n",
            "umcore/tools/lbmsrc.py": "import ssl\n",
        },
    )
    assert sockets_outside_adapters(root) == [
        "umcore/api/context.py:2: imports socket",
        "umcore/tools/lbmsrc.py:1: imports ssl",
    ]


def test_wire_importing_config_is_reported(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "umcore/errors.py": "",
            "umcore/config/options.py": "",
            "umcore/wire/ok.py": "from umcore import errors\nfrom umcore.wire import ok\n",
            "umcore/wire/bad.py": "from umcore import errors, config\n",
        },
    )
    assert wire_imports_beyond_errors(root) == ["umcore/wire/bad.py:1: imports umcore.config"]


def test_a_cycle_is_reported_with_its_edges(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "umcore/resolver/a.py": "from umcore.resolver import b\n",
            "umcore/resolver/b.py": "import umcore.resolver.a\n",
            # Not cycles: a back edge under TYPE_CHECKING, and one inside a function.
            "umcore/resolver/c.py": "from umcore.resolver.d import X\n",
            "umcore/resolver/d.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n"
                "    from umcore.resolver.c import Y\n"
                "X = 1\n"
                "def f():\n"
                "    from umcore.resolver import c\n"
            ),
        },
    )
    assert cycles(root) == [
        "import cycle among umcore.resolver.a, umcore.resolver.b:\n"
        "    umcore/resolver/a.py:1: umcore.resolver.a -> umcore.resolver.b\n"
        "    umcore/resolver/b.py:1: umcore.resolver.b -> umcore.resolver.a"
    ]


def test_a_package_cycle_through_a_function_level_import_is_reported(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "umcore/api/context.py": "from umcore.monitor import automatic\n",
            "umcore/monitor/automatic.py": "def start():\n    from umcore.api import context\n",
            "umcore/monitor/other.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n"
                "    from umcore.tools import lbmsrc\n"
            ),
            "umcore/tools/lbmsrc.py": "import umcore.monitor.other\n",
        },
    )
    assert cycles(root) == []
    assert package_cycles(root) == [
        "package cycle among api, monitor:\n"
        "    umcore/api/context.py:1: api -> monitor\n"
        "    umcore/monitor/automatic.py:2: monitor -> api"
    ]


def test_an_upward_import_is_reported(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "umcore/wire/lbmr.py": "from umcore.errors import UMError\nfrom umcore import config\n",
            "umcore/errors.py": "",
            "umcore/config/options.py": "",
            "umcore/transport/tcp.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n"
                "    from umcore.api import Context\n"  # types only: allowed
                "def f():\n"
                "    from umcore.aio import udp\n"  # at call time: still upward
            ),
            "umcore/aio/udp.py": "from umcore.transport import tcp\n",
            "umcore/api/context.py": "",
            "umcore/gadgets/x.py": "",
        },
    )
    assert upward_imports(root) == [
        "umcore/gadgets/__init__.py: package 'gadgets' has no rank in RANKS",
        "umcore/gadgets/x.py: package 'gadgets' has no rank in RANKS",
        "umcore/transport/tcp.py:5: transport (rank 2) imports umcore.aio.udp (rank 3)",
    ]


def test_friend_access_is_reported(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "umcore/transport/batch.py": (
                "class Batch:\n"
                "    __slots__ = ('_slot',)\n"
                "    _class_level = 0\n"
                "    def __init__(self):\n"
                "        self._len = 0\n"
                "    def _frame(self):\n"
                "        return self._len + self._slot + self.__class__.__name__.__len__()\n"
                "def _helper(other):\n"
                "    return other._len\n"  # same module: allowed
            ),
            "umcore/wire/_shared.py": "X = 1\n",
            "umcore/wire/lbmr.py": "from umcore.wire import _shared\nfrom umcore.wire._shared import X\n",
            "umcore/api/context.py": (
                "import os\n"
                "from lxml import etree\n"
                "from umcore.transport.batch import Batch, _helper\n"
                "from umcore.wire import _shared\n"
                "def send(core: Batch, el: etree._Element) -> int:\n"
                "    os._exit\n"
                "    return core._len + core._frame() + core.stats._bytes\n"
            ),
        },
    )
    assert friend_access(root) == [
        "umcore/api/context.py:3: from umcore.transport.batch import _helper",
        "umcore/api/context.py:4: from umcore.wire import _shared",
        "umcore/api/context.py:7: core._frame",
        "umcore/api/context.py:7: core._len",
        "umcore/api/context.py:7: core.stats._bytes",
    ]


def test_an_attr_defined_ignore_is_reported(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "umcore/api/context.py": (
                "x = 1  # type: ignore[union-attr]\n"
                "y = x.z  # type: ignore[union-attr, attr-defined]\n"
            )
        },
    )
    assert attr_defined_ignores(root) == [
        "umcore/api/context.py:2: y = x.z  # type: ignore[union-attr, attr-defined]"
    ]


def test_an_asyncio_callback_name_in_a_core_is_reported(tmp_path: Path) -> None:
    core = tmp_path / TOP / "transport"
    core.mkdir(parents=True)
    (core / "__init__.py").write_text("")
    (core / "x.py").write_text(
        "class Core:\n    def data_received(self, data):\n        pass\n"
        "    def receive_data(self, data):\n        pass\n"
    )
    assert asyncio_names_in_cores(tmp_path, ["transport"]) == [
        f"{TOP}/transport/x.py:2: def data_received"
    ]


def test_a_cycle_through_type_checking_imports_is_reported(tmp_path: Path) -> None:
    pkg = tmp_path / TOP / "engine"
    pkg.mkdir(parents=True)
    (tmp_path / TOP / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("from umcore.engine.a import A\n")  # a re-export: allowed
    (pkg / "a.py").write_text("from umcore.engine.b import B\nclass A: ...\n")
    (pkg / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from umcore.engine.a import A\nclass B: ...\n"
    )
    assert cycles(tmp_path) == []  # nothing runs in a cycle
    (offender,) = design_cycles(tmp_path)
    assert "umcore.engine.a, umcore.engine.b" in offender and "engine/b.py:3" in offender
