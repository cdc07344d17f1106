"""SRS session framing: RSocket frames over TCP, carrying the SRS messages of
:mod:`umcore.wire.srs_messages`.

Theory of operation
-------------------
A context (or DRO, or Store) opens one TCP connection to the SRS daemon and speaks RSocket on
it.  The conversation we verified with tshark 4.0.17 is:

1. client SETUP (stream 0: RSocket version 1.0, keepalive interval, max lifetime, no MIME
   types, no metadata);
2. client REQUEST_RESPONSE on stream 1 carrying the registration request; the SRS answers with
   a PAYLOAD (Complete|Next) carrying the registration response;
3. client REQUEST_STREAM on stream 3 (request_n 0x7fffffff) carrying the stream request; from
   then on both sides push batches of records (SIR, SDR, RIR, ...) as PAYLOAD (Next) frames on
   that stream;
4. KEEPALIVE frames on stream 0; one with the Respond flag must be answered with one without.

Which RSocket interaction real UM uses for each message, and its MIME strings and timers, are
not fixed by the dissector [I]; the codec accepts any of them.

Every frame on the stream is::

    0  u24  frame length = bytes after this field
    3  u32  stream id (31 bits; 0 = connection frames: SETUP, KEEPALIVE, ...)
    7  u16  frame type << 10 | flags (0x200 Ignore, 0x100 Metadata, 0x80 Follows/Resume/Respond,
            0x40 Complete/Lease, 0x20 Next)
    9  ...  type-specific fields, then [u24 metadata length + metadata] if Metadata, then data

Frames are slotted records (:class:`Setup`, :class:`Keepalive`, :class:`RequestResponse`,
:class:`RequestFnf`, :class:`RequestStream`, :class:`RequestN`, :class:`Cancel`,
:class:`Payload`, :class:`Error`; other RSocket types are kept opaque as :class:`OtherFrame`).
Frames that carry an SRS message hold it decoded in ``message`` (``None`` for an empty payload).
:func:`encode` / :func:`decode` handle one frame with its length prefix;
:class:`SRSStreamDecoder` cuts a TCP byte stream into frames incrementally, keeping a partial
frame between calls and refusing frames above a size bound.  RSocket fragmentation (the Follows
flag) is not supported: such a frame is refused with :class:`SRSError` (SRS batches are small,
see ``MAX_FRAME_SIZE``).  Decoders raise only :class:`SRSError`, whatever the input.
"""

from __future__ import annotations

import struct

from umcore.errors import LocalProtocolError
from umcore.wire._shared import Record
from umcore.wire.srs_messages import (
    Batch,
    BatchRecord,
    RegistrationRequest,
    RegistrationResponse,
    SRSError,
    SRSMessage,
    StreamRequest,
    decode_message,
    encode_message,
    encode_records,
)

__all__ = [
    "DEFAULT_REQUEST_N",
    "FLAG_COMPLETE",
    "FLAG_FOLLOWS",
    "FLAG_IGNORE",
    "FLAG_METADATA",
    "FLAG_NEXT",
    "FLAG_RESPOND",
    "MAX_FRAME_SIZE",
    "Batch",
    "Cancel",
    "Error",
    "Frame",
    "Keepalive",
    "OtherFrame",
    "Payload",
    "RegistrationRequest",
    "RegistrationResponse",
    "RequestFnf",
    "RequestN",
    "RequestResponse",
    "RequestStream",
    "SRSError",
    "SRSStreamDecoder",
    "Setup",
    "StreamRequest",
    "decode",
    "decode_message",
    "encode",
    "encode_batch_frames",
    "encode_message",
]

# RSocket frame types.
SETUP = 0x01
LEASE = 0x02
KEEPALIVE = 0x03
REQUEST_RESPONSE = 0x04
REQUEST_FNF = 0x05
REQUEST_STREAM = 0x06
REQUEST_CHANNEL = 0x07
REQUEST_N = 0x08
CANCEL = 0x09
PAYLOAD = 0x0A
ERROR = 0x0B
METADATA_PUSH = 0x0C
RESUME = 0x0D
RESUME_OK = 0x0E
EXT = 0x3F
# Types kept opaque (OtherFrame); they must be connection frames (stream 0) except
# REQUEST_CHANNEL and EXT.
_OPAQUE_TYPES = {LEASE, REQUEST_CHANNEL, METADATA_PUSH, RESUME, RESUME_OK, EXT}
_CONNECTION_TYPES = {SETUP, LEASE, KEEPALIVE, METADATA_PUSH, RESUME, RESUME_OK}

