"""MetadataStore: everything one metadata database serves, the protocols of :mod:`metadata` in one.

Only what opens the store and hands its parts out (the node, the command line) names this; a
caller takes the narrow protocol it uses: :class:`~metadata.manager.RemoteLogMetadataManager`,
:class:`~metadata.segment_indexes.SegmentIndexStore`, :class:`~metadata.log_start.LogStartOffsetStore`,
:class:`~metadata.reports.RoundReportStore`, :class:`~metadata.erasures.ErasureReceiptStore`,
:class:`~metadata.topic_configs.TopicConfigStore`, :class:`~metadata.topic_configs.TopicDeletionStore`,
:class:`~metadata.cluster_sync.ClusterSyncStore`, :class:`~metadata.cluster.ClusterRegistry`,
:class:`~metadata.producer_ids.ProducerIdBlockStore` or :class:`~metadata.scram_credentials.ScramCredentialStore`.
"""

from __future__ import annotations

from typing import Protocol, Self

from metadata.cluster import ClusterRegistry
from metadata.cluster_sync import ClusterSyncStore
from metadata.erasures import ErasureReceiptStore
from metadata.producer_ids import ProducerIdBlockStore
from metadata.reports import RoundReportStore
from metadata.scram_credentials import ScramCredentialStore
from metadata.segment_indexes import IndexedSegmentStore
from metadata.topic_configs import TopicConfigStore, TopicDeletionStore


class MetadataStore(IndexedSegmentStore, RoundReportStore, ErasureReceiptStore, TopicConfigStore, TopicDeletionStore,
                    ClusterSyncStore, ClusterRegistry, ProducerIdBlockStore, ScramCredentialStore, Protocol):
    """Every protocol of the metadata store, over one database; closing it closes them all."""

    def __enter__(self) -> Self: ...

    def __exit__(self, *exc: object) -> None: ...
