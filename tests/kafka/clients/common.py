"""Shared by the client scripts: read the JSON spec, print the JSON answer, text <-> bytes for keys and values."""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any

Action = Callable[[dict[str, Any]], dict[str, Any]]


def enc(s: str | None) -> bytes | None:
    return None if s is None else s.encode()


def dec(b: bytes | None) -> str | None:
    return None if b is None else b.decode("utf-8", "replace")


def main(actions: dict[str, Action], *, hard_exit: bool = False) -> None:
    """``script.py '{"action": ..., ...}'``: run the action, print its JSON answer (or {"error": ...}, exit 1).

    ``{"common": {...}, "steps": [{"action": ...}, ...]}`` runs several actions (each spec merged over
    ``common``) and answers ``{"steps": [answer, ...]}``.

    ``hard_exit``: leave with ``os._exit`` once the answer is printed, without running the client
    libraries' destructors (a librdkafka handle's destroy can wait forever on a broker thread).
    """
    spec = json.loads(sys.argv[1] if len(sys.argv) > 1 else sys.stdin.read())
    try:
        if "steps" in spec:  # several actions in one process (one start-up), answers in order
            out: Any = {"steps": [actions[s["action"]]({**spec.get("common", {}), **s}) for s in spec["steps"]]}
        else:
            out = actions[spec["action"]](spec)
    except Exception as e:  # noqa: BLE001 - the test reads the failure from the JSON
        print(json.dumps({"error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()}))
        _exit(1, hard_exit)
    print(json.dumps(out))
    _exit(0, hard_exit)


def _exit(code: int, hard: bool) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    if hard:
        os._exit(code)
    if code:
        sys.exit(code)
