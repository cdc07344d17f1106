"""SRS: the Stateful Resolver Service daemon (UM's TCP-based topic resolution).

``python -m daemons.srs`` or the console script ``SRS``; ``srsds`` is the Windows service front.
The service lives in :mod:`umcore.srs.server` (sans-IO core) and :mod:`umcore.aio.srs` (TCP
adapter), the configuration in :mod:`umcore.config.srs`; this package wires them to the
command line, logging, the pid file, Prometheus and the statistics publisher.
"""