FLAG_IGNORE = 0x200
FLAG_METADATA = 0x100
FLAG_FOLLOWS = 0x080  # REQUEST_*, PAYLOAD: more fragments follow
FLAG_RESUME = 0x080  # SETUP: a resume token is present
FLAG_RESPOND = 0x080  # KEEPALIVE: the peer must answer
FLAG_LEASE = 0x040  # SETUP
FLAG_COMPLETE = 0x040  # PAYLOAD, REQUEST_CHANNEL
FLAG_NEXT = 0x020  # PAYLOAD
_FLAGS_MASK = 0x3FF

# Error codes (RSocket).
ERROR_INVALID_SETUP = 0x001
ERROR_UNSUPPORTED_SETUP = 0x002
ERROR_REJECTED_SETUP = 0x003
ERROR_CONNECTION_ERROR = 0x101
ERROR_CONNECTION_CLOSE = 0x102
ERROR_APPLICATION_ERROR = 0x201
ERROR_REJECTED = 0x202
ERROR_CANCELED = 0x203
ERROR_INVALID = 0x204

# request_n of the verified stream request: "unbounded" in RSocket terms (2^31 - 1).
DEFAULT_REQUEST_N = 0x7FFFFFFF
MAX_STREAM_ID = 0x7FFFFFFF  # 31 bits; the top bit is reserved
MAX_U24 = 0xFFFFFF

# Largest frame (after the 3-byte length) we accept.  The u24 length allows 16 MiB; the SRS
# batches records into frames of at most batch-frame-max-datagram-size bytes (8192 by default,
# seed-srs-lbmrd.md 1.6.4), so a frame above 1 MiB can only be a broken or hostile peer, and
# this bound is what keeps one connection's receive buffer small.
MAX_FRAME_SIZE = 1 << 20
_MIN_FRAME = 6  # stream id + type/flags

_HEAD = struct.Struct("!IH")  # stream id, type<<10 | flags
_SETUP = struct.Struct("!HHII")  # major, minor, keepalive ms, max lifetime ms
_U16 = struct.Struct("!H")
_U32 = struct.Struct("!I")
_U64 = struct.Struct("!Q")


class _Frame(Record):
    """Base of the frame records (equality, hash and repr from :class:`Record`)."""

    __slots__ = ()
    FRAME_TYPE: int


class Setup(_Frame):
    """SETUP (client, stream 0): RSocket version, keepalive interval and max lifetime (ms)."""

    FRAME_TYPE = SETUP
    __slots__ = (
        "data",
        "data_mime",
        "keepalive_ms",
        "lease",
        "major",
        "max_lifetime_ms",
        "metadata",
        "metadata_mime",
        "minor",
        "resume_token",
    )

    def __init__(
        self,
        keepalive_ms: int,
        max_lifetime_ms: int,
        *,
        major: int = 1,
        minor: int = 0,
        metadata_mime: str = "",
        data_mime: str = "",
        resume_token: bytes | None = None,
        lease: bool = False,
        metadata: bytes | None = None,
        data: bytes = b"",
    ) -> None:
        self.keepalive_ms = keepalive_ms
        self.max_lifetime_ms = max_lifetime_ms
        self.major = major
        self.minor = minor
        self.metadata_mime = metadata_mime
        self.data_mime = data_mime
        self.resume_token = resume_token
        self.lease = lease
        self.metadata = metadata
        self.data = data


class Keepalive(_Frame):
    """KEEPALIVE (stream 0): ``respond`` asks the peer to echo; ``last_position`` is the last
    received resume position (0 without resumption)."""

    FRAME_TYPE = KEEPALIVE
    __slots__ = ("data", "last_position", "respond")

    def __init__(self, respond: bool, last_position: int = 0, data: bytes = b"") -> None:
        self.respond = respond
        self.last_position = last_position
        self.data = data


class RequestResponse(_Frame):
    """REQUEST_RESPONSE: one request (the registration request), one PAYLOAD answer."""

    FRAME_TYPE = REQUEST_RESPONSE
    __slots__ = ("message", "metadata", "stream_id")

    def __init__(
        self, stream_id: int, message: SRSMessage | None, metadata: bytes | None = None
    ) -> None:
        self.stream_id = stream_id
        self.message = message
        self.metadata = metadata


