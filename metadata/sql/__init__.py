"""The SQL metadata store (SQLite and PostgreSQL): one class serving every metadata protocol.

Adding a store (as :mod:`~metadata.sql.cluster` and :mod:`~metadata.sql.producer_ids` were; a store
written standalone, with its own ``MetaData``, ``open_engine`` and ``engine=`` parameter, moves in
the same way):

1. **Protocol.** The contract is a ``typing.Protocol`` in its own module of :mod:`metadata`
   (value types beside it; no ``close``: whoever opened the store closes it), listed among the
   bases of :class:`~metadata.store.MetadataStore`.
2. **Tables.** Its ``Table`` objects move into :mod:`metadata.sql.schema` on the shared ``_meta``,
   keeping their names (a database the standalone module created keeps its rows), under a new
   ``SCHEMA_VERSION`` (the current one plus one) listed in ``_TABLES_SINCE``; a column added to an
   existing table goes in ``_COLUMNS_SINCE``. Its ``create_all`` / ``create_tables`` calls go: the
   store creates or upgrades the whole schema when it opens. A test opens a store left at the
   previous version (the new tables dropped, ``tc_schema_version`` rewritten) and uses the new
   tables (as tests/metadata/test_sql_cluster.py does).
3. **Store.** ``git mv metadata/sql_x.py metadata/sql/x.py`` (a commit of its own, so history
   follows), then the class extends :class:`~metadata.sql.engine.SqlStore` (no ``__init__`` of its
   own unless it takes options, which it passes on with ``**options``) and runs every statement
   through ``self._read`` / ``self._write_global``, or ``self._write(tp, ...)`` with ``self._fence``
   for a partition's rows: they bound the transaction, translate driver errors and serialise
   what SQLite needs. "Insert unless present" is ``self._insert_or_ignore``, never a caught
   ``IntegrityError`` (which aborts a PostgreSQL transaction). A helper several stores share (a
   coordinator epoch fence) becomes a method of a base class here they all extend, as
   :class:`~metadata.sql.leadership.SqlLeadership` is for the partition stores. Method names
   share the composed class's namespace: name them after what they hold (``get_group``, not
   ``get``); tests/metadata/test_protocols.py fails on a name two stores define. Rows kept per
   partition are deleted by an override of ``_forget_partition`` (calling ``super()``), rows per
   topic on the topic deletion path (``service.topic_sync.forget_topic``).
4. **Compose.** The class joins the bases of
   :class:`~metadata.sql.store.SqlRemoteLogMetadataManager`. Callers stop constructing it: they
   take the node's store (``node.metadata``) typed as the narrow protocol, so one metadata URL
   opens one engine for every store. Kafka handlers call it through ``await ctx.run(...)``, never
   on the event loop.
"""

from __future__ import annotations

from metadata.sql.engine import normalize_url
from metadata.sql.store import SqlRemoteLogMetadataManager

__all__ = ["SqlRemoteLogMetadataManager", "normalize_url"]
