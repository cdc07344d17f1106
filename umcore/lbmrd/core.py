"""The lbmrd relay: unicast UDP topic resolution as a sans-IO core.

Theory of operation
-------------------
lbmrd (the "LBM resolver daemon") lets contexts that cannot use multicast do UDP topic resolution:
each context sends its TIRs (Topic Information Records, advertisements), TQRs (Topic Query
Records) and keepalives to lbmrd by unicast, and lbmrd forwards every TIR/TQR datagram to every
other context it knows, "simulating multicast" (seed 003 L2985-3008, L9644-9710; our notes
seed-srs-lbmrd.md 2.4).  It keeps **no topic state**: only a table of clients, keyed by the
(IP, UDP port) a datagram came from, with the time each was last heard.

:class:`LbmrdRelay` is that behaviour without any I/O:

- :meth:`LbmrdRelay.receive_datagram` takes one datagram, its source address and ``now`` and
  returns the datagrams to send, as ``(payload, address)`` pairs, all to go out from the listening
  socket (clients drop topic resolution from an unknown source by default).
  * Anything that is not LBMR (shorter than the 4-byte header, a version other than 0/1, the
    undefined type 5) or that is malformed is dropped and counted; its sender is not registered.
  * A client keepalive (LBMR type 2 "Receiver Alive" / type 3 "Source Alive", no records)
    registers or refreshes the sender and is answered at once with a resolver keepalive (type 0,
    no records), so the client's ``resolver_unicast_activity_timeout`` (1000 ms) stays fed; it is
    never forwarded.  A resolver keepalive received from a peer refreshes it and is dropped.
  * Anything else (TIRs/TQRs, wildcard TQRs, topic management, UMQ, extended types) registers or
    refreshes the sender and is forwarded to every other active client.  When a ``<transform>``
    exists from the sender's domain to a recipient's domain, the TIR transport addresses in the
    copy for that recipient are rewritten (NAT, below); other copies are the datagram as received.
- :meth:`LbmrdRelay.handle_timer` runs the two periodic duties: every ``activity`` seconds remove
  the clients not heard from for ``ttl`` seconds; and send a resolver keepalive to every client
  we have sent nothing to for :data:`RESOLVER_KEEPALIVE_INTERVAL` (clients declare an lbmrd dead
  after 1000 ms of silence).  :meth:`LbmrdRelay.next_timer` is the next deadline.

NAT (seed 003 L3010-3089): a client's domain is the ``<domain>`` with the most specific
``<network>`` containing its IP (no match: no domain, never transformed).  A datagram forwarded
from a client in domain S to a client in domain D goes through the rules of ``transform(S, D)``:
in every TCP / LBT-RU transport address of every TIR, the first rule whose match address equals
the IP (and match port, unless ``*``) replaces the IP (and the port, unless ``*``).  The copy is
made once per destination domain per datagram.  A datagram whose TIRs cannot be parsed when a
rewrite is needed is dropped as malformed (forwarding an unrewritable advertisement across the NAT
would hand receivers addresses they cannot reach).

Zero copy: when no rewrite applies, the payload returned IS the ``data`` object handed in (often
a ``memoryview`` over the adapter's receive buffer), so the caller must send the output before it
reuses that buffer.  Rewritten copies are new ``bytes``.
"""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Iterable, Sequence

import umcore.wire.lbmr as lbmr

__all__ = [
    "MAX_CLIENTS",
    "RESOLVER_KEEPALIVE_CHECK",
    "RESOLVER_KEEPALIVE_INTERVAL",
    "LbmrdRelay",
    "NatRule",
    "NatTable",
    "RelayCounters",
]

Address = tuple[str, int]
Payload = bytes | bytearray | memoryview
Output = list[tuple[Payload, Address]]

# Bound on the client table.  Every forwarded datagram is copied to every client, so a table much
# beyond a few thousand means a fan-out no single lbmrd process sustains; the bound also keeps a
# flood of spoofed sources from growing memory without limit.  Datagrams from clients refused
# while the table is full are dropped and counted (``clients_refused``).
MAX_CLIENTS = 4096

