"""Remote segment metadata: value types, the store's protocols (Kafka's RemoteLogMetadataManager
and the small side stores) and :func:`load_metadata_manager`, which opens the SQL store."""

from __future__ import annotations

from typing import Any

from log.errors import InvalidConfigError
from metadata.cluster import ClusterRegistry
from metadata.cluster_sync import ClusterSyncStore
from metadata.erasures import ErasureReceiptStore
from metadata.log_start import LogStartOffsetStore
from metadata.manager import RemoteLogMetadataManager
from metadata.producer_ids import ProducerIdBlockStore
from metadata.reports import RoundReportStore
from metadata.segment_indexes import IndexedSegmentStore, SegmentIndexStore
from metadata.store import MetadataStore
from metadata.topic_configs import TopicConfigStore, TopicDeletionStore

__all__ = ["ClusterRegistry", "ClusterSyncStore", "ErasureReceiptStore", "IndexedSegmentStore", "LogStartOffsetStore",
           "MetadataStore", "ProducerIdBlockStore", "RemoteLogMetadataManager", "RoundReportStore", "SegmentIndexStore",
           "TopicConfigStore", "TopicDeletionStore", "load_metadata_manager"]

_SCHEMES = ("sqlite", "postgresql", "postgres")


def load_metadata_manager(url: str, **options: Any) -> MetadataStore:
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
