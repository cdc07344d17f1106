"""lbmrd: the unicast UDP topic resolution daemon (UM's "LBM resolver daemon").

``python -m daemons.lbmrd`` or the console script ``lbmrd``; ``lbmrds`` is the Windows service
front.  The behaviour lives in :mod:`umcore.lbmrd.core` (the relay) and
:mod:`umcore.config.lbmrd` (the XML file); this package only wires them to sockets and signals.
"""