# Clients declare an lbmrd inactive after resolver_unicast_activity_timeout (1000 ms by default)
# without hearing from it, checked every 200 ms.  We keepalive a client we have sent nothing to
# for 500 ms, checking every 100 ms, so the longest silence a client sees is ~600 ms.
RESOLVER_KEEPALIVE_INTERVAL = 0.5
RESOLVER_KEEPALIVE_CHECK = 0.1

_PORT = struct.Struct("!H")
_NOT_LBMR_TYPE = 5  # the one undefined LBMR type (tshark: "Unknown LBMR type")


class NatRule:
    """One ``<rule>``: ``match_port``/``replace_port`` ``None`` mean ``*`` (any / keep)."""

    __slots__ = ("match_ip", "match_port", "replace_ip", "replace_port")

    def __init__(
        self, match_ip: str, match_port: int | None, replace_ip: str, replace_port: int | None
    ) -> None:
        self.match_ip = ipaddress.IPv4Address(match_ip).packed
        self.match_port = match_port
        self.replace_ip = ipaddress.IPv4Address(replace_ip).packed
        self.replace_port = replace_port

    def __repr__(self) -> str:
        def port(p: int | None) -> str:
            return "*" if p is None else str(p)

        return (
            f"NatRule({ipaddress.IPv4Address(self.match_ip)}:{port(self.match_port)} -> "
            f"{ipaddress.IPv4Address(self.replace_ip)}:{port(self.replace_port)})"
        )


class NatTable:
    """Domains (name -> networks) and transforms ((source, destination) -> rules)."""

    __slots__ = ("_networks", "transforms")

    def __init__(
        self,
        domains: Iterable[tuple[str, Iterable[ipaddress.IPv4Network]]] = (),
        transforms: Iterable[tuple[str, str, Sequence[NatRule]]] = (),
    ) -> None:
        nets: list[tuple[int, int, int, str]] = []
        for name, networks in domains:
            for net in networks:
                nets.append((net.prefixlen, int(net.network_address), int(net.netmask), name))
        # Most specific network first, so the first containing network decides the domain.
        nets.sort(key=lambda n: -n[0])
        self._networks = [(addr, mask, name) for _, addr, mask, name in nets]
        self.transforms: dict[tuple[str, str], tuple[NatRule, ...]] = {}
        for source, destination, rules in transforms:
            key = (source, destination)
            self.transforms[key] = self.transforms.get(key, ()) + tuple(rules)
        # A transform whose rules can never match anything (the seed's "dummy" configuration
        # matches 0.0.0.0 port 0) is kept: it is harmless and the operator wrote it.

    @property
    def active(self) -> bool:
        """True when at least one transform exists (otherwise no datagram is ever parsed)."""
        return bool(self.transforms)

    def domain_of(self, ip: str) -> str | None:
        """The domain whose most specific network contains ``ip``, or None."""
        try:
            value = int(ipaddress.IPv4Address(ip))
        except ValueError:
            return None
        for addr, mask, name in self._networks:
            if value & mask == addr:
                return name
        return None

    def rewrite(
        self, data: Payload, slots: Sequence[tuple[int, int, int]], rules: Sequence[NatRule]
    ) -> bytes | None:
        """``data`` with every address slot rewritten by the first matching rule, or None when
        no rule matched anything (the caller then forwards ``data`` itself)."""
        out: bytearray | None = None
        for _transport, ip_off, port_off in slots:
            ip = bytes(data[ip_off : ip_off + 4])
            (port,) = _PORT.unpack_from(data, port_off)
            for rule in rules:
                if rule.match_ip == ip and (rule.match_port is None or rule.match_port == port):
                    if out is None:
                        out = bytearray(data)
                    out[ip_off : ip_off + 4] = rule.replace_ip
                    if rule.replace_port is not None:
                        _PORT.pack_into(out, port_off, rule.replace_port)
                    break
        return None if out is None else bytes(out)


class _Client:
    """One row of the client table."""

    __slots__ = ("addr", "domain", "last_heard", "last_sent")

    def __init__(self, addr: Address, domain: str | None, now: float) -> None:
        self.addr = addr
        self.domain = domain
        self.last_heard = now
        self.last_sent = -1e18  # nothing sent yet: due a keepalive at the next check


