"""Sans-IO topic resolution: phase schedules, resolver caches, multicast and unicast (lbmrd) modes.

See :mod:`umcore.resolver.core` for the theory of operation.
"""
