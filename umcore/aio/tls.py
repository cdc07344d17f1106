"""Encrypted and compressed TCP: one context's TLS and LZ4 settings, applied to its connections.

Theory of operation
-------------------
UM turns TLS (seed 003 10.4) and LZ4 compression (10.5) on per context: every TCP connection
into or out of it -- TCP transport sessions, UIMs, request/response, late join and OTR, Store
traffic -- is compressed first, then encrypted (10.4.9).  :class:`Security` is that setting,
built once per context by :meth:`Security.from_options` from ``use_tls``, ``tls_*`` and
``compression``; every bad input is one :class:`~umcore.errors.ConfigError` at context creation
naming the option and the file: a missing or unreadable file, a key that does not match its
certificate, a wrong password, an unknown cipher suite name (OpenSSL's names, with dashes, as
UM takes them: an IANA name with underscores is refused and named as such).

TLS: Python's :mod:`ssl` (OpenSSL, as UM uses), TLS 1.2 only (the version UM uses), the suites
of ``tls_cipher_suites`` in that order, the accepting side's preference winning.  Both sides
present a certificate and verify the peer's against ``tls_trusted_certificates`` (the system's
store when unset): UM requires a certificate of every participant, since each is client on some
connections and server on others (10.4.1).  Host names are not checked -- UM peers are reached
by the addresses topic resolution gives, and the seed asks for a trusted chain, not a name.
UM's default suite is ephemeral Diffie-Hellman (``DHE-RSA-AES256-GCM-SHA384``); OpenSSL needs
DH parameters for it on the accepting side, and we load RFC 7919's ``ffdhe2048`` group.

The adapters use two entry points: :meth:`Security.server_factory` wraps a listener's protocol
factory, :meth:`Security.connect` replaces ``loop.create_connection``.  With neither TLS nor
compression both are the plain calls (nothing added to the data path).  Otherwise the
connection's first protocol is a :class:`_SecureProtocol`: it runs the TLS handshake
(``loop.start_tls``, both sides), then the compression hello of :mod:`umcore.wire.lz4stream`,
within ``tls_compression_negotiation_timeout``; only then does the real protocol see
``connection_made`` -- with the TLS transport itself when there is no compression (the TLS
transport's protocol is switched to it: no extra call per read), or with an
:class:`_Lz4Transport` that compresses its writes (the writes of one loop iteration are joined
into one block: a batch of small messages compresses as one).  A handshake or negotiation that
fails or times out closes that connection, logs the peer and the reason and counts it
(:attr:`Security.handshake_failures`, :attr:`Security.negotiation_failures`); the context goes
on.  A plain peer at a TLS port fails the handshake here; a TLS (or compressed) peer at a plain
port sends what the plain side's decoder refuses, which costs the connection there (counted by
that adapter) and the handshake here.
"""

from __future__ import annotations

import asyncio
import difflib
import logging
import os
import ssl
import tempfile
from collections.abc import Callable
from typing import Any, cast

from umcore.config.options import OptionReader
from umcore.errors import ConfigError, RemoteProtocolError
from umcore.wire import lbmr_options
from umcore.wire.lz4stream import HELLO, Lz4Decoder, encode_blocks

__all__ = ["SECURITY_FLAGS", "Security", "security_flags"]

log = logging.getLogger("umcore.aio.tls")

#: The TIR extended-functionality bits that say a source's context uses TLS / LZ4 (pyum's
#: inferred encoding, see :mod:`umcore.wire.lbmr_options`).
SECURITY_FLAGS = lbmr_options.EXFUNC_TLS | lbmr_options.EXFUNC_COMPRESSION

# RFC 7919 ffdhe2048, the DH group of UM's default DHE suite (OpenSSL has no DH parameters of
# its own for a server unless given some).  A published constant, not a secret.
FFDHE2048_PEM = b"""-----BEGIN DH PARAMETERS-----
MIIBCAKCAQEA//////////+t+FRYortKmq/cViAnPTzx2LnFg84tNpWp4TZBFGQz
+8yTnc4kmz75fS/jY2MMddj2gbICrsRhetPfHtXV/WVhJDP1H18GbtCFY2VVPe0a
87VXE15/V8k1mE8McODmi3fipona8+/och3xWKE2rec1MKzKT0g6eXq8CrGCsyT7
YdEIqUuyyOP7uWrat2DX9GgdT0Kj3jlN9K5W7edjcrsZCwenyO4KbXCeAvzhzffi
7MA0BM0oNC9hkXL+nOmFg/+OTxIy7vKBg8P+OxtMb61zO7X8vC7CIAXFjvGDfRaD
ssbzSibBsu/6iGtCOGEoXJf//////////wIBAg==
-----END DH PARAMETERS-----
"""


