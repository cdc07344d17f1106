"""umcore.srs: the Stateful Resolver Service (TCP-based topic resolution) as sans-IO cores.

- ``server``  the SRS service: client registration, source and interest state, relay by
              interest or flood, state lifetimes, source-leave back-off, statistics
- ``client``  what a context does with ``resolver_service``: connect to every SRS, register,
              advertise sources and interest, report sources resolved / withdrawn, re-sync
              after a reconnect
- ``stats``   the statistics objects of both, in the shape of ``srs_mon.proto``

The asyncio adapters are in :mod:`umcore.aio.srs`; the daemon is ``daemons.srs``.
"""
