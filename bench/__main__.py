"""``python -m bench``: run every ``bench/bench_*.py`` in turn (each has ``main() -> int``)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path


def main() -> int:
    worst = 0
    for path in sorted(Path(__file__).parent.glob("bench_*.py")):
        print(f"== {path.stem}", flush=True)
        module = importlib.import_module(f"bench.{path.stem}")
        worst = max(worst, int(module.main([]) or 0))
    return worst


if __name__ == "__main__":
    sys.exit(main())
