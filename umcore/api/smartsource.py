"""Smart Sources (seed 003 chapter 11): a send path with pre-allocated buffers for fixed-size
messages, the LBMC header written in place.

Theory of operation
-------------------
UM's Smart Source (``lbm_ssrc_*``) pre-allocates its message buffers and headers so that a send
allocates nothing.  pyum's :class:`SmartSource` keeps that shape in Python:

- at creation, one ``bytearray`` holds ``smart_src_user_buffer_count`` slots; each slot is an
  LBMC data message: the header (12 bytes, or 24 with ``smart_src_enable_spectrum_channel`` 1:
  an APPHDR_CHAIN with one CHANNEL_NUMBER element) followed by ``smart_src_max_message_length``
  bytes of payload.  :meth:`SmartSource.buffer` returns the payload part of slot ``i`` as a
  writable ``memoryview`` (UM's ``lbm_ssrc_buff_get``): the application writes its message
  there, once, and may reuse the slot as soon as :meth:`SmartSource.send` returned;
- :meth:`SmartSource.send` writes the sequence number (and the channel) into the slot's header
  with ``struct.pack_into`` and hands the slot's ``memoryview`` -- prepared at creation for the
  full length -- to the transport core as a framed message (``send_framed``), flushed at once
  (UM's smart sources do not batch).  The only copy is the transport's: the core joins the
  frame into the datagram or TCP write it hands the socket, as it does for every message.
  Fixed-size messages (``length`` omitted) create no Python object in this module; a shorter
  ``length`` slices the slot (one ``memoryview``);
- the header template comes from :func:`umcore.wire.lbmc.encode` at creation (the wire layout
  is the codec's); a send patches ``msglen`` (offset 2), ``sqn`` (offset 8) and the channel
  (the last 4 header bytes).

UM's restrictions, kept: no batching, no message properties, application headers, HF,
requests or retention (a source with ``late_join`` 1 or Stores is refused: smart sources keep
their own retention in UM, ``smart_src_retention_buffer_count``, which pyum does not
implement); a message no longer than ``smart_src_max_message_length`` (no fragmentation).  A
send while a slow receiver blocks the session raises :class:`~umcore.errors.WouldBlock`
(``await ss.wait_writable()`` waits).  ``LBM_SMART_SOURCE_CHECK``'s argument checks are always
on (a bad index or length raises).

**Zero-copy** in UM (``lbm_src_buff_acquire`` / ``LBM_SRC_SEND_ZERO_COPY``) lets the
application build the message in the transport's own buffer.  The smart source's slots are
that buffer here: the application's bytes are written once, into the slot, and copied once
more by the kernel-facing join; an application using ``send`` with ``bytes`` instead has one
copy more (``bytes`` built by the application).  A true scatter/gather send (``sendmsg`` of
header and slot) would save the join but cost a Python list per message, which is what this
path avoids.
"""

from __future__ import annotations

import struct
from typing import Any

from umcore.errors import ConfigError, UMError
from umcore.features.spectrum import channel_element, check_channel
from umcore.wire import lbmc

__all__ = ["SmartSource"]

_U16 = struct.Struct("!H")
_U32 = struct.Struct("!I")
_MSGLEN_AT = 2  # LBMC data header: type(1) next_hdr(1) msglen(2) tidx(4) sqn(4)
_SQN_AT = 8