class RelayCounters:
    """What the relay did, for logs and /metrics.  Plain ints, updated in place."""

    __slots__ = (
        "bytes_in",
        "bytes_out",
        "client_keepalives",
        "clients_expired",
        "clients_refused",
        "clients_registered",
        "datagrams_in",
        "datagrams_out",
        "dropped",
        "forwarded",
        "keepalives_sent",
        "malformed",
        "nat_rewrites",
    )

    def __init__(self) -> None:
        #: Every datagram handed to receive_datagram, and its bytes.
        self.datagrams_in = 0
        self.bytes_in = 0
        #: Every datagram the relay asked to send (forwarded copies and keepalives), and bytes.
        self.datagrams_out = 0
        self.bytes_out = 0
        #: Received datagrams forwarded to the other clients (counted once, not per copy).
        self.forwarded = 0
        #: Received datagrams not acted on: malformed ones plus those from refused clients.
        self.dropped = 0
        #: Of ``dropped``: not LBMR at all, or LBMR we could not parse when we had to.
        self.malformed = 0
        #: Client keepalives received (LBMR type 2/3, no records).
        self.client_keepalives = 0
        #: Resolver keepalives (LBMR type 0, no records) sent, replies and periodic ones.
        self.keepalives_sent = 0
        #: Forwarded copies whose TIR addresses a NAT rule rewrote.
        self.nat_rewrites = 0
        self.clients_registered = 0
        self.clients_expired = 0
        #: New clients refused because the table held MAX_CLIENTS.
        self.clients_refused = 0

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.__slots__}