class RequestFnf(RequestResponse):
    """REQUEST_FNF: fire and forget (no answer)."""

    FRAME_TYPE = REQUEST_FNF
    __slots__ = ()


class RequestStream(_Frame):
    """REQUEST_STREAM: open a stream of PAYLOADs (the stream request), ``request_n`` credits."""

    FRAME_TYPE = REQUEST_STREAM
    __slots__ = ("message", "metadata", "request_n", "stream_id")

    def __init__(
        self,
        stream_id: int,
        message: SRSMessage | None,
        request_n: int = DEFAULT_REQUEST_N,
        metadata: bytes | None = None,
    ) -> None:
        self.stream_id = stream_id
        self.message = message
        self.request_n = request_n
        self.metadata = metadata


class RequestN(_Frame):
    """REQUEST_N: grant ``request_n`` more PAYLOADs on a stream."""

    FRAME_TYPE = REQUEST_N
    __slots__ = ("request_n", "stream_id")

    def __init__(self, stream_id: int, request_n: int) -> None:
        self.stream_id = stream_id
        self.request_n = request_n


class Cancel(_Frame):
    """CANCEL: the requester abandons a stream."""

    FRAME_TYPE = CANCEL
    __slots__ = ("stream_id",)

    def __init__(self, stream_id: int) -> None:
        self.stream_id = stream_id


class Payload(_Frame):
    """PAYLOAD: an SRS message (registration response or batch) on a stream; ``next`` = carries
    a message, ``complete`` = last frame of the stream."""

    FRAME_TYPE = PAYLOAD
    __slots__ = ("complete", "message", "metadata", "next", "stream_id")

    def __init__(
        self,
        stream_id: int,
        message: SRSMessage | None,
        *,
        complete: bool = False,
        next: bool = True,
        metadata: bytes | None = None,
    ) -> None:
        self.stream_id = stream_id
        self.message = message
        self.complete = complete
        self.next = next
        self.metadata = metadata


class Error(_Frame):
    """ERROR: ``code`` (``ERROR_*``) and a UTF-8 text; stream 0 = the whole connection."""

    FRAME_TYPE = ERROR
    __slots__ = ("code", "stream_id", "text")

    def __init__(self, stream_id: int, code: int, text: str = "") -> None:
        self.stream_id = stream_id
        self.code = code
        self.text = text


class OtherFrame(_Frame):
    """A legal RSocket frame the SRS session does not use (LEASE, REQUEST_CHANNEL,
    METADATA_PUSH, RESUME, RESUME_OK, EXT), kept as raw ``body`` after the 6-byte head."""

    __slots__ = ("body", "flags", "frame_type", "stream_id")

    def __init__(self, frame_type: int, stream_id: int, flags: int, body: bytes) -> None:
        self.frame_type = frame_type
        self.stream_id = stream_id
        self.flags = flags
        self.body = body


Frame = (
    Setup
    | Keepalive
    | RequestResponse
    | RequestFnf
    | RequestStream
    | RequestN
    | Cancel
    | Payload
    | Error
    | OtherFrame
)


# --------------------------------------------------------------------------------------------
# Encoding


def _u24(n: int, what: str) -> bytes:
    if not 0 <= n <= MAX_U24:
        raise LocalProtocolError(f"RSocket {what} of {n} bytes does not fit a u24")
    return n.to_bytes(3, "big")


def _metadata(metadata: bytes | None) -> tuple[int, bytes]:
    if metadata is None:
        return 0, b""
    return FLAG_METADATA, _u24(len(metadata), "metadata") + bytes(metadata)


def _message(message: SRSMessage | None) -> bytes:
    return b"" if message is None else encode_message(message)


def _mime(value: str) -> bytes:
    raw = value.encode("ascii", "strict") if value.isascii() else b""
    if len(raw) != len(value) or len(raw) > 255:
        raise LocalProtocolError(f"RSocket MIME type must be ASCII, <= 255 bytes: {value!r}")
    return bytes((len(raw),)) + raw


