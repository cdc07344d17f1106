"""``python -m umcore.tools.ipcrm``: UM's lbtipc_resource_manager / lbtsmx_resource_manager.

Theory of operation
-------------------
Seed 003 6.4.9 / 6.5.10: a process that exits without deleting its LBT-IPC / LBT-SMX sources
leaves their shared memory behind.  UM keeps a resource database; pyum needs none, because
every segment's header names its creator (:mod:`umcore.transport.shmring`): this tool lists the
``LBTIPC_*`` / ``LBTSMX_*`` objects of ``/dev/shm``, reads each header *without mapping it*,
and tells for each whether its source process is alive, which receivers are attached and
whether they are alive, or why the segment is unusable (not a pyum ring, another layout
version, sizes that do not match).  ``--reclaim`` (UM's ``-reclaim``, accepted too) removes
the segments whose source process is gone or which are unusable; a live source's segment is
never touched.  Receivers have no resources of their own here (their doorbells are abstract
UNIX sockets, which the kernel frees with the process).

Exit status: 0; 1 when stale segments were listed and not reclaimed (so a script can tell);
2 for a bad command line.
"""

from __future__ import annotations

import argparse
import sys

from umcore.aio.shm import SHM_DIR, reclaim, scan_segments

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m umcore.tools.ipcrm",
        description="List (and with --reclaim remove) LBT-IPC / LBT-SMX shared-memory segments "
        "left by processes that are gone (UM's lbtipc_resource_manager).",
    )
    p.add_argument(
        "--reclaim",
        "-reclaim",
        action="store_true",
        help="remove segments whose source process is gone, or that are not usable rings",
    )
    p.add_argument("--dir", default=SHM_DIR, help=f"shared-memory directory (default {SHM_DIR})")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    reports = scan_segments(args.dir)
    if args.reclaim:
        print("Reclaiming Resources")
    else:
        print("Displaying Resources (to reclaim run with --reclaim)")
    print()
    print("--Memory Resources--")
    stale = 0
    for rep in reports:
        if not args.reclaim:
            mark = "  STALE" if rep.stale else ""
            print(f"{rep.describe()}{mark}")
            stale += rep.stale
            continue
        if not rep.stale:
            print(f"in use, kept: {rep.describe()}")
            continue
        h = rep.header
        why = (
            f"Process {h.pid} not found"
            if h is not None and not h.closed
            else "Closed by its source"
            if h is not None
            else f"Unusable ({rep.problem})"
        )
        if reclaim(rep, args.dir):
            sid = f"SessionID: {h.session_id:x} XportID: {h.xport_id}" if h else rep.name
            print(f"{why}: reclaiming Memory resource ({rep.name}; {sid})")
        else:
            print(f"{rep.name}: already gone")
    if not reports:
        print("(none)")
    if stale and not args.reclaim:
        print()
        print(f"{stale} stale segment(s): run `python -m umcore.tools.ipcrm --reclaim` to remove")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
