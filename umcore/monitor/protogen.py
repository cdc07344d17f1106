"""Generate the protobuf modules of ``umcore.monitor.pb`` from the repository's ``proto/`` folder.

Theory of operation
-------------------
The statistics shapes (UM's ``*_mon.proto`` messages, written as our own ``.proto`` files) live in
``proto/``.  Their Python modules are build products: this step runs ``protoc`` (from the
``grpcio-tools`` wheel, so no system package is needed) for every ``.proto`` whose output is
missing or older than its source, writing ``<name>_pb2.py`` and ``<name>_pb2.pyi`` into
``umcore/monitor/pb``.  Generated imports between our own files are rewritten to be
package-relative so the package works wherever it is installed.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROTO_DIR = ROOT / "proto"
OUT_DIR = Path(__file__).resolve().parent / "pb"


def _stale(proto: Path) -> bool:
    out = OUT_DIR / f"{proto.stem}_pb2.py"
    return not out.exists() or out.stat().st_mtime < proto.stat().st_mtime


def generate(force: bool = False) -> list[Path]:
    """Generate modules for stale ``.proto`` files; returns the sources that were compiled."""
    protos = sorted(PROTO_DIR.glob("*.proto")) if PROTO_DIR.is_dir() else []
    todo = [p for p in protos if force or _stale(p)]
    if not todo:
        return []
    from grpc_tools import protoc

    args = [
        "protoc",
        f"-I{PROTO_DIR}",
        f"--python_out={OUT_DIR}",
        f"--pyi_out={OUT_DIR}",
        *[str(p) for p in todo],
    ]
    if protoc.main(args) != 0:
        raise SystemExit(f"protoc failed for {', '.join(p.name for p in todo)}")
    local = {p.stem for p in protos}
    for path in OUT_DIR.glob("*_pb2.py*"):
        text = path.read_text("utf-8")
        fixed = re.sub(
            r"^import (\w+)_pb2 as",
            lambda m: f"from . import {m.group(1)}_pb2 as" if m.group(1) in local else m.group(0),
            text,
            flags=re.M,
        )
        if fixed != text:
            path.write_text(fixed, "utf-8")
    return todo


def main() -> int:
    done = generate(force="--force" in sys.argv[1:])
    for proto in done:
        print(f"protoc: {proto.relative_to(ROOT)} -> umcore/monitor/pb/{proto.stem}_pb2.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
