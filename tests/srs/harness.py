"""An in-memory network between SRSClient cores and SRSServer cores, with explicit time.

``Net`` plays the part of the asyncio adapters: it carries bytes between cores, turns connect
requests into connections (or failures when the server is down) and advances time to the next
deadline of any core.  Everything is deterministic: no sockets, no sleeps.  The SRS
sends records when it services its record queues (every ``record-queue-service-interval``), so
``pump`` moves time forward to those service deadlines until nothing is left to deliver.
"""

from __future__ import annotations

from umcore.srs.client import SRSClient
from umcore.srs.server import SRSServer
from umcore.wire.srs_messages import SourceInfo

# Bound on delivery rounds in one pump: a quiescent exchange needs a handful.
MAX_ROUNDS = 1000


def sir(topic: str, n: int = 1, port: int = 14000) -> SourceInfo:
    """A TCP source advertisement with a distinct OTID per ``n``."""
    return SourceInfo(
        n.to_bytes(4, "big") + bytes(28),
        topic,
        f"TCP:10.0.0.{n % 250 + 1}:{port}:{n:08x}",
        request_ip="10.0.0.1",
        request_port=port,
    )


class Net:
    def __init__(self) -> None:
        self.now = 0.0
        self.servers: dict[tuple[str, int], SRSServer | None] = {}
        self.clients: list[SRSClient] = []
        # (client index, slot) <-> (server address, conn id)
        self.links: dict[tuple[int, int], tuple[tuple[str, int], int]] = {}
        self.back: dict[tuple[tuple[str, int], int], tuple[int, int]] = {}
        self.next_conn = 1
        self.events: list[list[object]] = []

    def add_server(self, addr: tuple[str, int], server: SRSServer) -> SRSServer:
        self.servers[addr] = server
        return server

    def add_client(self, client: SRSClient) -> int:
        self.clients.append(client)
        self.events.append([])
        return len(self.clients) - 1

    def kill_server(self, addr: tuple[str, int]) -> None:
        """The SRS process dies: its connections drop, its state is lost."""
        self.servers[addr] = None
        for (ci, slot), (a, cid) in list(self.links.items()):
            if a == addr:
                del self.links[(ci, slot)]
                del self.back[(a, cid)]
                self.clients[ci].receive_disconnected(slot, self.now)
        self.pump()

    def cut(self, ci: int, slot: int) -> None:
        """The TCP connection between client ``ci`` and its slot breaks (both sides notice)."""
        addr, cid = self.links.pop((ci, slot))
        del self.back[(addr, cid)]
        server = self.servers[addr]
        if server is not None:
            server.receive_disconnected(cid, self.now)
        self.clients[ci].receive_disconnected(slot, self.now)
        self.pump()

    def pump(self) -> None:
        for _ in range(MAX_ROUNDS):
            moved = False
            for ci, client in enumerate(self.clients):
                for slot, addr in client.take_connects():
                    moved = True
                    server = self.servers.get(addr)
                    if server is None:
                        client.receive_connect_failed(slot, self.now)
                        continue
                    cid = self.next_conn
                    self.next_conn += 1
                    self.links[(ci, slot)] = (addr, cid)
                    self.back[(addr, cid)] = (ci, slot)
                    server.receive_connected(cid, ("127.0.0.1", 40000 + cid), self.now)
                    client.receive_connected(slot, self.now)
                for slot, data in client.take_writes():
                    link = self.links.get((ci, slot))
                    if link is None:
                        continue
                    moved = True
                    server = self.servers[link[0]]
                    assert server is not None
                    server.receive_data(link[1], data, self.now)
                for slot in client.take_closes():
                    link = self.links.pop((ci, slot), None)
                    if link is not None:
                        moved = True
                        del self.back[link]
                        server = self.servers[link[0]]
                        if server is not None:
                            server.receive_disconnected(link[1], self.now)
                self.events[ci].extend(client.take_events())
            for addr, server in self.servers.items():
                if server is None:
                    continue
                for cid, data in server.take_writes():
                    target = self.back.get((addr, cid))
                    if target is None:
                        continue
                    moved = True
                    self.clients[target[0]].receive_data(target[1], data, self.now)
                for cid in server.take_closes():
                    target = self.back.pop((addr, cid), None)
                    if target is not None:
                        moved = True
                        del self.links[target]
                        self.clients[target[0]].receive_disconnected(target[1], self.now)
            if not moved:
                # The SRS sends records at its queue service interval: let that much time pass
                # (and nothing else: other deadlines run in advance()).
                due = [
                    s.service_deadline
                    for s in self.servers.values()
                    if s is not None and s.service_deadline is not None
                ]
                if not due:
                    return
                self.now = max(self.now, min(due))
                for s in self.servers.values():
                    if s is not None:
                        d = s.service_deadline
                        if d is not None and d <= self.now:
                            s.handle_timer(self.now)
        raise AssertionError("the exchange did not settle")

    def advance(self, until: float) -> None:
        """Run every core's timers up to ``until``, in deadline order."""
        self.pump()
        while True:
            deadlines = [c.next_timer() for c in self.clients]
            deadlines += [s.next_timer() for s in self.servers.values() if s is not None]
            due = [d for d in deadlines if d is not None and d <= until]
            if not due:
                break
            self.now = max(self.now, min(due))
            for c in self.clients:
                t = c.next_timer()
                if t is not None and t <= self.now:
                    c.handle_timer(self.now)
            for s in self.servers.values():
                if s is not None:
                    t = s.next_timer()
                    if t is not None and t <= self.now:
                        s.handle_timer(self.now)
            self.pump()
        self.now = max(self.now, until)

    def resolved_topics(self, ci: int) -> set[str]:
        return {r.topic for r in self.clients[ci].resolved()}
