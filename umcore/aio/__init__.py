"""umcore.aio: the thin asyncio adapters that drive pyum's sans-IO cores.

- ``udp``    :class:`~umcore.aio.udp.DatagramEndpoint`, a UDP socket drained in a loop into one
  reused buffer (the stdlib datagram transport reads one datagram per wake-up and loses packets
  under load)
- ``timer``  :class:`~umcore.aio.timer.CoreTimer`, the one re-armed timer each sans-IO core needs
- ``tcp``    the TCP transport's source listener (port pool, back-pressure) and receiver
  connection, around :mod:`umcore.transport.tcp`
- ``multicast`` the multicast topic resolution socket and the "which local address reaches X"
  helper for advertised addresses

Adapters own sockets and the event loop; the cores they drive never do.
"""
