"""Immediate messaging and requests on a context: UIM, MIM, and request objects.

Theory of operation
-------------------
:class:`FeatureAPI` is mixed into :class:`~umcore.api.context.Context`: the public methods of
UM's immediate messaging (``lbm_unicast_immediate_message``, ``lbm_multicast_immediate_message``
and their request variants) over the engine's features (:mod:`umcore.engine.features`: the
request port, the MIM sockets, the request table).  Responses to requests reach the
``on_response`` callback until the returned :class:`~umcore.engine.features.Request` is closed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from umcore.engine.features import ContextFeatures, Request
from umcore.engine.message import Message
from umcore.features import immediate as im
from umcore.features.properties import AppHeader, MessageProperties, encode_extras
from umcore.wire import lbmc

__all__ = ["FeatureAPI", "OnImmediate", "OnResponse"]

OnResponse = Callable[[Message], object]
OnImmediate = Callable[[Message], object]


class FeatureAPI:
    """The context methods of immediate messaging and requests (mixed into Context)."""

    features: ContextFeatures
    #: The engine's DRO routing (:mod:`umcore.engine.dro`): where a UIM goes and its headers.
    uim_route: Callable[[str], tuple[tuple[str, int], list[Any]]]
    source_uim_headers: Callable[[str], list[Any]]

    @property
    def request_address(self) -> str | None:
        """This context's UIM address ``TCP:ip:port`` (None without a request port)."""
        return self.features.request_address

    def send_uim(
        self,
        dest: str,
        data: bytes,
        *,
        topic: str | None = None,
        properties: MessageProperties | None = None,
        app_headers: Sequence[AppHeader] = (),
    ) -> None:
        """Unicast immediate message to ``"TCP:ip:port"`` or ``"SOURCE:" + msg.source`` (the
        context of a source this context receives from, seed 10.15: its receivers of ``topic``
        or its immediate-message callbacks get it) (``lbm_unicast_immediate_message``);
        queued, not awaited: raises WouldBlock when the connection's queue is full."""
        self._uim(dest, data, topic, None, properties, app_headers)

    def send_uim_request(
        self,
        dest: str,
        data: bytes,
        on_response: OnResponse,
        *,
        topic: str | None = None,
        clientd: Any = None,
    ) -> Request:
        feat = self.features
        port = feat.require_port()
        qidx = feat.requests.open(on_response, clientd)
        self._uim(dest, data, topic, (qidx, feat.ip, port.port), None, ())
        return Request(feat, qidx)

    def _uim(
        self,
        dest: str,
        data: bytes,
        topic: str | None,
        request: tuple[int, str, int] | None,
        properties: MessageProperties | None,
        app_headers: Sequence[AppHeader],
    ) -> None:
        feat = self.features
        port = feat.require_port()
        if dest[:7].upper() == "SOURCE:":  # sending to a source (seed 10.15)
            addr = feat.source_address(dest[7:])
            via = self.source_uim_headers(dest[7:])  # a DRO proxy source: to its origin
        else:
            addr, via = self.uim_route(dest)  # another domain: through its DRO
        extra, tail = encode_extras(properties, app_headers)
        extra = [*via, *extra] if via else extra
        stream, sqn = port.next_stream(addr)
        raw = im.encode_uim(bytes(data) + tail, topic=topic, ctxinst=feat.ctxinst,
                            stream_id=stream, sqn=sqn, request=request, extra=extra)  # fmt: skip
        port.send(addr, raw)

    def send_mim(
        self,
        topic: str | None,
        data: bytes,
        *,
        properties: MessageProperties | None = None,
    ) -> None:
        """Multicast immediate message (``lbm_multicast_immediate_message``)."""
        extra, tail = encode_extras(properties, ())
        self.features.send_mim(topic, bytes(data) + tail, extra)

    def send_mim_request(
        self, topic: str | None, data: bytes, on_response: OnResponse, *, clientd: Any = None
    ) -> Request:
        feat = self.features
        port = feat.require_port()
        qidx = feat.requests.open(on_response, clientd)
        hdr = lbmc.Request(0, 0, qidx, port.port, 0, lbmc.ip4_from_str(feat.ip))
        feat.send_mim(topic, bytes(data), [hdr])
        return Request(feat, qidx)
