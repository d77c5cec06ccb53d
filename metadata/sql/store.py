"""SqlRemoteLogMetadataManager: the SQL metadata store (SQLite and PostgreSQL over SQLAlchemy 2.x
Core), one class serving every metadata protocol over one engine.

Each protocol has its store in this package, all extending :class:`~metadata.sql.engine.SqlStore`
(so the class below shares one engine, one set of locks and one schema among them):
:mod:`~metadata.sql.segments` (with :mod:`~metadata.sql.leadership`'s fence),
:mod:`~metadata.sql.segment_indexes`, :mod:`~metadata.sql.reports`,
:mod:`~metadata.sql.erasures` and :mod:`~metadata.sql.topic_configs`. A new store is one
protocol module in :mod:`metadata`, one module here added to the bases below, and its tables in
:mod:`metadata.sql.schema`.
"""

from __future__ import annotations

from metadata.sql.erasures import SqlErasureReceiptStore
from metadata.sql.reports import SqlRoundReportStore
from metadata.sql.segment_indexes import SqlSegmentIndexStore
from metadata.sql.segments import SqlSegmentStore
from metadata.sql.topic_configs import SqlTopicConfigStore
from metadata.store import MetadataStore


class SqlRemoteLogMetadataManager(SqlSegmentStore, SqlSegmentIndexStore, SqlRoundReportStore,
                                  SqlErasureReceiptStore, SqlTopicConfigStore, MetadataStore):
    """The whole metadata store over one SQLAlchemy engine (``sqlite:///...``, ``postgresql://...``).

    Options: ``clock``, ``lock_timeout_ms``, ``statement_timeout_ms``, ``echo``
    (:class:`~metadata.sql.engine.SqlStore`), ``fence_strategy``
    (:class:`~metadata.sql.leadership.SqlLeadership`), ``orphan_grace_ms``
    (:class:`~metadata.sql.segments.SqlSegmentStore`).
    """