def security_flags(options: tuple[Any, ...]) -> int:
    """The TLS/LZ4 bits a TIR's topic options advertise (0: a plain source)."""
    for opt in options:
        if type(opt) is lbmr_options.ExFuncOption:
            return opt.functionality_flags & SECURITY_FLAGS
    return 0


def _readable(option: str, path: str) -> str:
    """``path`` if it is a readable file, else the ConfigError naming ``option``."""
    try:
        with open(path, "rb") as f:
            f.read(1)
    except OSError as exc:
        raise ConfigError(
            f"cannot read {option} file {path!r}: {exc.strerror or exc}", what=option
        ) from None
    return path


def _suites(text: str) -> str:
    """``tls_cipher_suites`` as an OpenSSL cipher list; each name must be a TLS 1.2 suite."""
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    probe.set_ciphers("ALL:COMPLEMENTOFALL")
    known = [c["name"] for c in probe.get_ciphers() if c["protocol"] != "TLSv1.3"]
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise ConfigError(
            "tls_cipher_suites is empty", what="tls_cipher_suites", allowed="OpenSSL suite names"
        )
    for name in names:
        if name not in known:
            hint = ""
            if "_" in name:
                hint = " (an IANA name? UM takes OpenSSL's names, with dashes)"
            close = difflib.get_close_matches(name, known, n=3)
            raise ConfigError(
                f"unknown TLS 1.2 cipher suite {name!r}{hint}",
                what="tls_cipher_suites",
                allowed=", ".join(close) if close else "OpenSSL TLS 1.2 suite names",
            )
    return ":".join(names)


_dh_file: str | None = None


def _dh_params_file() -> str:
    """A file holding :data:`FFDHE2048_PEM` (``load_dh_params`` reads files only), made once."""
    global _dh_file
    if _dh_file is None or not os.path.exists(_dh_file):
        fd, path = tempfile.mkstemp(prefix="pyum-ffdhe2048-", suffix=".pem")
        with os.fdopen(fd, "wb") as f:
            f.write(FFDHE2048_PEM)
        _dh_file = path
    return _dh_file


def _ssl_context(
    server_side: bool,
    ciphers: str,
    certificate: str,
    key: str,
    password: str | None,
    trusted: str | None,
) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if server_side else ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_ciphers(ciphers)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.options |= ssl.OP_NO_COMPRESSION  # TLS-level compression: never (CRIME); LZ4 is ours
    if server_side:
        ctx.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
        ctx.load_dh_params(_dh_params_file())
    try:
        # A callable, never None: OpenSSL would otherwise ask on the terminal for the
        # password of an encrypted key.
        ctx.load_cert_chain(certificate, key, password=lambda: password or "")
    except ssl.SSLError as exc:
        if exc.reason == "KEY_VALUES_MISMATCH":
            raise ConfigError(
                f"tls_certificate_key {key!r} is not the key of tls_certificate {certificate!r}",
                what="tls_certificate_key",
            ) from None
        with open(key, "rb") as f:
            encrypted = b"ENCRYPTED" in f.read()
        if encrypted:
            raise ConfigError(
                f"tls_certificate_key {key!r} is encrypted and tls_certificate_key_password "
                + ("is wrong" if password else "is not set"),
                what="tls_certificate_key_password",
            ) from None
        raise ConfigError(
            f"tls_certificate {certificate!r} / tls_certificate_key {key!r}: not a PEM "
            f"certificate and its PEM private key ({exc.reason or exc})",
            what="tls_certificate",
        ) from None
    try:
        if trusted:
            ctx.load_verify_locations(cafile=trusted)
        else:
            ctx.load_default_certs(
                ssl.Purpose.CLIENT_AUTH if server_side else ssl.Purpose.SERVER_AUTH
            )
    except ssl.SSLError as exc:
        raise ConfigError(
            f"tls_trusted_certificates {trusted!r} holds no PEM certificate ({exc.reason or exc})",
            what="tls_trusted_certificates",
        ) from None
    return ctx