def _frame_parts(frame: Frame) -> tuple[int, int, int, bytes]:
    """(stream id, type, flags, bytes after the 6-byte head)."""
    if isinstance(frame, Setup):
        flags, md = _metadata(frame.metadata)
        body = _SETUP.pack(frame.major, frame.minor, frame.keepalive_ms, frame.max_lifetime_ms)
        if frame.resume_token is not None:
            flags |= FLAG_RESUME
            body += _U16.pack(len(frame.resume_token)) + frame.resume_token
        if frame.lease:
            flags |= FLAG_LEASE
        return (
            0,
            SETUP,
            flags,
            body + _mime(frame.metadata_mime) + _mime(frame.data_mime) + md + frame.data,
        )
    if isinstance(frame, Keepalive):
        flags = FLAG_RESPOND if frame.respond else 0
        return 0, KEEPALIVE, flags, _U64.pack(frame.last_position) + frame.data
    if isinstance(frame, RequestResponse):  # also RequestFnf
        flags, md = _metadata(frame.metadata)
        return frame.stream_id, frame.FRAME_TYPE, flags, md + _message(frame.message)
    if isinstance(frame, RequestStream):
        flags, md = _metadata(frame.metadata)
        body = _U32.pack(frame.request_n) + md + _message(frame.message)
        return frame.stream_id, REQUEST_STREAM, flags, body
    if isinstance(frame, RequestN):
        return frame.stream_id, REQUEST_N, 0, _U32.pack(frame.request_n)
    if isinstance(frame, Cancel):
        return frame.stream_id, CANCEL, 0, b""
    if isinstance(frame, Payload):
        flags, md = _metadata(frame.metadata)
        flags |= (FLAG_COMPLETE if frame.complete else 0) | (FLAG_NEXT if frame.next else 0)
        return frame.stream_id, PAYLOAD, flags, md + _message(frame.message)
    if isinstance(frame, Error):
        return frame.stream_id, ERROR, 0, _U32.pack(frame.code) + frame.text.encode("utf-8")
    if isinstance(frame, OtherFrame):
        if frame.frame_type not in _OPAQUE_TYPES:
            raise LocalProtocolError(f"OtherFrame cannot carry frame type {frame.frame_type}")
        if not 0 <= frame.flags <= _FLAGS_MASK:
            raise LocalProtocolError(f"RSocket flags must fit 10 bits: {frame.flags}")
        return frame.stream_id, frame.frame_type, frame.flags, bytes(frame.body)
    raise LocalProtocolError(f"not an RSocket frame: {frame!r}")


def encode(frame: Frame) -> bytes:
    """One frame with its u24 length prefix; :class:`LocalProtocolError` if it cannot be
    encoded (value out of range, frame above ``MAX_FRAME_SIZE``)."""
    try:
        stream_id, ftype, flags, body = _frame_parts(frame)
        if not 0 <= stream_id <= MAX_STREAM_ID:
            raise LocalProtocolError(f"RSocket stream id must fit 31 bits: {stream_id}")
        if (stream_id == 0) != (ftype in _CONNECTION_TYPES) and ftype not in (ERROR, EXT):
            raise LocalProtocolError(f"RSocket frame type {ftype} on stream {stream_id}")
        head = _HEAD.pack(stream_id, (ftype << 10) | flags)
    except struct.error as exc:
        raise LocalProtocolError(f"RSocket value out of range in {frame!r}: {exc}") from None
    size = len(head) + len(body)
    if size > MAX_FRAME_SIZE:
        raise LocalProtocolError(f"RSocket frame of {size} bytes exceeds {MAX_FRAME_SIZE}")
    return size.to_bytes(3, "big") + head + body


def encode_batch_frames(
    stream_id: int, records: list[BatchRecord], max_frame_bytes: int = 8192
) -> list[bytes]:
    """PAYLOAD (Next) frames carrying ``records`` in order, each frame at most
    ``max_frame_bytes`` long (the SRS's batch-frame-max-datagram-size) unless a single record is
    bigger, in which case that record travels alone."""
    out: list[bytes] = []
    batch: list[bytes] = []
    size = 0
    overhead = 3 + _HEAD.size
    for rec in records:
        raw = encode_records([rec])
        if batch and overhead + size + len(raw) > max_frame_bytes:
            out.append(_payload_frame(stream_id, b"".join(batch)))
            batch, size = [], 0
        batch.append(raw)
        size += len(raw)
    if batch:
        out.append(_payload_frame(stream_id, b"".join(batch)))
    return out


