"""Remote segment metadata: value types, the RemoteLogMetadataManager contract and its SQL store."""

from __future__ import annotations

from typing import Any

from log.errors import InvalidConfigError
from metadata.manager import RemoteLogMetadataManager

__all__ = ["RemoteLogMetadataManager", "load_metadata_manager"]

_SCHEMES = ("sqlite", "postgresql", "postgres")


def load_metadata_manager(url: str, **options: Any) -> RemoteLogMetadataManager:
    """Open the metadata store at ``url``: ``sqlite:///path``, ``sqlite:///:memory:`` or
    ``postgresql://user:pw@host/db`` (psycopg 3 is used whatever driver the URL names)."""
    scheme = url.split(":", 1)[0].split("+", 1)[0].lower() if ":" in url else ""
    if scheme not in _SCHEMES:
        raise InvalidConfigError(
            f"metadata store URL {url!r} is not supported: use sqlite:///<path>, sqlite:///:memory: "
            f"or postgresql://user:password@host:port/database"
        )
    from metadata.sql import SqlRemoteLogMetadataManager

    return SqlRemoteLogMetadataManager(url, **options)