class Security:
    """A context's TLS and compression setting and its connection counters."""

    __slots__ = (
        "client_context",
        "compression",
        "connections_secured",
        "handshake_failures",
        "negotiation_failures",
        "pending",
        "server_context",
        "timeout",
    )

    def __init__(
        self,
        *,
        server_context: ssl.SSLContext | None = None,
        client_context: ssl.SSLContext | None = None,
        compression: bool = False,
        timeout: float = 5.0,
    ) -> None:
        self.server_context = server_context
        self.client_context = client_context
        self.compression = compression
        #: ``tls_compression_negotiation_timeout``: TLS handshake plus compression hello.
        self.timeout = timeout
        #: Connections that completed their handshake/negotiation, and those that did not
        #: (a TLS handshake that failed or timed out; a compression hello missing or wrong).
        self.connections_secured = 0
        self.handshake_failures = 0
        self.negotiation_failures = 0
        #: Connections still negotiating (closed with the context).
        self.pending: set[_SecureProtocol] = set()

    @classmethod
    def from_options(cls, o: OptionReader) -> Security:
        """The context's setting; ConfigError (option and file named) for any bad input."""
        compression = str(o.get("compression")) == "lz4"
        timeout = o.seconds("tls_compression_negotiation_timeout")
        if not bool(o.get("use_tls")):
            return cls(compression=compression, timeout=timeout)
        files: dict[str, str] = {}
        for option in ("tls_certificate", "tls_certificate_key"):
            value = o.get(option)
            if not value:
                raise ConfigError(
                    f"use_tls 1 needs {option}: UM requires a certificate and its key of every "
                    "context that uses TLS",
                    what=option,
                )
            files[option] = _readable(option, str(value))
        trusted = o.get("tls_trusted_certificates")
        if trusted:
            trusted = _readable("tls_trusted_certificates", str(trusted))
        password = o.get("tls_certificate_key_password")
        ciphers = _suites(str(o.get("tls_cipher_suites")))
        args = (
            ciphers,
            files["tls_certificate"],
            files["tls_certificate_key"],
            str(password) if password else None,
            str(trusted) if trusted else None,
        )
        return cls(
            server_context=_ssl_context(True, *args),
            client_context=_ssl_context(False, *args),
            compression=compression,
            timeout=timeout,
        )

    # ------------------------------------------------------------------ properties
    @property
    def tls(self) -> bool:
        return self.server_context is not None

    @property
    def enabled(self) -> bool:
        """TLS or compression (or both): connections are not plain TCP."""
        return self.server_context is not None or self.compression

    @property
    def flags(self) -> int:
        """The TIR extended-functionality bits this context's sources advertise."""
        return (lbmr_options.EXFUNC_TLS if self.tls else 0) | (
            lbmr_options.EXFUNC_COMPRESSION if self.compression else 0
        )

    def describe(self) -> str:
        parts = ["TLS 1.2"] if self.tls else []
        if self.compression:
            parts.append("LZ4")
        return " + ".join(parts) or "plain"

    # ------------------------------------------------------------------ connections
    def server_factory(
        self, factory: Callable[[], asyncio.Protocol]
    ) -> Callable[[], asyncio.Protocol]:
        """A listener's protocol factory, each connection secured first (unchanged if plain)."""
        if not self.enabled:
            return factory
        return lambda: _SecureProtocol(self, factory(), server_side=True)

    async def connect(
        self,
        factory: Callable[[], asyncio.Protocol],
        host: str,
        port: int,
        *,
        timeout: float,
        local_addr: tuple[str, int] | None = None,
    ) -> asyncio.Transport:
        """``loop.create_connection`` secured: returns the transport the protocol was given,
        once the TLS handshake and compression hello are done.  A connect failing or taking
        longer than ``timeout`` raises OSError/TimeoutError; a failed handshake or negotiation
        raises ConnectionError (logged and counted by then)."""
        loop = asyncio.get_running_loop()
        if not self.enabled:
            tr, _ = await asyncio.wait_for(
                loop.create_connection(factory, host, port, local_addr=local_addr), timeout
            )
            return tr
        ready: asyncio.Future[asyncio.Transport] = loop.create_future()
        secure = _SecureProtocol(self, factory(), server_side=False, ready=ready)
        await asyncio.wait_for(
            loop.create_connection(lambda: secure, host, port, local_addr=local_addr), timeout
        )
        return await ready

    def close(self) -> None:
        """Abort the connections still negotiating (the context is closing)."""
        for p in list(self.pending):
            p.abort()


