"""Architecture rules that a test can hold us to.

Sans-IO layers (wire, resolver, transport, persist, route) never do I/O themselves: no asyncio,
no sockets, no clocks, no threads.  Time arrives as ``now``; bytes leave as return values.
``wire`` and ``config`` import nothing else of ours but ``umcore.errors`` (and each other for
``config``'s schemas).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "umcore"
SANS_IO = ["wire", "resolver", "transport", "srs", "persist", "route"]
FORBIDDEN = {"asyncio", "socket", "time", "selectors", "threading", "uvloop", "subprocess"}
# The lbmrd relay core sits in resolver/ and is sans-IO too; persist's repositories may touch files
# (os/pathlib) by design, but still never sockets or the loop.


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text("utf-8"), str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _modules(layer: str) -> list[Path]:
    return sorted((ROOT / layer).rglob("*.py"))


@pytest.mark.parametrize("layer", SANS_IO)
def test_sans_io_layers_do_no_io(layer: str) -> None:
    offenders = {}
    for path in _modules(layer):
        bad = {n for n in _imports(path) if n.split(".")[0] in FORBIDDEN}
        if bad:
            offenders[str(path.relative_to(ROOT))] = sorted(bad)
    assert offenders == {}


def test_wire_imports_only_errors_from_umcore() -> None:
    offenders = {}
    for path in _modules("wire"):
        ours = {n for n in _imports(path) if n.startswith("umcore")}
        bad = {n for n in ours if not (n == "umcore.errors" or n.startswith("umcore.wire"))}
        if bad:
            offenders[str(path.relative_to(ROOT))] = sorted(bad)
    assert offenders == {}


def test_the_rule_catches_an_offender(tmp_path: Path) -> None:
    bad = tmp_path / "m.py"
    bad.write_text("import socket\nfrom asyncio import sleep\n")
    assert {"socket", "asyncio"} <= _imports(bad)
