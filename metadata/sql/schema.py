"""The metadata store's tables and their migrations: every table, the schema version that added
it, and the create-or-upgrade a store runs when it opens.

A new store adds its tables here, under a new SCHEMA_VERSION listed in ``_TABLES_SINCE`` (or a
column of an existing table in ``_COLUMNS_SINCE``), so a store opened at an older version gets
them (pyiceberg's ``_ensure_tables_exist``).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    SmallInteger,
    String,
    Table,
    Text,
    and_,
    delete,
    func,
    insert,
    inspect,
    select,
    text,
)
from sqlalchemy import exc as sa_exc

from log.errors import InvalidConfigError
from log.types import TopicPartition

SCHEMA_VERSION = 10

_meta = MetaData()
leaders = Table(
    "tc_leaders", _meta,
    Column("topic", String(255), primary_key=True),
    Column("partition_id", Integer, primary_key=True, autoincrement=False),
    Column("leader_epoch", Integer, nullable=False),  # -1: row exists, no leader yet
    Column("broker_id", Integer, nullable=False),
    Column("fence_token", String(32), nullable=False),
    Column("updated_ms", BigInteger, nullable=False),
    Column("log_start_offset", BigInteger, nullable=True),  # DeleteRecords' (since 8; NULL: never moved)
)
epochs = Table(
    "tc_leader_epochs", _meta,
    Column("topic", String(255), primary_key=True),
    Column("partition_id", Integer, primary_key=True, autoincrement=False),
    Column("epoch", Integer, primary_key=True, autoincrement=False),
    Column("start_offset", BigInteger, nullable=False),
)
cleaner = Table(
    "tc_cleaner_offsets", _meta,
    Column("topic", String(255), primary_key=True),
    Column("partition_id", Integer, primary_key=True, autoincrement=False),
    Column("epoch", Integer, primary_key=True, autoincrement=False),
    Column("cleaner_offset", BigInteger, nullable=False),
)
segments = Table(
    "tc_remote_segments", _meta,
    Column("segment_id", String(32), primary_key=True),
    Column("topic", String(255), nullable=False),
    Column("partition_id", Integer, nullable=False),
    Column("start_offset", BigInteger, nullable=False),
    Column("end_offset", BigInteger, nullable=False),
    Column("max_timestamp_ms", BigInteger, nullable=False),
    Column("broker_id", Integer, nullable=False),
    Column("event_timestamp_ms", BigInteger, nullable=False),
    Column("size_bytes", BigInteger, nullable=False),
    Column("state", SmallInteger, nullable=False),
    Column("leader_epochs", Text, nullable=False),
    Column("cleaner_offsets", Text, nullable=False),
    Column("superseded_by", String(32), nullable=True),
    Column("writer_epoch", Integer, nullable=False),
    Column("created_ms", BigInteger, nullable=False),
    # schema version 3: size of the segment's .keyindex object, NULL while it has none
    Column("key_index_bytes", BigInteger, nullable=True),
    Index("ix_tc_segments_tp", "topic", "partition_id", "state", "start_offset"),
)
blooms = Table(
    "tc_bloom_filters", _meta,
    Column("segment_id", String(32), primary_key=True),
    Column("topic", String(255), nullable=False),
    Column("partition_id", Integer, nullable=False),
    Column("data", LargeBinary, nullable=False),
)
#: round reports (schema version 2): one row per round, one per segment of a round
rounds = Table(
    "tc_compaction_rounds", _meta,
    Column("seq", Integer, primary_key=True, autoincrement=True),  # recording order: the listing's order
    Column("round_id", String(64), nullable=False, unique=True),
    Column("topic", String(255), nullable=False),
    Column("partition_id", Integer, nullable=False),
    Column("engine", String(16), nullable=False),
    Column("leader_epoch", Integer, nullable=False),
    Column("started_ms", BigInteger, nullable=False),
    Column("ended_ms", BigInteger, nullable=False),
    Column("checkpoint_before", BigInteger, nullable=False),
    Column("checkpoint_after", BigInteger, nullable=True),
    Column("outcome", String(16), nullable=False),
    Column("error", Text, nullable=True),
    Index("ix_tc_rounds_tp", "topic", "partition_id", "seq"),
)
round_segments = Table(
    "tc_compaction_round_segments", _meta,
    Column("round_seq", Integer, primary_key=True, autoincrement=False),
    Column("ordinal", Integer, primary_key=True, autoincrement=False),
    Column("segment_id", String(64), nullable=False),
    Column("action", String(32), nullable=False),
    Column("base_offset", BigInteger, nullable=False),
    Column("end_offset", BigInteger, nullable=False),
    Column("superseded", BigInteger, nullable=False),
    Column("tombstone", BigInteger, nullable=False),
    Column("aborted", BigInteger, nullable=False),
    Column("marker", BigInteger, nullable=False),
    Column("bytes_in", BigInteger, nullable=False),
    Column("bytes_out", BigInteger, nullable=False),
    Column("downloaded", BigInteger, nullable=False),
    Column("uploaded", BigInteger, nullable=False),
    Column("requests", BigInteger, nullable=False),
)
#: erasure receipts (schema version 4): one row per erasure, one per partition of it
erasures = Table(
    "tc_erasures", _meta,
    Column("erasure_id", String(32), primary_key=True),
    Column("topic", String(255), nullable=False),
    Column("created_ms", BigInteger, nullable=False),
    Column("deadline_ms", BigInteger, nullable=False),
    Column("keys", Text, nullable=False),  # JSON list of the keys as requested
    Column("encoding", String(16), nullable=False),
    Index("ix_tc_erasures_created", "created_ms"),
)
erasure_partitions = Table(
    "tc_erasure_partitions", _meta,
    Column("erasure_id", String(32), primary_key=True),
    Column("partition_id", Integer, primary_key=True, autoincrement=False),
    Column("state", String(16), nullable=False),
    Column("updated_ms", BigInteger, nullable=False),
    Column("detail", Text, nullable=False),  # JSON: per key segments, rounds, deletions, verification
    Column("error", Text, nullable=True),
    Index("ix_tc_erasure_partitions_state", "state"),
)
#: topic configs (schema version 4): shared by every node and Spark job
topic_configs = Table(
    "tc_topic_configs", _meta,
    Column("topic", String(255), primary_key=True),
    Column("partitions", Integer, nullable=False),
    Column("config", Text, nullable=False),  # JSON object of the overrides
    Column("updated_ms", BigInteger, nullable=False),
)
#: erasure confirmations (schema version 5): each node's word that it holds and serves no copy of a
#: partition's listed segments any more (a receipt's values_removed waits for every registered node)
erasure_confirmations = Table(
    "tc_erasure_confirmations", _meta,
    Column("erasure_id", String(32), primary_key=True),
    Column("partition_id", Integer, primary_key=True, autoincrement=False),
    Column("broker_id", Integer, primary_key=True, autoincrement=False),
    Column("confirmed_ms", BigInteger, nullable=False),
    Column("detail", Text, nullable=False),  # JSON: the local files this node dropped
)
#: the cluster registry (schema version 6): nodes sharing the store (broker id, listener, heartbeat)
brokers = Table(
    "kafka_brokers", _meta,
    Column("broker_id", Integer, primary_key=True, autoincrement=False),
    Column("host", String(255), nullable=False),
    Column("port", Integer, nullable=False),
    Column("rack", String(255), nullable=True),
    Column("incarnation", String(64), nullable=False),
    Column("heartbeat_ms", BigInteger, nullable=False),
)
#: Kafka's topic ids (schema version 6): one per topic, forgotten when the topic is deleted
topic_ids = Table(
    "kafka_topic_ids", _meta,
    Column("topic", String(249), primary_key=True),
    Column("topic_id", String(36), nullable=False),
)
#: Kafka's cluster id (schema version 10): one row, written by the first node that asks
cluster = Table(
    "kafka_cluster", _meta,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("cluster_id", String(22), nullable=False),
)
#: the producer id counter (schema version 6): one row, the first id of the next block
producer_id_blocks = Table(
    "kafka_producer_id_blocks", _meta,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("next_block_start", BigInteger, nullable=False),
    Column("last_broker_id", Integer, nullable=False),  # who took the last block (for an operator)
)
#: topic deletions (schema version 7): a deleted topic stays deleted, also for a node that still
#: holds a local copy of it (removed when a topic of that name is created again)
deleted_topics = Table(
    "tc_deleted_topics", _meta,
    Column("topic", String(255), primary_key=True),
    Column("deleted_ms", BigInteger, nullable=False),
    Column("broker_id", Integer, nullable=False),
)
#: SCRAM credentials (schema version 9): per user and mechanism, what RFC 5802 lets a server keep
scram_credentials = Table(
    "kafka_scram_credentials", _meta,
    Column("user_name", String(512), primary_key=True),
    Column("mechanism", String(32), primary_key=True),
    Column("iterations", Integer, nullable=False),
    Column("salt", LargeBinary, nullable=False),
    Column("stored_key", LargeBinary, nullable=False),
    Column("server_key", LargeBinary, nullable=False),
    Column("updated_ms", BigInteger, nullable=False),
)
#: tables each schema version added (a store opened at an older version gets them)
_TABLES_SINCE = {2: (rounds, round_segments), 4: (erasures, erasure_partitions, topic_configs),
                 5: (erasure_confirmations,), 6: (brokers, topic_ids, producer_id_blocks), 7: (deleted_topics,),
                 9: (scram_credentials,), 10: (cluster,)}
#: columns each schema version added to an existing table (ALTER TABLE ... ADD COLUMN, nullable)
_COLUMNS_SINCE: dict[int, tuple[tuple[Table, str], ...]] = {3: ((segments, "key_index_bytes"),),
                                                             8: ((leaders, "log_start_offset"),)}
schema_version = Table(
    "tc_schema_version", _meta,
    Column("version", Integer, primary_key=True, autoincrement=False),
)


def tp_where(table: Table, tp: TopicPartition) -> Any:
    """The WHERE clause selecting ``tp``'s rows of a table keyed by topic and partition_id."""
    return and_(table.c.topic == tp.topic, table.c.partition_id == tp.partition)