class SmartSource:
    """A smart source over an API source (see the module docstring); create with
    ``await ctx.create_smart_source(topic)``."""

    __slots__ = (
        "_channel_at",
        "_full",
        "_header",
        "_payload_views",
        "_session",
        "_slot",
        "_store",
        "_views",
        "buffer_count",
        "max_message_length",
        "sent",
        "source",
        "spectrum",
    )

    def __init__(self, source: Any, options: Any) -> None:
        if not source.plain or source.gate is not None:
            raise ConfigError(
                f"smart source {source.topic!r}: not with late_join, retention or Stores "
                "(smart_src_retention_buffer_count is not implemented)",
                what="late_join",
                allowed="0",
            )
        #: The underlying topic source (its source string, events, close).
        self.source = source
        self._session = source.session
        self.max_message_length = int(options.get("smart_src_max_message_length"))
        self.buffer_count = int(options.get("smart_src_user_buffer_count"))
        self.spectrum = bool(options.get("smart_src_enable_spectrum_channel"))
        core = source.core
        if self.max_message_length > core.max_payload:
            raise ConfigError(
                f"smart_src_max_message_length {self.max_message_length} exceeds this "
                f"transport's largest unfragmented message ({core.max_payload} bytes)",
                what="smart_src_max_message_length",
                allowed=f"1..{core.max_payload}",
            )
        headers: list[lbmc.Header] = (
            [lbmc.ApphdrChain((channel_element(0),))] if self.spectrum else []
        )
        template = lbmc.encode(lbmc.LBMCMessage(lbmc.MSG_DATA, source.tidx, 0, headers, b""))
        self._header = len(template)
        self._channel_at = self._header - 4 if self.spectrum else -1
        slot = self._header + self.max_message_length
        self._slot = slot
        store = bytearray(slot * self.buffer_count)
        for i in range(self.buffer_count):
            store[i * slot : i * slot + self._header] = template
        self._store = store
        view = memoryview(store)
        #: Whole slots (header + full payload): what a fixed-size send hands the core.
        self._views = [view[i * slot : (i + 1) * slot] for i in range(self.buffer_count)]
        self._payload_views = [v[self._header :] for v in self._views]
        full = self._header + self.max_message_length
        self._full = full
        for i in range(self.buffer_count):
            _U16.pack_into(store, i * slot + _MSGLEN_AT, full)
        #: Messages sent.
        self.sent = 0

    def buffer(self, index: int) -> memoryview:
        """Slot ``index``'s payload (``smart_src_max_message_length`` writable bytes)."""
        if not 0 <= index < self.buffer_count:
            raise UMError(f"smart source buffer index {index} not in 0..{self.buffer_count - 1}")
        return self._payload_views[index]

    def send(self, index: int, length: int | None = None, channel: int | None = None) -> None:
        """``lbm_ssrc_send_ex``: send slot ``index`` (its first ``length`` payload bytes; all of
        them when omitted), on Spectrum ``channel`` when given (needs
        ``smart_src_enable_spectrum_channel`` 1).  Raises :class:`WouldBlock` while a slow
        receiver blocks the session, :class:`UMError` when the source is closed."""
        src = self.source
        writer = src.writer
        if writer.paused or src.closed:
            src.check()
            src.refuse_if_blocked()
        if not 0 <= index < self.buffer_count:
            raise UMError(f"smart source buffer index {index} not in 0..{self.buffer_count - 1}")
        store = self._store
        base = index * self._slot
        if channel is None and self.spectrum:
            # Without a channel the reserved header does not fit: framed anew (UM rebuilds
            # its header too), a copy of the payload.
            n = self.max_message_length if length is None else length
            src.send_nowait(bytes(self._payload_views[index][:n]), True)
            self.sent += 1
            return
        if channel is not None:
            if not self.spectrum:
                raise UMError("smart source created without smart_src_enable_spectrum_channel")
            _U32.pack_into(store, base + self._channel_at, check_channel(channel))
        if length is None:
            frame = self._views[index]
        else:
            if not 0 <= length <= self.max_message_length:
                raise UMError(f"length {length} not in 0..{self.max_message_length}")
            frame = self._views[index][: self._header + length]
            _U16.pack_into(store, base + _MSGLEN_AT, self._header + length)
        core = src.core
        tidx = src.tidx
        sqn = core.next_sequence_number(tidx)
        _U32.pack_into(store, base + _SQN_AT, sqn)
        out: Any = core.send_framed(tidx, frame, sqn, src.context.loop.time(), True)
        if out is frame:
            # A batch of one frame is handed on as the frame itself (TCP): the write may keep
            # it past this call while the slot is reused, so it becomes bytes here -- the
            # transport's one copy (a datagram's join, on LBT-RM).
            out = bytes(frame)
        if length is not None:
            _U16.pack_into(store, base + _MSGLEN_AT, self._full)
        # SourceSession.write's steps, with the one-receiver shortcut send_nowait takes.
        one = writer.single
        if one is not None:
            one.write(out)
        else:
            writer.write(out)
        if writer.paused:
            core.end_run()  # that write blocked the session
        if core.timer_dirty:
            self._session.rearm()
        self.sent += 1

    async def wait_writable(self) -> None:
        """Wait while a slow receiver blocks the session (UM's blocking send's wait)."""
        await self.source.wait_writable()

    async def close(self) -> None:
        """Delete the smart source (its topic source)."""
        await self.source.close()
