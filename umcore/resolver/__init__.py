"""Sans-IO topic resolution: phase schedules, resolver caches, multicast and unicast (lbmrd) modes,
context (Store) names.

See :mod:`umcore.resolver.core` and :mod:`umcore.resolver.names` for the theory of operation.
"""
