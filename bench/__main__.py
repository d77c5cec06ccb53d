"""Run every benchmark (or those named): ``python -m bench [name ...]``.

Each ``bench/bench_<name>.py`` has a ``main()`` that writes ``bench/results/<name>.json``.
Set ``BENCH_QUICK=1`` for a smaller, faster run (the JSON says which scale it used); a quick
run writes to the scratch folder ``bench/tmp/results/``, never over the committed results.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    here = Path(__file__).parent
    names = sorted(m.name[len("bench_"):] for m in pkgutil.iter_modules([str(here)]) if m.name.startswith("bench_"))
    wanted = argv or names
    unknown = [n for n in wanted if n not in names]
    if unknown:
        print(f"unknown benchmark(s) {unknown}; available: {names}", file=sys.stderr)
        return 2
    failed = []
    for name in wanted:
        t0 = time.monotonic()
        print(f"== bench {name}", flush=True)
        try:
            importlib.import_module(f"bench.bench_{name}").main()
        except Exception as e:  # keep going: one broken bench must not hide the others' numbers
            print(f"!! bench {name} failed: {e!r}", file=sys.stderr)
            failed.append(name)
        print(f"== bench {name} done in {time.monotonic() - t0:.1f}s", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
