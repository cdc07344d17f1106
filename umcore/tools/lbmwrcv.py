"""lbmwrcv: receive every topic matching a pattern; lbmrcv's flags, a wildcard receiver.

Theory of operation
-------------------
The same program as :mod:`umcore.tools.lbmrcv` with a wildcard receiver (UM's
``pattern_type`` "pcre", matched with Python's ``re``) instead of a topic receiver; the summary
line is the same, counting every matching topic.
"""

from __future__ import annotations

import sys

from umcore.tools.lbmrcv import main as _rcv_main

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    return _rcv_main(argv, wildcard=True)


if __name__ == "__main__":
    sys.exit(main())
