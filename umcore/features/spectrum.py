"""Spectrum (seed 003 10.16): channels within a topic, and the chain elements that carry them.

Theory of operation
-------------------
A Spectrum source sends each message on a *channel*, a number the application picks; a
receiver subscribes to the channels it wants, each with its own callback or none (then the
receiver's own callback gets them).  Topic resolution advertises topics, never channels, and
every message of a topic travels in the one topic stream, so messages are delivered in order
across channels.

On the wire the channel number is an APPHDR_CHAIN element (LBMC header 0x07) of type 1
(CHANNEL_NUMBER, wire-lbmc-ump.md 5): ``next(1) len(1)=8 res(2) channel(4)``, the channel a
32-bit big-endian unsigned number [inferred: UM's C type is ``lbm_ulong_t`` and tshark 4.0.17
shows the element's data undecoded; we keep the 32-bit range UM documents for Java/.NET].  The
HF sequence number rides in the same chain (:mod:`umcore.features.hotfailover`).

:class:`ChannelMap` is a receiver's subscription table and the routing rule UM documents:

- a message on a subscribed channel goes to that channel's callback (the receiver's own when
  the channel was subscribed without one);
- a message on a channel not subscribed: ``unrecognized_channel_behavior`` "deliver" (default)
  hands it to the receiver's callback, "discard" drops it;
- a message without channel: ``null_channel_behavior`` likewise;
- a receiver with no subscription at all delivers everything to its callback, with the
  channel number still readable (UM does not create ``channel_info`` there; pyum's
  ``msg.channel_info`` is set whenever the message carried a channel: harmless and useful);
- only DATA and REQUEST go to channel callbacks; BOS, EOS and loss events always go to the
  receiver's callback (seed 10.16.3).  That rule is the caller's (it routes data only).

Sans-IO: no sockets, no time.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from typing import Any

from umcore.errors import ConfigError
from umcore.wire import lbmc

__all__ = [
    "DELIVER",
    "DISCARD",
    "MAX_CHANNEL",
    "ROUTE_DISCARD",
    "ROUTE_RECEIVER",
    "ChannelMap",
    "channel_element",
    "channel_of",
]

# Channel numbers are 32-bit unsigned (see the module docstring).
MAX_CHANNEL = 0xFFFFFFFF
# Subscriptions one receiver may hold: UM sizes a hash table by channel_map_tablesz but does
# not cap it; a Python dict needs no sizing, and this bound keeps one receiver from growing
# without limit on a bug (a loop subscribing ever new channels).
MAX_SUBSCRIPTIONS = 1_000_000

DELIVER = "deliver"
DISCARD = "discard"

_U32 = struct.Struct("!I")

#: What :meth:`ChannelMap.route` returns when the receiver's own callback gets the message.
ROUTE_RECEIVER: Any = object()
#: What :meth:`ChannelMap.route` returns when the message is dropped.
ROUTE_DISCARD: Any = None


def check_channel(channel: int) -> int:
    if type(channel) is not int or not 0 <= channel <= MAX_CHANNEL:
        raise ConfigError(
            f"Spectrum channel must be an int 0..{MAX_CHANNEL}", source="API", what=repr(channel)
        )
    return channel


def channel_element(channel: int) -> lbmc.ApphdrElement:
    """The APPHDR_CHAIN element carrying ``channel`` (build it once per channel and reuse it)."""
    return lbmc.ApphdrElement(lbmc.APPHDR_ELEM_CHANNEL, _U32.pack(check_channel(channel)))


def channel_of(headers: Iterable[Any]) -> int | None:
    """The channel number a received message carries, or None (no chain, no channel element,
    or an element too short to hold one: a peer's bad element is ignored, not fatal)."""
    for h in headers:
        if type(h) is lbmc.ApphdrChain:
            for e in h.elements:
                if e.elem_type == lbmc.APPHDR_ELEM_CHANNEL and len(e.data) >= 4:
                    value: int = _U32.unpack_from(e.data)[0]
                    return value
            return None
    return None


def _behaviour(name: str, value: object) -> str:
    text = str(value).lower()
    if text not in (DELIVER, DISCARD):
        raise ConfigError(f"bad {name}", what=str(value), allowed="deliver, discard")
    return text


class ChannelMap:
    """One receiver's Spectrum subscriptions and routing (see the module docstring)."""

    __slots__ = ("null_discard", "subscriptions", "unrecognized_discard")

    def __init__(self, null_behavior: object = DELIVER, unrecognized_behavior: object = DELIVER):
        self.null_discard = _behaviour("null_channel_behavior", null_behavior) == DISCARD
        self.unrecognized_discard = (
            _behaviour("unrecognized_channel_behavior", unrecognized_behavior) == DISCARD
        )
        #: channel -> its callback (None: the receiver's own).
        self.subscriptions: dict[int, Callable[..., object] | None] = {}

    @property
    def active(self) -> bool:
        """True when routing can differ from "everything to the receiver's callback"."""
        return bool(self.subscriptions) or self.null_discard

    def subscribe(self, channel: int, callback: Callable[..., object] | None) -> None:
        check_channel(channel)
        if channel not in self.subscriptions and len(self.subscriptions) >= MAX_SUBSCRIPTIONS:
            raise ConfigError(f"more than {MAX_SUBSCRIPTIONS} Spectrum channel subscriptions")
        self.subscriptions[channel] = callback

    def unsubscribe(self, channel: int) -> bool:
        """Forget ``channel``; False when it was not subscribed (UM returns an error then)."""
        return self.subscriptions.pop(check_channel(channel), False) is not False

    def route(self, channel: int | None) -> Any:
        """Where a data message on ``channel`` goes: a channel callback, :data:`ROUTE_RECEIVER`
        or :data:`ROUTE_DISCARD`."""
        if channel is None:
            return ROUTE_DISCARD if self.null_discard else ROUTE_RECEIVER
        subs = self.subscriptions
        if channel in subs:
            cb = subs[channel]
            return ROUTE_RECEIVER if cb is None else cb
        if not subs:
            return ROUTE_RECEIVER  # no subscription at all: everything (seed 10.16)
        return ROUTE_DISCARD if self.unrecognized_discard else ROUTE_RECEIVER