class LbmrdRelay:
    """The lbmrd relay; see the module docstring.

    ``ttl`` and ``activity`` are seconds (the daemon converts ``-t`` seconds / ``<ttl>`` ms /
    ``-a`` ms).  ``now`` values are any monotonic clock in seconds (the adapter uses loop.time()).
    """

    __slots__ = (
        "_clients",
        "_keepalive_due",
        "_nat",
        "_sweep_due",
        "activity",
        "counters",
        "keepalive_interval",
        "max_clients",
        "ttl",
    )

    def __init__(
        self,
        *,
        now: float,
        ttl: float = 60.0,
        activity: float = 60.0,
        nat: NatTable | None = None,
        keepalive_interval: float = RESOLVER_KEEPALIVE_INTERVAL,
        max_clients: int = MAX_CLIENTS,
    ) -> None:
        if ttl <= 0 or activity <= 0 or keepalive_interval <= 0:
            raise ValueError("ttl, activity and keepalive_interval must be positive")
        self.ttl = ttl
        self.activity = activity
        self.keepalive_interval = keepalive_interval
        self.max_clients = max_clients
        self._nat = nat if nat is not None and nat.active else None
        self._clients: dict[Address, _Client] = {}
        self._sweep_due = now + activity
        self._keepalive_due = now + min(RESOLVER_KEEPALIVE_CHECK, keepalive_interval)
        self.counters = RelayCounters()

    # -- the client table -------------------------------------------------------------------

    @property
    def active_clients(self) -> int:
        return len(self._clients)

    def clients(self) -> dict[Address, float]:
        """A copy of the client table: address -> time last heard."""
        return {addr: c.last_heard for addr, c in self._clients.items()}

    def _touch(self, addr: Address, now: float) -> _Client | None:
        client = self._clients.get(addr)
        if client is not None:
            client.last_heard = now
            return client
        if len(self._clients) >= self.max_clients:
            self.counters.clients_refused += 1
            return None
        domain = self._nat.domain_of(addr[0]) if self._nat is not None else None
        client = _Client(addr, domain, now)
        self._clients[addr] = client
        self.counters.clients_registered += 1
        return client

    # -- input ------------------------------------------------------------------------------

    def receive_datagram(self, data: Payload, addr: Address, now: float) -> Output:
        """Handle one datagram from ``addr``; returns what to send from the listening socket."""
        counters = self.counters
        size = len(data)
        counters.datagrams_in += 1
        counters.bytes_in += size
        if size < 4:
            return self._malformed()
        first = data[0]
        kind = first & 0x07
        if first >> 4 > 1 or kind == _NOT_LBMR_TYPE:
            return self._malformed()
        if kind == lbmr.LBMR_TYPE_UCAST_RCV_ALIVE or kind == lbmr.LBMR_TYPE_UCAST_SRC_ALIVE:
            if not lbmr.is_client_keepalive(data):
                return self._malformed()
            counters.client_keepalives += 1
            client = self._touch(addr, now)
            if client is None:
                counters.dropped += 1
                return []
            client.last_sent = now
            counters.keepalives_sent += 1
            counters.datagrams_out += 1
            counters.bytes_out += 4
            return [(lbmr.RESOLVER_KEEPALIVE, addr)]
        if (
            kind == lbmr.LBMR_TYPE_NORMAL
            and size == 4
            and data[1] == 0
            and data[2] == 0
            and data[3] == 0
        ):
            # Another resolver's keepalive: proof of life, nothing to forward or answer (two
            # lbmrds answering each other's keepalives would never stop).
            if self._touch(addr, now) is None:
                counters.dropped += 1
            return []
        sender = self._touch(addr, now)
        if sender is None:
            counters.dropped += 1
            return []
        return self._forward(data, sender, now)

    def _malformed(self) -> Output:
        self.counters.malformed += 1
        self.counters.dropped += 1
        return []

    def _forward(self, data: Payload, sender: _Client, now: float) -> Output:
        counters = self.counters
        out: Output = []
        nat = self._nat
        if nat is not None and sender.domain is not None:
            rewritten = self._nat_copies(data, sender, nat)
            if rewritten is None:
                return self._malformed()
        else:
            rewritten = None
        size = len(data)
        append = out.append
        if not rewritten:  # the common case: the same bytes to everyone
            for client in self._clients.values():
                if client is not sender:
                    client.last_sent = now
                    append((data, client.addr))
        else:
            for client in self._clients.values():
                if client is sender:
                    continue
                payload: Payload = data
                if client.domain is not None:
                    copy = rewritten.get(client.domain)
                    if copy is not None:
                        payload = copy
                        counters.nat_rewrites += 1
                append((payload, client.addr))
                client.last_sent = now
        counters.forwarded += 1
        counters.datagrams_out += len(out)
        counters.bytes_out += size * len(out)
        return out

    def _nat_copies(self, data: Payload, sender: _Client, nat: NatTable) -> dict[str, bytes] | None:
        """Per destination domain, the rewritten datagram (only domains where a rule matched).
        None when the TIRs had to be parsed and could not be."""
        copies: dict[str, bytes] = {}
        slots: list[tuple[int, int, int]] | None = None
        kind = data[0] & 0x07
        if kind not in (lbmr.LBMR_TYPE_NORMAL, lbmr.LBMR_TYPE_WC_TQRS):
            return copies  # only TIR-carrying datagrams are transformed
        if data[2] == 0 and data[3] == 0:
            return copies  # no TIRs
        for (source, destination), rules in nat.transforms.items():
            if source != sender.domain:
                continue
            if slots is None:
                try:
                    slots = lbmr.tir_address_slots(data)
                except lbmr.LBMRError:
                    return None
            copy = nat.rewrite(data, slots, rules)
            if copy is not None:
                copies[destination] = copy
        return copies

    # -- timers -----------------------------------------------------------------------------

    def next_timer(self) -> float:
        """The next time :meth:`handle_timer` has something to do."""
        if not self._clients:
            return self._sweep_due
        return min(self._sweep_due, self._keepalive_due)

    def handle_timer(self, now: float) -> Output:
        """Run the dead-client sweep and the resolver keepalives that are due at ``now``."""
        out: Output = []
        if now >= self._sweep_due:
            self._sweep(now)
            self._sweep_due = now + self.activity
        if now >= self._keepalive_due:
            counters = self.counters
            idle_before = now - self.keepalive_interval
            for client in self._clients.values():
                if client.last_sent <= idle_before:
                    out.append((lbmr.RESOLVER_KEEPALIVE, client.addr))
                    client.last_sent = now
            counters.keepalives_sent += len(out)
            counters.datagrams_out += len(out)
            counters.bytes_out += 4 * len(out)
            self._keepalive_due = now + min(RESOLVER_KEEPALIVE_CHECK, self.keepalive_interval)
        return out

    def _sweep(self, now: float) -> None:
        dead_before = now - self.ttl
        dead = [addr for addr, c in self._clients.items() if c.last_heard < dead_before]
        for addr in dead:
            del self._clients[addr]
        self.counters.clients_expired += len(dead)