class _SecureProtocol(asyncio.Protocol):
    """A new connection's protocol until it is secured (see the module docstring)."""

    def __init__(
        self,
        security: Security,
        inner: asyncio.Protocol,
        *,
        server_side: bool,
        ready: asyncio.Future[asyncio.Transport] | None = None,
    ) -> None:
        self.security = security
        self.inner = inner
        self.server_side = server_side
        self.ready = ready
        self.loop = asyncio.get_running_loop()
        self.raw: asyncio.Transport | None = None
        #: The transport under the compression (TLS, or the raw socket without TLS).
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.up = False
        self.failed = False
        self.early: list[bytes] = []
        self.decoder: Lz4Decoder | None = None
        self.wrapper: _Lz4Transport | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.task: asyncio.Task[None] | None = None

    # -------------------------------------------------------------- negotiation
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        raw = cast(asyncio.Transport, transport)
        self.raw = raw
        peer = raw.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.security.pending.add(self)
        self.timer = self.loop.call_later(self.security.timeout, self._timed_out)
        ctx = self.security.server_context if self.server_side else self.security.client_context
        if ctx is None:
            self._secured(raw)
            return
        raw.pause_reading()  # nothing may be read before start_tls takes the socket over
        self.task = self.loop.create_task(self._handshake(raw, ctx))

    async def _handshake(self, raw: asyncio.Transport, ctx: ssl.SSLContext) -> None:
        try:
            tr = await self.loop.start_tls(
                raw,
                self,
                ctx,
                server_side=self.server_side,
                ssl_handshake_timeout=self.security.timeout,
            )
        except asyncio.CancelledError:
            raw.abort()
            raise
        except (OSError, TimeoutError, EOFError) as exc:
            self._fail("TLS handshake", _reason(exc), handshake=True)
            raw.abort()
            return
        if tr is None or self.failed:
            raw.abort()
            return
        self._secured(tr)

    def _secured(self, tr: asyncio.Transport) -> None:
        """TLS is up (or not used): compression hello next, or hand over."""
        self.transport = tr
        if self.security.compression:
            self.decoder = Lz4Decoder()
            tr.write(HELLO)
            early, self.early = self.early, []
            for data in early:
                self.data_received(data)
            return
        self._hand_over(tr)

    def _hand_over(self, tr: asyncio.Transport) -> None:
        self.up = True
        self.security.pending.discard(self)
        self.security.connections_secured += 1
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        inner = self.inner
        if self.decoder is None:
            tr.set_protocol(inner)  # TLS only: the TLS transport feeds the protocol directly
            inner.connection_made(tr)
        else:
            self.wrapper = _Lz4Transport(tr, self)
            inner.connection_made(self.wrapper)
            tr = self.wrapper
        if self.ready is not None and not self.ready.done():
            self.ready.set_result(tr)
        early, self.early = self.early, []
        for data in early:
            if tr.is_closing():
                break
            inner.data_received(data)

    def _fail(self, what: str, reason: str, *, handshake: bool) -> None:
        if self.failed or self.up:
            return
        self.failed = True
        self.security.pending.discard(self)
        if handshake:
            self.security.handshake_failures += 1
        else:
            self.security.negotiation_failures += 1
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        side = "from" if self.server_side else "to"
        log.warning("%s %s %s failed: %s; connection closed", what, side, self.peer, reason)
        if self.ready is not None and not self.ready.done():
            self.ready.set_exception(ConnectionError(f"{what} with {self.peer} failed: {reason}"))

    def _timed_out(self) -> None:
        self.timer = None
        if self.up or self.failed:
            return
        limit = f"{self.security.timeout * 1000:.0f} ms"
        self._fail(
            self._stage(),
            f"not done within tls_compression_negotiation_timeout ({limit})",
            handshake=self._in_handshake(),
        )
        self.abort()

    def _in_handshake(self) -> bool:
        return self.transport is None and self.security.tls

    def _stage(self) -> str:
        return "TLS handshake" if self._in_handshake() else "LZ4 negotiation"

    def abort(self) -> None:
        if self.task is not None and not self.task.done():
            self.task.cancel()
        for tr in (self.transport, self.raw):
            if tr is not None:
                tr.abort()
        self.security.pending.discard(self)

    # -------------------------------------------------------------- asyncio callbacks
    def data_received(self, data: bytes) -> None:
        decoder = self.decoder
        if decoder is None:
            # TLS only, between the handshake's end and the hand-over: kept for the protocol.
            self.early.append(bytes(data))
            return
        try:
            blocks = decoder.receive_data(data)
        except RemoteProtocolError as exc:
            if self.up:
                log.info("dropping %s: %s", self.peer, exc)
                self.security.negotiation_failures += 1
            else:
                self._fail("LZ4 negotiation", str(exc), handshake=False)
            if self.transport is not None:
                self.transport.abort()
            return
        if not self.up:
            if not decoder.hello_seen:
                return
            assert self.transport is not None
            self.early.extend(blocks)
            self._hand_over(self.transport)
            return
        inner = self.inner
        for block in blocks:
            inner.data_received(block)

    def eof_received(self) -> bool | None:
        if self.up:
            return self.inner.eof_received()
        return None

    def pause_writing(self) -> None:
        if self.up:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.up:
            self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.up:
            if self.wrapper is not None:
                self.wrapper.lost()
            self.inner.connection_lost(exc)
            return
        if not self.failed:
            reason = _reason(exc) if exc is not None else "connection closed by the peer"
            self._fail(self._stage(), reason, handshake=self._in_handshake())
        self.abort()


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return f"{exc.reason} ({exc.library or 'SSL'})"
    if isinstance(exc, TimeoutError):
        return "timed out"
    return str(exc) or type(exc).__name__