_SCHEMA_LOCK_KEY = 0x74636D70  # "tcmp": PostgreSQL advisory lock serialising schema creation
_SCHEMA_ATTEMPTS = 10  # each lost race still leaves the winner's tables: a few rounds converge


def create_schema(engine: Any) -> None:
    """Create or upgrade the schema, safely when several nodes open one store at once (:func:`create_safely`)."""
    create_safely(engine, lambda: _create_or_upgrade_schema(engine))


def create_safely(engine: Any, create: Callable[[], None]) -> None:
    """Run ``create`` (CREATE TABLEs with checkfirst), safely when several nodes open one store at once.

    On PostgreSQL the nodes serialise on an advisory lock (two concurrent CREATE TABLEs of the
    same name fail there: "already exists" or a duplicate key in pg_type); on any backend a
    creator that still loses such a race probes again and finds the tables made.
    """
    for attempt in range(_SCHEMA_ATTEMPTS):
        try:
            with _schema_lock(engine):
                create()
            return
        except (sa_exc.ProgrammingError, sa_exc.OperationalError, sa_exc.IntegrityError) as e:
            message = str(e)
            # "database is locked": SQLite's busy timeout ran out while other openers held the lock
            raced = any(m in message for m in ("already exists", "duplicate key", "database is locked"))
            if not raced or attempt == _SCHEMA_ATTEMPTS - 1:
                raise
            time.sleep(random.uniform(0.01, 0.05))  # let the concurrent creator finish its table


