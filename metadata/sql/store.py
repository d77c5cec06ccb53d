"""SqlRemoteLogMetadataManager: the SQL metadata store (SQLite and PostgreSQL over SQLAlchemy 2.x
Core), one class serving every metadata protocol over one engine.

Each protocol has its store in this package, all extending :class:`~metadata.sql.engine.SqlStore`
(so the class below shares one engine, one set of locks and one schema among them):
:mod:`~metadata.sql.segments` (with :mod:`~metadata.sql.leadership`'s fence),
:mod:`~metadata.sql.segment_indexes`, :mod:`~metadata.sql.reports`,
:mod:`~metadata.sql.erasures`, :mod:`~metadata.sql.topic_configs`, :mod:`~metadata.sql.cluster`,
:mod:`~metadata.sql.producer_ids` and :mod:`~metadata.sql.scram_credentials`. How to add a store: :mod:`metadata.sql`.
"""

from __future__ import annotations

from metadata.sql.cluster import SqlClusterRegistry
from metadata.sql.erasures import SqlErasureReceiptStore
from metadata.sql.producer_ids import SqlProducerIdBlockStore
from metadata.sql.reports import SqlRoundReportStore
from metadata.sql.scram_credentials import SqlScramCredentialStore
from metadata.sql.segment_indexes import SqlSegmentIndexStore
from metadata.sql.segments import SqlSegmentStore
from metadata.sql.topic_configs import SqlTopicConfigStore
from metadata.store import MetadataStore


class SqlRemoteLogMetadataManager(SqlSegmentStore, SqlSegmentIndexStore, SqlRoundReportStore,
                                  SqlErasureReceiptStore, SqlTopicConfigStore, SqlClusterRegistry,
                                  SqlProducerIdBlockStore, SqlScramCredentialStore, MetadataStore):
    """The whole metadata store over one SQLAlchemy engine (``sqlite:///...``, ``postgresql://...``).

    Options: ``clock``, ``lock_timeout_ms``, ``statement_timeout_ms``, ``echo``
    (:class:`~metadata.sql.engine.SqlStore`), ``fence_strategy``
    (:class:`~metadata.sql.leadership.SqlLeadership`), ``orphan_grace_ms``
    (:class:`~metadata.sql.segments.SqlSegmentStore`).
    """