def _payload_frame(stream_id: int, body: bytes) -> bytes:
    if not 0 < stream_id <= MAX_STREAM_ID:
        raise LocalProtocolError(f"PAYLOAD needs a stream id in 1..2^31-1: {stream_id}")
    size = _HEAD.size + len(body)
    if size > MAX_FRAME_SIZE:
        raise LocalProtocolError(f"RSocket frame of {size} bytes exceeds {MAX_FRAME_SIZE}")
    return size.to_bytes(3, "big") + _HEAD.pack(stream_id, (PAYLOAD << 10) | FLAG_NEXT) + body


# --------------------------------------------------------------------------------------------
# Decoding


def _read_metadata(
    frame: memoryview, offset: int, flags: int, name: str
) -> tuple[bytes | None, int]:
    if not flags & FLAG_METADATA:
        return None, offset
    if offset + 3 > len(frame):
        raise SRSError("truncated metadata length", record=name, offset=offset + 3)
    size = int.from_bytes(frame[offset : offset + 3], "big")
    offset += 3
    if offset + size > len(frame):
        raise SRSError("truncated metadata", record=name, offset=offset + 3)
    return bytes(frame[offset : offset + size]), offset + size


def _read_message(frame: memoryview, offset: int) -> SRSMessage | None:
    if offset == len(frame):
        return None
    try:
        return decode_message(frame[offset:])
    except SRSError as exc:  # re-base the offset on the frame buffer (+3 for the length prefix)
        off = None if exc.offset is None else exc.offset + offset + 3
        raise SRSError(exc.message, record=exc.record, offset=off) from None


def _need(frame: memoryview, size: int, name: str) -> None:
    if len(frame) < size:
        raise SRSError(f"{name} frame of {len(frame)} bytes is truncated", record=name, offset=3)


def _decode_frame(frame: memoryview) -> Frame:
    """Decode the bytes after the u24 length (``frame`` is exactly one frame)."""
    if len(frame) < _MIN_FRAME:
        raise SRSError(f"RSocket frame of {len(frame)} bytes is shorter than its header", offset=3)
    stream_id, type_flags = _HEAD.unpack_from(frame, 0)
    stream_id &= MAX_STREAM_ID
    ftype = type_flags >> 10
    flags = type_flags & _FLAGS_MASK
    off = _HEAD.size
    if ftype in _CONNECTION_TYPES and stream_id != 0:
        raise SRSError(f"frame type {ftype} on stream {stream_id}", record="RSocket", offset=3)
    if ftype not in _CONNECTION_TYPES and ftype not in (ERROR, EXT) and stream_id == 0:
        raise SRSError(f"frame type {ftype} on stream 0", record="RSocket", offset=3)
    if ftype in (REQUEST_RESPONSE, REQUEST_FNF, REQUEST_STREAM, PAYLOAD) and flags & FLAG_FOLLOWS:
        raise SRSError("fragmented RSocket frames are not supported", record="RSocket", offset=9)
    if ftype == SETUP:
        _need(frame, off + _SETUP.size, "SETUP")
        major, minor, keepalive, lifetime = _SETUP.unpack_from(frame, off)
        off += _SETUP.size
        token = None
        if flags & FLAG_RESUME:
            _need(frame, off + 2, "SETUP")
            (tlen,) = _U16.unpack_from(frame, off)
            _need(frame, off + 2 + tlen, "SETUP")
            token = bytes(frame[off + 2 : off + 2 + tlen])
            off += 2 + tlen
        mimes = []
        for _ in range(2):
            _need(frame, off + 1, "SETUP")
            mlen = frame[off]
            _need(frame, off + 1 + mlen, "SETUP")
            raw = bytes(frame[off + 1 : off + 1 + mlen])
            if not raw.isascii():
                raise SRSError("MIME type is not ASCII", record="SETUP", offset=off + 4)
            mimes.append(raw.decode("ascii"))
            off += 1 + mlen
        md, off = _read_metadata(frame, off, flags, "SETUP")
        return Setup(
            keepalive,
            lifetime,
            major=major,
            minor=minor,
            metadata_mime=mimes[0],
            data_mime=mimes[1],
            resume_token=token,
            lease=bool(flags & FLAG_LEASE),
            metadata=md,
            data=bytes(frame[off:]),
        )
    if ftype == KEEPALIVE:
        _need(frame, off + 8, "KEEPALIVE")
        (pos,) = _U64.unpack_from(frame, off)
        return Keepalive(bool(flags & FLAG_RESPOND), pos, bytes(frame[off + 8 :]))
    if ftype in (REQUEST_RESPONSE, REQUEST_FNF):
        md, off = _read_metadata(frame, off, flags, "REQUEST")
        cls = RequestResponse if ftype == REQUEST_RESPONSE else RequestFnf
        return cls(stream_id, _read_message(frame, off), md)
    if ftype == REQUEST_STREAM:
        _need(frame, off + 4, "REQUEST_STREAM")
        (request_n,) = _U32.unpack_from(frame, off)
        md, off = _read_metadata(frame, off + 4, flags, "REQUEST_STREAM")
        return RequestStream(stream_id, _read_message(frame, off), request_n, md)
    if ftype == PAYLOAD:
        md, off = _read_metadata(frame, off, flags, "PAYLOAD")
        return Payload(
            stream_id,
            _read_message(frame, off),
            complete=bool(flags & FLAG_COMPLETE),
            next=bool(flags & FLAG_NEXT),
            metadata=md,
        )
    if ftype == REQUEST_N:
        if len(frame) != off + 4:
            raise SRSError("REQUEST_N body must be 4 bytes", record="REQUEST_N", offset=9)
        return RequestN(stream_id, _U32.unpack_from(frame, off)[0])
    if ftype == CANCEL:
        if len(frame) != off:
            raise SRSError("CANCEL has no body", record="CANCEL", offset=9)
        return Cancel(stream_id)
    if ftype == ERROR:
        _need(frame, off + 4, "ERROR")
        (code,) = _U32.unpack_from(frame, off)
        try:
            text = bytes(frame[off + 4 :]).decode("utf-8")
        except UnicodeDecodeError:
            raise SRSError("error text is not UTF-8", record="ERROR", offset=13) from None
        return Error(stream_id, code, text)
    if ftype in _OPAQUE_TYPES:
        return OtherFrame(ftype, stream_id, flags, bytes(frame[off:]))
    raise SRSError(f"unknown RSocket frame type {ftype}", record="RSocket", offset=7)


