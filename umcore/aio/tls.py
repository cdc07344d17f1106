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
compression both are the plain calls (nothing added to the data path).  Otherwise the socket's
protocol is a :class:`_SecureProtocol` for the connection's whole life: TLS runs sans-IO on an
:class:`ssl.SSLObject` over two memory BIOs (as asyncio's own SSL transport does; not
``loop.start_tls``, which on uvloop stalls handshakes of connections accepted together, and not
``create_server(ssl=...)``, which fails handshakes silently: we must log the peer and the
reason), then the compression hello of :mod:`umcore.wire.lz4stream`, all within
``tls_compression_negotiation_timeout``.  Only then does the real protocol see
``connection_made``, with a :class:`_SecureTransport`: its writes are joined per loop iteration
(at most 64 KiB), framed as one LZ4 block (a batch of small messages compresses as one) and
encrypted in full TLS records.  A handshake or negotiation that fails or times out closes
that connection, logs the peer and the reason and counts it
(:attr:`Security.handshake_failures`, :attr:`Security.negotiation_failures`); the context goes
on.  A plain peer at a TLS port fails the handshake here; a TLS (or compressed) peer at a plain
port sends what the plain side's decoder refuses (request ports count it) or waits unconfirmed
(TCP transport listeners), and fails its handshake on its own side.
"""

from __future__ import annotations

import asyncio
import contextlib
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
        "bytes_compressed",
        "bytes_uncompressed",
        "client_context",
        "compression",
        "connections_secured",
        "handshake_failures",
        "negotiation_failures",
        "pending",
        "server_context",
        "stream_errors",
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
        #: Secured connections lost later to bad TLS records or bad LZ4 blocks.
        self.stream_errors = 0
        #: Bytes written by protocols on compressed connections, and what LZ4 made of them
        #: (framing included): the context's compression ratio.
        self.bytes_uncompressed = 0
        self.bytes_compressed = 0
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

    @classmethod
    def from_files(
        cls,
        *,
        certificate: str | None,
        certificate_key: str | None,
        password: str | None = None,
        trusted: str | None = None,
        cipher_suites: str,
        compression: bool = False,
        timeout: float = 5.0,
    ) -> Security:
        """The same setting from file names given directly (a DRO peer portal's ``<tls>``):
        TLS when ``certificate`` is given, else compression only (or plain).  The same
        ConfigErrors as :meth:`from_options`, naming the ``tls_*`` option each file stands for."""
        if not certificate:
            return cls(compression=compression, timeout=timeout)
        cert = _readable("tls_certificate", certificate)
        key = _readable("tls_certificate_key", certificate_key or "")
        if trusted:
            trusted = _readable("tls_trusted_certificates", trusted)
        args = (_suites(cipher_suites), cert, key, password, trusted)
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
        try:
            await asyncio.wait_for(
                loop.create_connection(lambda: secure, host, port, local_addr=local_addr),
                timeout,
            )
            return await ready
        except BaseException:
            if not secure.up:
                secure.abort()
            if ready.done() and not ready.cancelled():
                ready.exception()  # retrieved: the caller gets the exception raised here
            raise

    def close(self) -> None:
        """Abort the connections still negotiating (the context is closing)."""
        for p in list(self.pending):
            p.abort()


class _SecureProtocol(asyncio.Protocol):
    """A secured connection's protocol on the socket, for its whole life (module docstring).

    Up: bytes from the socket -> TLS (an :class:`ssl.SSLObject` on memory BIOs) -> the LZ4
    decoder -> the real protocol.  Down: the real protocol writes to a :class:`_SecureTransport`
    -> LZ4 blocks (the writes of one loop iteration together) -> TLS records -> the socket."""

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
        self.peer = "?"
        self.up = False
        self.failed = False
        self.closed = False
        self.timer: asyncio.TimerHandle | None = None
        ctx = security.server_context if server_side else security.client_context
        self.tls: ssl.SSLObject | None = None
        self.incoming = ssl.MemoryBIO()
        self.outgoing = ssl.MemoryBIO()
        if ctx is not None:
            self.tls = ctx.wrap_bio(self.incoming, self.outgoing, server_side=server_side)
        self.handshaken = self.tls is None
        self.decoder: Lz4Decoder | None = Lz4Decoder() if security.compression else None
        self.transport = _SecureTransport(self)
        #: Plain bytes that arrived before the hand-over (after the hello, in its read).
        self.early: list[bytes] = []

    # -------------------------------------------------------------- negotiation
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        raw = cast(asyncio.Transport, transport)
        self.raw = raw
        peer = raw.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.security.pending.add(self)
        self.timer = self.loop.call_later(self.security.timeout, self._timed_out)
        if self.tls is not None:
            self._handshake()  # the client's ClientHello goes out here
        else:
            self._negotiate()

    def _handshake(self) -> None:
        tls = self.tls
        assert tls is not None
        try:
            tls.do_handshake()
        except ssl.SSLWantReadError:
            self._send_records()
            return
        except (ssl.SSLError, OSError) as exc:
            self._send_records()  # the alert, if OpenSSL wrote one
            self._fail("TLS handshake", _reason(exc), handshake=True)
            return
        self._send_records()
        self.handshaken = True
        self._negotiate()

    def _negotiate(self) -> None:
        """TLS is up (or not used): send the compression hello, or hand over."""
        if self.decoder is not None:
            self._write_plain(HELLO)
            return
        self._hand_over()

    def _hand_over(self) -> None:
        self.up = True
        self.security.pending.discard(self)
        self.security.connections_secured += 1
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.inner.connection_made(self.transport)
        if self.ready is not None and not self.ready.done():
            self.ready.set_result(self.transport)
        early, self.early = self.early, []
        for data in early:
            if self.closed:
                break
            self.inner.data_received(data)

    def _fail(self, what: str, reason: str, *, handshake: bool) -> None:
        if self.failed:
            return
        self.failed = True
        self.security.pending.discard(self)
        if self.up:
            self.security.stream_errors += 1
            log.info("dropping %s: %s: %s", self.peer, what, reason)
        else:
            if handshake:
                self.security.handshake_failures += 1
            else:
                self.security.negotiation_failures += 1
            side = "from" if self.server_side else "to"
            log.warning("%s %s %s failed: %s; connection closed", what, side, self.peer, reason)
            if self.ready is not None and not self.ready.done():
                self.ready.set_exception(
                    ConnectionError(f"{what} with {self.peer} failed: {reason}")
                )
        self.abort()

    def _timed_out(self) -> None:
        self.timer = None
        if self.up or self.failed:
            return
        limit = f"{self.security.timeout * 1000:.0f} ms"
        self._fail(
            self._stage(),
            f"not done within tls_compression_negotiation_timeout ({limit})",
            handshake=not self.handshaken,
        )

    def _stage(self) -> str:
        return "LZ4 negotiation" if self.handshaken else "TLS handshake"

    def abort(self) -> None:
        self.closed = True
        self.security.pending.discard(self)
        if self.ready is not None and not self.ready.done():
            self.ready.set_exception(ConnectionError(f"connection to {self.peer} closed"))
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.raw is not None:
            self.raw.abort()

    # -------------------------------------------------------------- the two layers
    def _send_records(self) -> None:
        """Whatever TLS has for the socket (records, alerts), written."""
        if self.outgoing.pending and self.raw is not None:
            self.raw.write(self.outgoing.read())

    def _write_plain(self, data: bytes | bytearray | memoryview) -> None:
        """Bytes below the LZ4 layer (hello, blocks) or of the protocol (no LZ4): encrypted
        when TLS is on, then written."""
        tls = self.tls
        if tls is None:
            if self.raw is not None:
                self.raw.write(data)
            return
        view = memoryview(data)
        try:
            while view:
                n = tls.write(view)
                view = view[n:]
        except (ssl.SSLError, OSError) as exc:
            self._fail("TLS", _reason(exc), handshake=False)
            return
        self._send_records()

    def data_received(self, data: bytes) -> None:
        if self.failed or self.closed:
            return
        tls = self.tls
        if tls is None:
            self._plain_received(data)
            return
        self.incoming.write(data)
        if not self.handshaken:
            self._handshake()
            if not self.handshaken or self.failed:
                return
        # OpenSSL hands out one record (<= 16 KiB) per read: the records of one socket read
        # go up together, as one chunk (the protocol's fast paths want big reads).
        read = tls.read
        chunks: list[bytes] = []
        try:
            while True:
                chunk = read(READ_SIZE)
                if not chunk:
                    break  # close_notify: the peer's TCP close follows
                chunks.append(chunk)
        except (ssl.SSLWantReadError, ssl.SSLZeroReturnError):
            pass
        except (ssl.SSLError, OSError) as exc:
            self._fail("TLS", _reason(exc), handshake=False)
            return
        self._send_records()
        if chunks:
            self._plain_received(chunks[0] if len(chunks) == 1 else b"".join(chunks))

    def _plain_received(self, data: bytes) -> None:
        decoder = self.decoder
        if decoder is None:
            if self.up:
                self.inner.data_received(data)
            else:
                self.early.append(data)
            return
        try:
            blocks = decoder.receive_data(data)
        except RemoteProtocolError as exc:
            self._fail("LZ4 negotiation" if not self.up else "LZ4", str(exc), handshake=False)
            return
        if not self.up:
            if not decoder.hello_seen:
                return
            self.early.extend(blocks)
            self._hand_over()
            return
        inner = self.inner
        for block in blocks:
            if self.closed:
                return
            inner.data_received(block)

    # -------------------------------------------------------------- asyncio callbacks
    def eof_received(self) -> bool | None:
        if self.up and not self.closed:
            return self.inner.eof_received()
        return None

    def pause_writing(self) -> None:
        if self.up:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.up:
            self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self.security.pending.discard(self)
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.transport.lost()
        if self.up:
            self.closed = True
            self.inner.connection_lost(exc)
            return
        if not self.failed and not self.closed:
            reason = _reason(exc) if exc is not None else "connection closed by the peer"
            self._fail(self._stage(), reason, handshake=not self.handshaken)
        self.closed = True


# Most plain bytes taken from TLS per read call: one TLS record holds at most 16 KiB.
READ_SIZE = 16384


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError) and exc.reason:
        verify = getattr(exc, "verify_message", None)
        detail = f": {verify}" if verify else ""
        return f"{exc.reason}{detail} ({exc.library or 'SSL'})"
    if isinstance(exc, TimeoutError):
        return "timed out"
    return str(exc) or type(exc).__name__


class _SecureTransport(asyncio.Transport):
    """What the protocol of a secured connection writes to (module docstring).  The writes of
    one loop iteration are taken together at the next ``call_soon`` (or at once past
    :attr:`MAX_PENDING`): a batch of small messages compresses as one LZ4 block, and TLS makes
    full 16 KiB records of them (one OpenSSL call each, not one per write)."""

    # Bytes held before a flush is forced: one LZ4 block's worth, four full TLS records.
    MAX_PENDING = 65536

    def __init__(self, proto: _SecureProtocol) -> None:
        super().__init__()
        self._proto = proto
        self._loop = proto.loop
        self._compress = proto.decoder is not None
        self._pending: list[bytes] = []
        self._pending_len = 0
        self._scheduled = False
        self._closed = False

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
        self.write(b"".join(list_of_data))

    def _flush(self) -> None:
        self._scheduled = False
        if not self._pending or self._closed:
            return
        data = self._pending[0] if len(self._pending) == 1 else b"".join(self._pending)
        self._pending.clear()
        self._pending_len = 0
        if not self._compress:
            self._proto._write_plain(data)
            return
        framed = b"".join(encode_blocks(data))
        security = self._proto.security
        security.bytes_uncompressed += len(data)
        security.bytes_compressed += len(framed)
        self._proto._write_plain(framed)

    def _raw(self) -> asyncio.Transport | None:
        return self._proto.raw

    def get_write_buffer_size(self) -> int:
        raw = self._raw()
        return self._pending_len + (raw.get_write_buffer_size() if raw is not None else 0)

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        raw = self._raw()
        if raw is not None:
            raw.set_write_buffer_limits(high, low)

    def get_write_buffer_limits(self) -> tuple[int, int]:
        raw = self._raw()
        return raw.get_write_buffer_limits() if raw is not None else (0, 0)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        tls = self._proto.tls
        if tls is not None:
            if name == "ssl_object":
                return tls
            if name == "cipher":
                return tls.cipher()
            if name == "peercert":
                return tls.getpeercert()
        raw = self._raw()
        return raw.get_extra_info(name, default) if raw is not None else default

    def pause_reading(self) -> None:
        raw = self._raw()
        if raw is not None and not self._closed:
            raw.pause_reading()

    def resume_reading(self) -> None:
        raw = self._raw()
        if raw is not None and not self._closed:
            raw.resume_reading()

    def is_reading(self) -> bool:
        raw = self._raw()
        return raw is not None and raw.is_reading()

    def can_write_eof(self) -> bool:
        return False

    def is_closing(self) -> bool:
        raw = self._raw()
        return self._closed or raw is None or raw.is_closing()

    def close(self) -> None:
        """Graceful: what is pending goes out, then TLS's close_notify, then FIN."""
        if self._closed:
            return
        self._flush()
        self._closed = True
        proto = self._proto
        proto.closed = True
        tls = proto.tls
        if tls is not None and proto.handshaken and not proto.failed:
            with contextlib.suppress(ssl.SSLError, OSError):
                tls.unwrap()
            proto._send_records()
        raw = self._raw()
        if raw is not None:
            raw.close()

    def abort(self) -> None:
        self.lost()
        self._proto.abort()

    def lost(self) -> None:
        self._closed = True
        self._pending.clear()
        self._pending_len = 0

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._proto.inner = cast(asyncio.Protocol, protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._proto.inner
