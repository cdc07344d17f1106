"""Run pyum's benchmarks: ``python -m bench [NAME ...]`` (``make bench`` runs them all).

Each benchmark is a module ``bench/<name>.py`` with a ``main() -> None`` that measures pyum and a
baseline in the same run (these machines are noisy, so only ratios mean anything) and prints its
figures.  Benchmarks are bounded in time and use loopback only.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    here = Path(__file__).parent
    names = sorted(m.name for m in pkgutil.iter_modules([str(here)]) if not m.name.startswith("_"))
    wanted = argv or names
    unknown = sorted(set(wanted) - set(names))
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; known: {', '.join(names)}")
        return 2
    for name in wanted:
        print(f"== bench/{name}")
        start = time.perf_counter()
        importlib.import_module(f"bench.{name}").main()
        print(f"   ({time.perf_counter() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
