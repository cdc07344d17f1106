"""Persistent sources and receivers (seed 002 from the application's side), sans-IO.

- :mod:`umcore.persist.events`: UM's event codes, message types and their info dataclasses.
- :mod:`umcore.persist.source`: one persistent source's machine (registration with its Stores,
  quorum/consensus, SRI, stability, flight size, Store liveness, deregistration).
- :mod:`umcore.persist.receiver`: one persistent receiver's machine for one source (SRI request,
  registration, recovery start point, RXREQ routing over the Stores, consumption ACKs,
  keepalives, deregistration).

Both speak the store protocol through :mod:`umcore.store.compose`, the module the Store itself
uses.  The engine (:mod:`umcore.engine.persist`) feeds them and flushes what they return.
"""
