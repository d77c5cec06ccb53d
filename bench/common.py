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


def quick() -> bool:
    return os.environ.get("BENCH_QUICK", "") not in ("", "0")


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def write_result(name: str, payload: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    doc = {
        "bench": name,
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
        "quick": quick(),
        **payload,
    }
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(doc, indent=2, sort_keys=False) + "\n")
    print(json.dumps(doc, indent=2))
    return path


class Timer:
    def __enter__(self) -> Timer:
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self.t0
