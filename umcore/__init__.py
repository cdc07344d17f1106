"""umcore: the shared library of pyum.

Layers, lowest first (a layer imports only from its own rank or below; the cores from
resolver to srs are one rank):

- ``umcore.errors``     one exception hierarchy for the whole project
- ``umcore.wire``       sans-IO codecs for UM's wire protocols (LBMR, LBMC, LBT-RM, LBT-RU, LBT-TCP, SRS)
- ``umcore.config``     option registry, flat files, um.xml, daemon XML files with their schemas
- ``umcore.resolver``   sans-IO topic resolution
- ``umcore.transport``  sans-IO transport sessions
- ``umcore.features``   sans-IO client-side features (late join, OTR, request/response, ...)
- ``umcore.lbmrd``      sans-IO lbmrd core (the unicast resolution relay)
- ``umcore.srs``        sans-IO SRS cores (server and client)
- ``umcore.aio``        thin asyncio adapters around the sans-IO cores
- ``umcore.engine``     adapters and client cores composed into running contexts (being written)
- ``umcore.monitor``    statistics, lbmmon framing, automatic monitoring
- ``umcore.api``        the public asyncio client API
- ``umcore.daemon``     runtime shared by the daemons (CLI, logging, pid file, signals, services)
- ``umcore.tools``      command-line tools

Where a daemon's code goes: its sans-IO core in ``umcore/<daemon>/`` (``lbmrd``, ``srs``; later
``store`` for umestored, ``dro`` for tnwgd), its asyncio adapters in ``umcore/aio/``, its shell
(command line, XML -> objects -> run) in ``daemons/<daemon>/``.  The exact ranks, and why, are in
``tests/test_layers.py``, which enforces them.

See ../README.md and ARCHITECTURE in the shared design notes.
"""

__version__ = "0.1.0"
