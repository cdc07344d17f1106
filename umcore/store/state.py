"""State files: what a Store keeps about a source and its receivers, as bytes.

Theory of operation
-------------------
One state file per source repository, ``<disk-state-directory>/<RegID>-state`` (UM's name; RegID
in decimal): the source's registration (RegID, topic, Session ID, transport and topic index,
request address, options as considered, RPP choices, repository kind) and its receivers with
their ACK positions (``high_ack_sqn``: where recovery starts after a restart).  The store core
decides the contents; this module only turns them into bytes and back.

Layout (documented with the cache format in ``docs/store-format.md``): a 24-byte header
``<8sHHIII`` — magic ``PYUMSTA\\0``, format version, reserved, body length, CRC-32 of the body,
CRC-32 of the first 20 header bytes — then the body, UTF-8 JSON of the fields (bytes as hex).
JSON keeps the file readable with ``tail -c +25`` and lets later versions add fields: unknown
keys are ignored, missing ones take the dataclass default.  The file is always replaced
atomically (:data:`umcore.store.io.IoKind.STATE_WRITE`), so a reader sees the old or the new
contents, never a mix; the CRCs catch what the disk damaged.  :func:`decode_state` raises only
:class:`StoreFormatError`.
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass, field, fields
from typing import Any

from umcore.store.diskformat import StoreFormatError

__all__ = [
    "NO_SQN",
    "STATE_MAGIC",
    "STATE_VERSION",
    "ReceiverState",
    "SourceState",
    "decode_state",
    "encode_state",
    "parse_state_name",
    "state_name",
]

STATE_MAGIC = b"PYUMSTA\x00"
STATE_VERSION = 1
_HEADER = struct.Struct("<8sHHIII")
NO_SQN = 0xFFFFFFFF  # UM's "no sequence number yet"
# A state file holds one source and its receivers: even 100,000 receivers stay below this.
MAX_STATE_BYTES = 64 * 1024 * 1024


@dataclass(slots=True)
class ReceiverState:
    reg_id: int
    session_id: int = 0
    high_ack_sqn: int = NO_SQN  # highest consumption-ACKed sqn; NO_SQN = none yet
    ip: str = "0.0.0.0"
    port: int = 0
    activity_timeout_ms: int = 0
    state_lifetime_ms: int = 0
    rpp_mode: int = 0  # ume_receiver_paced_persistence: 0 SPP, 1 RPP blocking, 2 non-blocking
    flags: int = 0
    transport_idx: int = 0
    topic_idx: int = 0
    domain_id: int = 0
    context_instance: bytes = b""  # 8 bytes
    created: float = 0.0


@dataclass(slots=True)
class SourceState:
    reg_id: int
    topic: str = ""
    session_id: int = 0
    transport_idx: int = 0
    topic_idx: int = 0
    ip: str = "0.0.0.0"  # the source's request address
    port: int = 0
    store_index: int = 0
    activity_timeout_ms: int = 0  # as considered at first registration (frozen: trap 7)
    state_lifetime_ms: int = 0
    rpp: bool = False
    rpp_overrides: dict[str, int] = field(default_factory=dict)  # option name -> value
    ack_on_reception: bool = False
    repository_type: str = "memory"
    created: float = 0.0
    flight_size_bytes: int = 0
    domain_id: int = 0
    otid: bytes = b""  # 32 bytes
    context_instance: bytes = b""  # 8 bytes
    lead_sqn: int = NO_SQN  # the newest sqn seen (what a no-cache repository keeps)
    proxy: bool = False  # asked for a proxy source (ume_proxy_source) and can have one
    proxy_sri: bytes = b""  # its last SRI (LBMC control message): what a proxy would serve
    receivers: list[ReceiverState] = field(default_factory=list)


def state_name(reg_id: int) -> str:
    """UM's state file name: ``<RegID>-state``."""
    return f"{reg_id}-state"


