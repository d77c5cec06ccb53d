"""The SQL metadata store (SQLite and PostgreSQL): one class serving every metadata protocol."""

from __future__ import annotations

from metadata.sql.store import (
    SCHEMA_VERSION,
    SqlRemoteLogMetadataManager,
    _meta,
    erasure_partitions,
    erasures,
    normalize_url,
    round_segments,
    rounds,
    schema_version,
)

__all__ = ["SCHEMA_VERSION", "SqlRemoteLogMetadataManager", "_meta", "erasure_partitions", "erasures",
           "normalize_url", "round_segments", "rounds", "schema_version"]
