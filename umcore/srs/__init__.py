"""umcore.srs: the Stateful Resolver Service (TCP-based topic resolution) as sans-IO cores.

- ``server``    the SRS service: :class:`~umcore.srs.server.SRSServer`, a thin composition of
- ``session``   one client connection's state machine and bounded record queue, and the
                service of all queues
- ``registry``  the clients, sources, receiver and wildcard interest tables
- ``relay``     what each record means and who gets it (interest-filtered and flood)
- ``lifetimes`` source-leave back-off and state lifetimes of disconnected clients
- ``common``    the server's settings, bounds, refusal counters and connection events
- ``client``    what a context does with ``resolver_service``: connect to every SRS, register,
                advertise sources and interest, report sources resolved / withdrawn, re-sync
                after a reconnect
- ``stats``     the statistics objects of both, in the shape of ``srs_mon.proto``

Each machine (a client slot, a server session) is an ``Enum`` of states moved along one
transition table; events are frozen slotted dataclasses under one base class.  The asyncio
adapters are in :mod:`umcore.aio.srs`; the daemon is ``daemons.srs``.
"""
