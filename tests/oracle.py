"""tshark as pyum's independent wire oracle.

Tests hand Ethernet frames (built with :mod:`umcore.wire.pcap`) to :meth:`Tshark.decode`, which
writes them to a pcap file, runs ``tshark -T json --no-duplicate-keys`` with the given decode-as
rules and preferences, and returns a :class:`Decoded` holding each frame's layer tree.  Tests then
read field values by their tshark names (``lbmr.tir.tcp.port``) and assert that no Malformed or
Error-severity expert item appeared (:meth:`Decoded.assert_clean`).

Use the ``tshark`` fixture from ``tests/conftest.py``: it skips on a developer machine without
tshark and fails when ``CI`` is set, so CI can never pass with the oracle silently missing.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from umcore.wire.pcap import write_pcap

# tshark's expert severities as they appear in -T json output (epan/proto.h PI_* values).
SEVERITY = {
    0x00100000: "comment",
    0x00200000: "chat",
    0x00400000: "note",
    0x00600000: "warn",
    0x00800000: "error",
}

# Bound on one tshark run: decoding a few hundred frames takes well under a second.
TSHARK_TIMEOUT_S = 60


@dataclass(frozen=True)
class Expert:
    frame: int
    severity: str
    message: str
    keys: tuple[str, ...]


def _walk(node: Any) -> Iterator[tuple[str, Any]]:
    """Every (key, value) pair anywhere below ``node``; list values are yielded item by item."""
    if isinstance(node, Mapping):
        for key, value in node.items():
            items = value if isinstance(value, list) else [value]
            for item in items:
                yield key, item
                if isinstance(item, (Mapping, list)):
                    yield from _walk(item)
    elif isinstance(node, list):
        for item in node:
            yield from _walk(item)


class Decoded:
    """tshark's decoding of a list of frames."""

    def __init__(self, packets: list[dict[str, Any]]) -> None:
        self.layers: list[dict[str, Any]] = [p["_source"]["layers"] for p in packets]

    def __len__(self) -> int:
        return len(self.layers)

    def protocols(self, frame: int) -> list[str]:
        """The protocol stack tshark saw in frame ``frame`` (0-based), e.g. [..., 'udp', 'lbmr']."""
        return str(self.layers[frame]["frame"]["frame.protocols"]).split(":")

    def values(self, field: str, frame: int | None = None) -> list[str]:
        """All values of ``field`` in one frame (0-based) or in every frame, in document order."""
        frames = self.layers if frame is None else [self.layers[frame]]
        out: list[str] = []
        for layers in frames:
            for key, value in _walk(layers):
                if key == field and not isinstance(value, (Mapping, list)):
                    out.append(str(value))
        return out

    def value(self, field: str, frame: int | None = None) -> str:
        """The single value of ``field``; fails if it is absent or appears more than once."""
        found = self.values(field, frame)
        if len(found) != 1:
            raise AssertionError(f"expected one {field!r}, tshark gave {found!r}")
        return found[0]

    def experts(self) -> list[Expert]:
        out: list[Expert] = []
        for index, layers in enumerate(self.layers):
            for key, value in _walk(layers):
                if key == "_ws.expert" and isinstance(value, Mapping):
                    sev = SEVERITY.get(int(value.get("_ws.expert.severity", 0)), "unknown")
                    keys = tuple(k for k in value if not k.startswith("_ws.expert"))
                    out.append(Expert(index, sev, str(value.get("_ws.expert.message", "")), keys))
                elif key == "_ws.malformed":
                    out.append(Expert(index, "malformed", str(value), ()))
        return out

    def problems(self, allow: Iterable[str] = ()) -> list[Expert]:
        """Malformed and Error items, plus Warn items unless their expert key is in ``allow``."""
        allowed = set(allow)
        bad = []
        for item in self.experts():
            if item.severity in ("malformed", "error") or (
                item.severity == "warn" and not allowed.intersection(item.keys)
            ):
                bad.append(item)
        return bad

    def assert_clean(self, allow_warn: Iterable[str] = ()) -> None:
        """No Malformed, no Error, and no Warn item except those named in ``allow_warn``
        (e.g. ``lbtrm.analysis.nak`` — NAKs raise a Warn by design)."""
        bad = self.problems(allow_warn)
        if bad:
            raise AssertionError("tshark reported problems:\n" + "\n".join(map(str, bad)))


class Tshark:
    """Runs tshark on frames we built; see the module docstring."""

    def __init__(self, executable: str) -> None:
        self.executable = executable

    def decode(
        self,
        frames: Sequence[bytes],
        *,
        decode_as: Iterable[str] = (),
        prefs: Mapping[str, str] | None = None,
        disable_heuristics: Iterable[str] = (),
        enable_heuristics: Iterable[str] = (),
        raw: bool = False,
    ) -> Decoded:
        """Decode ``frames``; ``decode_as`` entries are tshark ``-d`` rules such as
        ``"udp.port==15380,lbmr"``; ``prefs`` become ``-o name:value``; ``raw`` (``-x``) adds
        each field's bytes as ``<field>_raw`` ([hex, offset, length, mask, type]: five values)."""
        with tempfile.TemporaryDirectory(prefix="pyum-tshark-") as tmp:
            path = Path(tmp) / "capture.pcap"
            write_pcap(path, frames)
            decoded = self.decode_file(
                path,
                decode_as=decode_as,
                prefs=prefs,
                disable_heuristics=disable_heuristics,
                enable_heuristics=enable_heuristics,
                raw=raw,
            )
        if len(decoded) != len(frames):
            raise AssertionError(f"tshark decoded {len(decoded)} of {len(frames)} frames")
        return decoded

    def decode_file(
        self,
        path: Path,
        *,
        decode_as: Iterable[str] = (),
        prefs: Mapping[str, str] | None = None,
        disable_heuristics: Iterable[str] = (),
        enable_heuristics: Iterable[str] = (),
        display_filter: str | None = None,
        raw: bool = False,
    ) -> Decoded:
        """Decode a capture file (a live capture): the options are :meth:`decode`'s, and
        ``display_filter`` keeps only the packets matching it (``-Y``)."""
        cmd = [self.executable, "-n", "-r", str(path), "-T", "json", "--no-duplicate-keys"]
        for rule in decode_as:
            cmd += ["-d", rule]
        for name, value in (prefs or {}).items():
            cmd += ["-o", f"{name}:{value}"]
        for name in disable_heuristics:
            cmd += ["--disable-heuristic", name]
        for name in enable_heuristics:
            cmd += ["--enable-heuristic", name]
        if display_filter is not None:
            cmd += ["-Y", display_filter]
        if raw:
            cmd.append("-x")
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=TSHARK_TIMEOUT_S, check=False
        )
        if proc.returncode != 0:
            raise AssertionError(f"tshark failed ({proc.returncode}): {proc.stderr.strip()}")
        packets = json.loads(proc.stdout) if proc.stdout.strip() else []
        return Decoded(packets)
