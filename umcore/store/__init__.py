"""The persistent store's sans-IO core (umestored): compositions, registration, repositories.

Theory of operation
-------------------
A Store instance (one ``<store>`` of ``umestored``'s XML) is an ordinary UM receiver of every
persisted source's transport session plus a request port of its own (``<store port>``):

* **data** arrives as the source transport's LBMC frames, raw and in arrival order, through the
  engine's raw receiver (:class:`umcore.engine.raw.RawReceiver`); the store keeps the frames as
  they are, one repository per *source* (not per topic);
* **control** (registrations, consumption ACKs, keepalives, retransmission requests) arrives as
  LBMC CONTROL messages on the store's request port, and every answer (registration responses,
  stability ACKs, keepalives, retransmissions) leaves as a UIM to the address the client named.

Modules (who builds on whom)::

    compose.py     the store protocol's message compositions, table-driven: which LBMC headers
                   make a source registration, a registration response, a stability ACK, an
                   SRI ...; encode and decode.  Both the store and the persistent clients
                   (issue 17) use this one table.
    diskformat.py  the repository's on-disk format (segments, index, record checksums), pure
                   bytes in and out; documented in docs/store-format.md.
    state.py       the state files (a source's RegID, options and receivers with their ACK
                   positions), pure bytes in and out.
    repository.py  the repository kinds (memory, disk, reduced-fd, no-cache): the sequence window
                   (trail, mem_trail, lead, sync, sync_complete, contig), retention by size, age
                   and disk wrap, RPP release, stability in sequence order.  Disk work leaves it
                   as I/O jobs (:class:`IoJob`); completions come back as inputs.
    registry.py    RegIDs, Session IDs, sources and receivers with their activity timeouts and
                   state lifetimes.
    retx.py        the instance's retransmission-request queue and its rate limit.
    repair.py      what the Store missed of a source's stream, asked of the source again.
    catchup.py     late join to a source whose repository starts: where it starts, frames held
                   meanwhile, what was sent before the Store joined.
    events.py      what the core reports (log lines with the statistics events' fields).
    core.py        :class:`StoreCore`, one Store instance: takes control messages, frames, I/O
                   completions and ``now``; gives UIMs to send, I/O jobs, topics to join or
                   leave, and events to log and count; exposes its next timer.

The adapters live above: :mod:`umcore.aio.storeio` runs the I/O jobs on a bounded writer thread
(the event loop never waits for a disk) and reads a store's files back at start-up;
``daemons/umestored`` wires an engine, a request port, the cores and the writer together.

Durability contract: a message is stable (ACKed) only after its write completed (the operating
system accepted it: UM's meaning; the pyum-only option ``pyum-repository-disk-fdatasync`` adds
``fdatasync`` before the ACK).  A registration answer that creates a RegID leaves only after the
state naming it is on disk.
"""
