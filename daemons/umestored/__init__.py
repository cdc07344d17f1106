"""umestored: the persistent store daemon (UM's Store: repositories of persisted sources' messages).

``python -m daemons.umestored`` or the console script ``umestored``; ``umestoreds`` is the Windows
service front.  The Store lives in :mod:`umcore.store` (sans-IO cores) and
:mod:`umcore.aio.storeio` (the disk writer thread), the configuration in
:mod:`umcore.config.store`; this package wires them to an engine per Store instance, a request
port, the command line, logging, the pid file and Prometheus.
"""