class _Lz4Transport(asyncio.Transport):
    """What a protocol writes to, compressed: the writes of one loop iteration become one
    block run (flushed at the next ``call_soon``, or at once past :data:`MAX_PENDING`)."""

    # Bytes held before a flush is forced: one LZ4 block's worth.
    MAX_PENDING = 65536

    def __init__(self, tr: asyncio.Transport, proto: _SecureProtocol) -> None:
        super().__init__()
        self._tr = tr
        self._proto = proto
        self._loop = proto.loop
        self._pending: list[bytes] = []
        self._pending_len = 0
        self._scheduled = False
        self._closed = False
        #: Raw bytes written and framed bytes handed to the stream (the compression ratio).
        self.bytes_in = 0
        self.bytes_out = 0

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closed:
            return
        self._pending.append(bytes(data))
        self._pending_len += len(data)
        if self._pending_len >= self.MAX_PENDING:
            self._flush()
        elif not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._flush)

    def writelines(self, list_of_data: Any) -> None:
        for data in list_of_data:
            self.write(data)

    def _flush(self) -> None:
        self._scheduled = False
        if not self._pending or self._closed:
            return
        data = self._pending[0] if len(self._pending) == 1 else b"".join(self._pending)
        self._pending.clear()
        self._pending_len = 0
        framed = encode_blocks(data)
        self.bytes_in += len(data)
        self.bytes_out += sum(map(len, framed))
        self._tr.writelines(framed)

    def get_write_buffer_size(self) -> int:
        return self._pending_len + self._tr.get_write_buffer_size()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._tr.set_write_buffer_limits(high, low)

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._tr.get_write_buffer_limits()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._tr.get_extra_info(name, default)

    def pause_reading(self) -> None:
        self._tr.pause_reading()

    def resume_reading(self) -> None:
        self._tr.resume_reading()

    def is_reading(self) -> bool:
        return self._tr.is_reading()

    def can_write_eof(self) -> bool:
        return False

    def is_closing(self) -> bool:
        return self._closed or self._tr.is_closing()

    def close(self) -> None:
        if not self._closed:
            self._flush()
            self._closed = True
            self._tr.close()

    def abort(self) -> None:
        self._closed = True
        self._pending.clear()
        self._pending_len = 0
        self._tr.abort()

    def lost(self) -> None:
        self._closed = True
        self._pending.clear()
        self._pending_len = 0

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._proto.inner = cast(asyncio.Protocol, protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._proto.inner
