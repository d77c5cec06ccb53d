"""HTTP routes under /v1, one module per resource (thin: parse, call the Node, shape the answer)."""

from __future__ import annotations
