"""umcore: the shared library of pyum.

Layers, lowest first (a layer imports only from layers below it):

- ``umcore.errors``     one exception hierarchy for the whole project
- ``umcore.wire``       sans-IO codecs for UM's wire protocols (LBMR, LBMC, LBT-RM, LBT-RU, LBT-TCP, SRS)
- ``umcore.config``     option registry, flat files, um.xml, daemon XML files with their schemas
- ``umcore.resolver``   sans-IO topic resolution
- ``umcore.transport``  sans-IO transport sessions
- ``umcore.aio``        thin asyncio adapters around the sans-IO cores
- ``umcore.daemon``     runtime shared by the daemons (CLI, logging, pid file, signals, services)
- ``umcore.monitor``    statistics, Prometheus
- ``umcore.api``        the public asyncio client API
- ``umcore.tools``      command-line tools

See ../README.md and ARCHITECTURE in the shared design notes.
"""

__version__ = "0.1.0"