def parse_state_name(name: str) -> int | None:
    stem, sep, rest = name.partition("-")
    if sep and rest == "state" and stem.isdigit() and len(stem) <= 10:
        return int(stem)
    return None


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, list):
        return [_to_dict(v) for v in value]
    return value


def _to_dict(obj: SourceState | ReceiverState) -> dict[str, Any]:
    return {f.name: _plain(getattr(obj, f.name)) for f in fields(obj)}


def encode_state(state: SourceState) -> bytes:
    body = json.dumps(_to_dict(state), separators=(",", ":"), sort_keys=True).encode()
    head = _HEADER.pack(STATE_MAGIC, STATE_VERSION, 0, len(body), zlib.crc32(body), 0)
    return head[:20] + zlib.crc32(head[:20]).to_bytes(4, "little") + body


def _check(name: str, value: Any, want: type) -> Any:
    if want is int:
        if type(value) is not int:
            raise StoreFormatError(f"state field {name}: {value!r} is not an integer")
        return value
    if want is float:
        if type(value) not in (int, float):
            raise StoreFormatError(f"state field {name}: {value!r} is not a number")
        return float(value)
    if want is bool:
        if type(value) is not bool:
            raise StoreFormatError(f"state field {name}: {value!r} is not true/false")
        return value
    if want is str:
        if type(value) is not str:
            raise StoreFormatError(f"state field {name}: {value!r} is not a string")
        return value
    if want is bytes:
        try:
            return bytes.fromhex(value)
        except (TypeError, ValueError):
            raise StoreFormatError(f"state field {name}: {value!r} is not hex bytes") from None
    raise StoreFormatError(f"state field {name}: unknown type")  # pragma: no cover


_TYPES = {"int": int, "float": float, "bool": bool, "str": str, "bytes": bytes}


def _from_dict(cls: type[Any], data: Any) -> Any:
    if not isinstance(data, dict):
        raise StoreFormatError(f"{cls.__name__}: not an object")
    kwargs: dict[str, Any] = {}
    for f in fields(cls):
        if f.name not in data:
            if f.name == "reg_id":
                raise StoreFormatError(f"{cls.__name__}: no reg_id")
            continue
        value = data[f.name]
        kind = str(f.type)
        if kind == "list[ReceiverState]":
            if not isinstance(value, list):
                raise StoreFormatError("state field receivers: not a list")
            kwargs[f.name] = [_from_dict(ReceiverState, v) for v in value]
        elif kind == "dict[str, int]":
            if not isinstance(value, dict) or not all(type(v) is int for v in value.values()):
                raise StoreFormatError(f"state field {f.name}: not a name -> integer map")
            kwargs[f.name] = dict(value)
        else:
            kwargs[f.name] = _check(f.name, value, _TYPES[kind])
    return cls(**kwargs)


def decode_state(buf: bytes | bytearray | memoryview) -> SourceState:
    data = bytes(buf)
    if len(data) < _HEADER.size:
        raise StoreFormatError(f"state file: {len(data)} bytes, shorter than its header")
    if len(data) > MAX_STATE_BYTES:
        raise StoreFormatError(f"state file: {len(data)} bytes, more than {MAX_STATE_BYTES}")
    magic, version, _, length, body_crc, head_crc = _HEADER.unpack_from(data)
    if magic != STATE_MAGIC:
        raise StoreFormatError(f"state file: magic {magic!r}, expected {STATE_MAGIC!r}")
    if head_crc != zlib.crc32(data[:20]):
        raise StoreFormatError("state file: bad header CRC")
    if version != STATE_VERSION:
        raise StoreFormatError(f"state file: version {version}, we read {STATE_VERSION}")
    body = data[_HEADER.size :]
    if len(body) != length:
        raise StoreFormatError(f"state file: body of {len(body)} bytes, header says {length}")
    if zlib.crc32(body) != body_crc:
        raise StoreFormatError("state file: bad body CRC")
    try:
        obj = json.loads(body)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise StoreFormatError(f"state file: body is not JSON: {exc}") from None
    state: SourceState = _from_dict(SourceState, obj)
    return state
