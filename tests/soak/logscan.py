"""What the soak reads in a server log: counts of lock-order violations, tracebacks and errors,
and the distinct tracebacks with their project frames."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any


def scan_log(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return {}
    return {"lock_order_violations": text.count("lock-order violation"), "tracebacks": text.count("Traceback"),
            "errors": len(re.findall(r" ERROR ", text)), "fatal_dump": "Current thread" in text or
            "Thread 0x" in text}


_PROJECT_FRAME = re.compile(r'^\s*File "[^"]*/(?:log|remote|metadata|cleaner|service)/([^"]+)", line (\d+), in (\S+)')
_EXC_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit)):?(.*)$")


def server_exceptions(path: Path) -> list[dict[str, Any]]:
    """Distinct tracebacks in a server log: the exception, the project frames, how often, and
    the request line logged before it (for the report of a failure)."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    found: dict[tuple[str, str], dict[str, Any]] = {}
    context = ""
    i = 0
    while i < len(lines):
        line = lines[i]
        if " ERROR " in line or " WARNING " in line:
            context = line[:300]
        if line.startswith("Traceback (most recent call last):"):
            frames: list[str] = []
            j = i + 1
            while j < len(lines) and (lines[j].startswith(" ") or not lines[j].strip()):
                m = _PROJECT_FRAME.match(lines[j])
                if m:
                    frames.append(f"{m.group(1)}:{m.group(2)} {m.group(3)}")
                j += 1
            exc = lines[j][:300] if j < len(lines) else "?"
            m = _EXC_LINE.match(exc)
            key = (m.group(1) if m else exc[:80], frames[-1] if frames else "")
            entry = found.setdefault(key, {"exception": exc, "frames": frames[-12:], "count": 0, "context": context})
            entry["count"] += 1
            i = j
        i += 1
    return sorted(found.values(), key=lambda e: -e["count"])