def decode(buf: bytes | bytearray | memoryview) -> Frame:
    """Exactly one frame, with its u24 length prefix; raises only :class:`SRSError`."""
    mv = memoryview(buf)
    if len(mv) < 3:
        raise SRSError("shorter than the RSocket length prefix", offset=0)
    size = int.from_bytes(mv[0:3], "big")
    if size > MAX_FRAME_SIZE:
        raise SRSError(f"RSocket frame of {size} bytes exceeds {MAX_FRAME_SIZE}", offset=0)
    if 3 + size != len(mv):
        raise SRSError(f"length prefix says {size} bytes, buffer holds {len(mv) - 3}", offset=0)
    return _decode_frame(mv[3:])


class SRSStreamDecoder:
    """Cuts an SRS TCP byte stream into decoded frames.

    ``feed(data)`` returns the frames completed by ``data`` (possibly none) and keeps any
    partial frame for the next call, so feeding one byte at a time gives the same frames as
    feeding everything at once.  A frame announcing more than ``max_frame_size`` bytes raises
    :class:`SRSError` as soon as its length prefix is seen, which bounds the buffer to one
    frame.  After an :class:`SRSError` the stream is desynchronised: the decoder refuses
    further input and the connection must be closed.
    """

    __slots__ = ("_buf", "_failed", "max_frame_size")

    def __init__(self, max_frame_size: int = MAX_FRAME_SIZE) -> None:
        self.max_frame_size = max_frame_size
        self._buf = bytearray()
        self._failed = False

    @property
    def buffered(self) -> int:
        """Bytes held for an incomplete frame."""
        return len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> list[Frame]:
        if self._failed:
            raise SRSError("stream already failed; close the connection", offset=0)
        buf = self._buf
        buf += data
        frames: list[Frame] = []
        pos = 0
        try:
            with memoryview(buf) as mv:
                while len(buf) - pos >= 3:
                    size = int.from_bytes(mv[pos : pos + 3], "big")
                    if size > self.max_frame_size:
                        raise SRSError(
                            f"RSocket frame of {size} bytes exceeds {self.max_frame_size}",
                            offset=pos,
                        )
                    if len(buf) - pos - 3 < size:
                        break
                    frames.append(_decode_frame(mv[pos + 3 : pos + 3 + size]))
                    pos += 3 + size
        except SRSError:
            self._failed = True
            raise
        del buf[:pos]
        return frames
