"""The SQL metadata store (SQLite and PostgreSQL): one class serving every metadata protocol."""

from __future__ import annotations

from metadata.sql.engine import normalize_url
from metadata.sql.store import SqlRemoteLogMetadataManager

__all__ = ["SqlRemoteLogMetadataManager", "normalize_url"]