@contextmanager
def _schema_lock(engine: Any) -> Iterator[None]:
    if engine.dialect.name != "postgresql":
        yield
        return
    with engine.connect() as conn:
        conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": _SCHEMA_LOCK_KEY})
        conn.commit()
        try:
            yield
        finally:
            conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": _SCHEMA_LOCK_KEY})
            conn.commit()


def _create_or_upgrade_schema(engine: Any) -> None:
    """Create a new store at SCHEMA_VERSION, or bring an older one up to it: probe the stored
    version and create the tables every later version added (pyiceberg's _ensure_tables_exist)."""
    schema_version.create(engine, checkfirst=True)
    with engine.begin() as conn:
        row = conn.execute(select(func.max(schema_version.c.version))).first()
    stored = row[0] if row is not None else None
    if stored is None:
        _meta.create_all(engine)
    else:
        if stored > SCHEMA_VERSION:
            raise InvalidConfigError(f"the metadata store is at schema version {stored}, newer than this "
                                     f"tiercompact's {SCHEMA_VERSION}: upgrade tiercompact")
        _meta.create_all(engine, tables=[t for t in _meta.sorted_tables if not any(
            t in tables for v, tables in _TABLES_SINCE.items() if v > stored)])
        for version in sorted(v for v in _TABLES_SINCE if v > stored):
            for table in _TABLES_SINCE[version]:
                table.create(engine, checkfirst=True)
        for version in sorted(v for v in _COLUMNS_SINCE if v > stored):
            for table, name in _COLUMNS_SINCE[version]:
                _add_column(engine, table, name)
    with engine.begin() as conn:
        conn.execute(delete(schema_version).where(schema_version.c.version != SCHEMA_VERSION))
        if conn.execute(select(schema_version.c.version)).first() is None:
            conn.execute(insert(schema_version).values(version=SCHEMA_VERSION))


def _add_column(engine: Any, table: Table, name: str) -> None:
    """Add a nullable column an older schema lacks (probed first: a crashed upgrade is redone)."""
    if name in {c["name"] for c in inspect(engine).get_columns(table.name)}:
        return
    column = table.c[name]
    ddl = f"ALTER TABLE {table.name} ADD COLUMN {name} {column.type.compile(engine.dialect)}"
    with engine.begin() as conn:
        conn.execute(text(ddl))

