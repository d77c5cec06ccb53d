"""Helpers shared by the benchmarks: result files, peak RSS, scale."""

from __future__ import annotations

import json
import os
import platform
import resource
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"
#: where a quick run (BENCH_QUICK=1) writes: a scratch folder (git-ignored), never over the
#: committed full-scale results docs/benchmarks.md and the README summary are generated from
QUICK_RESULTS = Path(__file__).parent / "tmp" / "results"


def quick() -> bool:
    return os.environ.get("BENCH_QUICK", "") not in ("", "0")


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def results_dir() -> Path:
    """bench/results for a full run; the scratch QUICK_RESULTS for a quick one."""
    return QUICK_RESULTS if quick() else RESULTS


def write_result(name: str, payload: dict[str, Any]) -> Path:
    out_dir = results_dir()
    out_dir.mkdir(parents=True, exist_ok=True)
    doc = {
        "bench": name,
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
        "quick": quick(),
        **payload,
    }
    path = out_dir / f"{name}.json"
    path.write_text(json.dumps(doc, indent=2, sort_keys=False) + "\n")
    print(json.dumps(doc, indent=2))
    return path


class Timer:
    def __enter__(self) -> Timer:
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self.t0
