"""The SQL metadata store (SQLite and PostgreSQL): one class serving every metadata protocol.

Adding a store (as :mod:`~metadata.sql.cluster` and :mod:`~metadata.sql.producer_ids` were, and
as any store written standalone with its own engine and ``MetaData`` is moved in):

1. **Protocol.** The contract is a ``typing.Protocol`` in its own module of :mod:`metadata`
   (value types beside it, no ``close``: the store's owner closes it), and
   :class:`~metadata.store.MetadataStore` lists it among its bases.
2. **Tables.** Its ``Table`` objects move into :mod:`metadata.sql.schema`, on the shared
   ``_meta``, keeping their names (a database the standalone module created keeps its rows),
   under a new ``SCHEMA_VERSION`` (the old one plus one) listed in ``_TABLES_SINCE``; a new
   column of an existing table goes in ``_COLUMNS_SINCE`` instead. A test opens a store at
   the previous version (tables dropped, ``tc_schema_version`` rewritten) and checks the
   upgrade creates them (as tests/metadata/test_sql_cluster.py does).
3. **Store.** ``git mv`` its module here (``metadata/sql_x.py`` -> ``metadata/sql/x.py``); the
   class extends :class:`~metadata.sql.engine.SqlStore` instead of opening an engine, and runs
   every statement through ``self._read`` / ``self._write_global`` (or ``self._write(tp, ...)``
   with ``self._fence`` for a partition's rows), which bound and translate errors; an
   "insert unless present" is ``self._insert_or_ignore``, never a caught IntegrityError
   (which aborts a PostgreSQL transaction). Rows kept per partition are deleted by an
   override of ``_forget_partition`` (calling ``super()``); rows per topic by the topic
   deletion path (``Node.delete_topic``).
4. **Compose.** The class joins the bases of
   :class:`~metadata.sql.store.SqlRemoteLogMetadataManager`; callers stop constructing it and
   take the node's store typed as the narrow protocol (``node.metadata``), so one metadata
   URL opens one engine for all stores.
"""

from __future__ import annotations

from metadata.sql.engine import normalize_url
from metadata.sql.store import SqlRemoteLogMetadataManager

__all__ = ["SqlRemoteLogMetadataManager", "normalize_url"]
