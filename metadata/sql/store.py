"""SqlRemoteLogMetadataManager: one SQLAlchemy 2.x implementation for SQLite and PostgreSQL.

Fencing is compare-and-swap inside the write's own transaction (pyiceberg's
``SqlCatalog.commit_table`` pattern): every write first runs

    UPDATE tc_leaders SET fence_token = :fresh WHERE topic = :t AND partition_id = :p
                                             AND leader_epoch = :epoch [RETURNING leader_epoch]

and proceeds only if that row changed. The check is ``=`` rather than ``<=``: epochs only
advance through ``become_leader`` (``WHERE leader_epoch < :new``), so a writer with a higher
epoch than the registered one has not become leader yet and is refused too. The UPDATE
also takes the partition's row lock (PostgreSQL) or the write lock (SQLite), so all
writes of a partition are serialised and every later read in the transaction is current.

How "the row changed" is observed depends on the dialect: ``RETURNING`` when supported
(SQLite >= 3.35, PostgreSQL), else ``rowcount`` when the driver reports it reliably, else a
re-read of the fresh token ``FOR UPDATE`` inside the transaction (``fence_strategy``
forces one, for tests). Thread-safe; SQLAlchemy errors are translated to MetadataStoreError.

Every transaction is bounded, so a stalled writer (an old leader frozen while it holds the
partition's fence row) cannot block the others indefinitely: on PostgreSQL each connection
runs with ``lock_timeout``, ``statement_timeout`` and ``idle_in_transaction_session_timeout``
(the last ends the stalled session itself and releases its row locks); on SQLite the busy
timeout bounds the wait for the write lock. Hitting a bound raises the retriable
:class:`~metadata.errors.MetadataStoreTimeoutError` (HTTP 503 with Retry-After).
"""

from __future__ import annotations

import functools
import json
import random
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    Row,
    SmallInteger,
    String,
    Table,
    Text,
    and_,
    bindparam,
    create_engine,
    delete,
    event,
    func,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import make_url
from sqlalchemy.pool import StaticPool

from log.clock import SYSTEM_CLOCK, Clock
from log.errors import InvalidConfigError, InvalidRequestError
from log.locks import (
    RANK_LEAF,
    RANK_METADATA_CONNECTION,
    RANK_METADATA_PARTITION,
    RANK_METADATA_WRITE,
    ordered_lock,
    ordered_rlock,
)
from log.types import TopicPartition
from metadata.erasures import ErasurePartition, ErasureRecord
from metadata.errors import (
    FencedLeaderEpochError,
    InvalidStateTransitionError,
    MetadataError,
    MetadataStoreError,
    MetadataStoreTimeoutError,
    RemoteSegmentNotFoundError,
)
from metadata.lineage import is_segment_within_leader_epochs, resolve_checkpoint, validate_cleaner_offsets
from metadata.manager import DEFAULT_ORPHAN_GRACE_MS, RemoteLogMetadataManager
from metadata.reports import DEFAULT_REPORTS_KEPT, CompactionReport, SegmentReport
from metadata.topic_configs import StoredTopic
from metadata.types import LeaderState, RemoteLogSegmentId, RemoteLogSegmentMetadata, RemoteLogSegmentState

T = TypeVar("T")
S = RemoteLogSegmentState
SCHEMA_VERSION = 4

_meta = MetaData()
leaders = Table(
    "tc_leaders", _meta,
    Column("topic", String(255), primary_key=True),
    Column("partition_id", Integer, primary_key=True, autoincrement=False),
    Column("leader_epoch", Integer, nullable=False),  # -1: row exists, no leader yet
    Column("broker_id", Integer, nullable=False),
    Column("fence_token", String(32), nullable=False),
    Column("updated_ms", BigInteger, nullable=False),
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
#: erasure receipts (schema version 4, #15): one row per erasure, one per partition of it
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
#: topic configs (schema version 4, #16): shared by every node and Spark job
topic_configs = Table(
    "tc_topic_configs", _meta,
    Column("topic", String(255), primary_key=True),
    Column("partitions", Integer, nullable=False),
    Column("config", Text, nullable=False),  # JSON object of the overrides
    Column("updated_ms", BigInteger, nullable=False),
)
#: tables each schema version added (a store opened at an older version gets them)
_TABLES_SINCE = {2: (rounds, round_segments), 4: (erasures, erasure_partitions, topic_configs)}
#: columns each schema version added to an existing table (ALTER TABLE ... ADD COLUMN, nullable)
_COLUMNS_SINCE: dict[int, tuple[tuple[Table, str], ...]] = {3: ((segments, "key_index_bytes"),)}
schema_version = Table(
    "tc_schema_version", _meta,
    Column("version", Integer, primary_key=True, autoincrement=False),
)

_FENCE_STRATEGIES = ("returning", "rowcount", "reread")
#: default bounds of a metadata transaction (ServiceConfig exposes both)
#: segment ids per query of get_bloom_filters (well under SQLite's 999 bound parameters)
BLOOM_BATCH = 500
DEFAULT_LOCK_TIMEOUT_MS = 5_000
DEFAULT_STATEMENT_TIMEOUT_MS = 30_000
#: PostgreSQL SQLSTATEs of the bounds above: lock_not_available, query_canceled,
#: idle_in_transaction_session_timeout
_PG_TIMEOUT_STATES = {"55P03": "lock_timeout", "57014": "statement_timeout",
                      "25P03": "idle_in_transaction_session_timeout"}


def normalize_url(url: str) -> str:
    """``postgresql://`` / ``postgres://`` / ``postgresql+psycopg2://`` -> ``postgresql+psycopg://``
    (psycopg 3 is the installed driver)."""
    scheme, sep, rest = url.partition("://")
    base = scheme.split("+", 1)[0].lower()
    if base in ("postgresql", "postgres"):
        return f"postgresql+psycopg://{rest}"
    return url


def _tp_where(table: Table, tp: TopicPartition) -> Any:
    return and_(table.c.topic == tp.topic, table.c.partition_id == tp.partition)


#: remote_log_segment_metadata's query, built once: every read below the local log runs it (and
#: the read path asks it for the log start offset on every fetch), and building the expression
#: cost ten times what SQLite takes to answer it
_SEGMENT_AT_OFFSET = (select(segments).where(
    segments.c.topic == bindparam("topic"), segments.c.partition_id == bindparam("partition_id"),
    segments.c.state == S.COPY_SEGMENT_FINISHED.value, segments.c.superseded_by.is_(None),
    segments.c.end_offset >= bindparam("offset")).order_by(segments.c.start_offset).limit(1))


def _dump(m: Mapping[int, int]) -> str:
    return json.dumps({str(k): v for k, v in sorted(m.items())}, separators=(",", ":"))


def _load(s: str) -> dict[int, int]:
    return {int(k): int(v) for k, v in json.loads(s).items()}


def _to_md(r: Row[Any]) -> RemoteLogSegmentMetadata:
    m = r._mapping
    return RemoteLogSegmentMetadata(
        remote_log_segment_id=RemoteLogSegmentId(TopicPartition(m["topic"], m["partition_id"]), m["segment_id"]),
        start_offset=m["start_offset"], end_offset=m["end_offset"], max_timestamp_ms=m["max_timestamp_ms"],
        broker_id=m["broker_id"], event_timestamp_ms=m["event_timestamp_ms"],
        segment_size_in_bytes=m["size_bytes"], segment_leader_epochs=_load(m["leader_epochs"]),
        state=S(m["state"]), cleaner_offsets=_load(m["cleaner_offsets"]), superseded_by=m["superseded_by"],
        key_index_bytes=m["key_index_bytes"],
    )


def _referenced(state: int, superseded_by: str | None) -> bool:
    return state == S.COPY_SEGMENT_FINISHED.value and superseded_by is None


def _chunked(ids: Sequence[str], size: int = 500) -> Iterator[Sequence[str]]:
    """``ids`` in slices small enough for one IN (...) on every backend (SQLite's variable limit)."""
    for i in range(0, len(ids), size):
        yield ids[i:i + size]


class SqlRemoteLogMetadataManager(RemoteLogMetadataManager):
    """RemoteLogMetadataManager over SQLAlchemy Core (``sqlite:///...``, ``postgresql://...``).

    Thread-safe: PostgreSQL and SQLite files use a connection pool; ``sqlite:///:memory:``
    shares one connection (StaticPool), so its operations are serialised by a lock. On
    SQLite, writes from this process are serialised too (SQLite has one writer anyway);
    other processes wait on SQLite's busy timeout.
    """

    def __init__(
        self,
        url: str,
        *,
        clock: Clock = SYSTEM_CLOCK,
        orphan_grace_ms: int = DEFAULT_ORPHAN_GRACE_MS,
        fence_strategy: str | None = None,
        lock_timeout_ms: int = DEFAULT_LOCK_TIMEOUT_MS,
        statement_timeout_ms: int = DEFAULT_STATEMENT_TIMEOUT_MS,
        echo: bool = False,
    ) -> None:
        for name, value in (("lock_timeout_ms", lock_timeout_ms), ("statement_timeout_ms", statement_timeout_ms)):
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 2**31 - 1:
                raise InvalidConfigError(f"metadata store {name}={value!r} is invalid: must be an integer in "
                                         f"1..{2**31 - 1} (milliseconds)")
        self.lock_timeout_ms = lock_timeout_ms
        self.statement_timeout_ms = statement_timeout_ms
        self._url = normalize_url(url)
        self._clock = clock
        self._orphan_grace_ms = orphan_grace_ms
        try:
            sa_url = make_url(self._url)
        except sa_exc.ArgumentError as e:
            raise InvalidConfigError(f"metadata store URL {url!r} is malformed: {e}") from None
        backend = sa_url.get_backend_name()
        self._sqlite = backend == "sqlite"
        memory = self._sqlite and sa_url.database in (None, "", ":memory:")
        with self._errors("open"):
            if memory:
                self._engine = create_engine(self._url, echo=echo, poolclass=StaticPool,
                                             connect_args={"check_same_thread": False})
            elif self._sqlite:
                Path(sa_url.database or "").expanduser().parent.mkdir(parents=True, exist_ok=True)
                self._engine = create_engine(
                    self._url, echo=echo,
                    connect_args={"check_same_thread": False, "timeout": lock_timeout_ms / 1000})
                event.listen(self._engine, "connect", _sqlite_on_connect)
            elif backend == "postgresql":
                connect_args: dict[str, Any] = {}
                if "connect_timeout" not in sa_url.query:
                    connect_args["connect_timeout"] = max(2, -(-statement_timeout_ms // 1000))
                self._engine = create_engine(self._url, echo=echo, pool_pre_ping=True, connect_args=connect_args,
                                             pool_timeout=max(1.0, statement_timeout_ms / 1000))
                event.listen(self._engine, "connect", functools.partial(
                    _postgres_on_connect, lock_timeout_ms=lock_timeout_ms,
                    statement_timeout_ms=statement_timeout_ms))
            else:
                raise InvalidConfigError(f"metadata store URL {url!r}: unsupported database {backend!r}")
            _create_schema(self._engine)
        dialect = self._engine.dialect
        if fence_strategy is None:
            fence_strategy = ("returning" if dialect.update_returning
                              else "rowcount" if dialect.supports_sane_rowcount else "reread")
        if fence_strategy not in _FENCE_STRATEGIES:
            raise InvalidConfigError(f"fence_strategy {fence_strategy!r} must be one of {_FENCE_STRATEGIES}")
        self.fence_strategy = fence_strategy
        # one connection for every thread: every operation must hold the lock
        self._all_lock: Any = (ordered_rlock("metadata.connection", RANK_METADATA_CONNECTION) if memory
                               else nullcontext())
        self._write_lock: Any = ordered_rlock("metadata.write", RANK_METADATA_WRITE) if self._sqlite else nullcontext()
        self._guard = ordered_lock("metadata.partition_locks", RANK_LEAF)
        self._tp_locks: dict[TopicPartition, Any] = {}
        self._sizes: dict[TopicPartition, int] = {}
        self._closed = False

    def __repr__(self) -> str:
        return f"SqlRemoteLogMetadataManager({make_url(self._url).render_as_string(hide_password=True)!r})"

    # ------------------------------------------------------------------ plumbing

    @contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        try:
            yield
        except MetadataError:
            raise
        except sa_exc.SQLAlchemyError as e:
            orig = getattr(e, "orig", None)
            code = getattr(orig, "sqlstate", None) or getattr(getattr(orig, "diag", None), "sqlstate", None)
            timeout = self._timeout_message(what, code, str(orig or e))
            if timeout is not None:
                raise MetadataStoreTimeoutError(timeout) from None
            retriable = (isinstance(e, sa_exc.OperationalError | sa_exc.TimeoutError)
                         or bool(getattr(e, "connection_invalidated", False))
                         or code in ("40001", "40P01", "55P03"))
            raise MetadataStoreError(
                f"metadata store {what} failed: {type(e).__name__}: {str(orig or e).strip()}"
                + (" (retriable)" if retriable else ""), retriable=retriable) from None

    def _timeout_message(self, what: str, code: str | None, detail: str) -> str | None:
        """The message of a transaction that hit one of its bounds, or None for other errors."""
        first = detail.strip().splitlines()[0] if detail.strip() else ""
        if code in _PG_TIMEOUT_STATES:
            bound = _PG_TIMEOUT_STATES[code]
            ms = self.lock_timeout_ms if bound == "lock_timeout" else self.statement_timeout_ms
            return (f"metadata store {what} timed out ({bound}={ms} ms: {first}); another transaction, e.g. a "
                    f"stalled old leader, held the partition's rows. Retriable: retry in a second")
        if self._sqlite and ("database is locked" in detail or "database is busy" in detail):
            return (f"metadata store {what} timed out: SQLite stayed locked by another writer for the busy "
                    f"timeout ({self.lock_timeout_ms} ms). Retriable: retry in a second")
        return None

    def _tp_lock(self, tp: TopicPartition) -> Any:
        with self._guard:
            lock = self._tp_locks.get(tp)
            if lock is None:
                lock = self._tp_locks[tp] = ordered_rlock("metadata.partition", RANK_METADATA_PARTITION,
                                                          label=str(tp))
            return lock

    def _write(self, tp: TopicPartition, what: str, fn: Callable[[Connection], tuple[T, int]]) -> T:
        """Run ``fn`` in one write transaction; apply its remote-size delta after commit."""
        if self._closed:
            raise MetadataStoreError("metadata manager is closed")
        with self._tp_lock(tp):
            with self._errors(what), self._all_lock, self._write_lock, self._engine.begin() as conn:
                result, delta = fn(conn)
            if delta and tp in self._sizes:
                self._sizes[tp] += delta
            return result

    def _read(self, what: str, fn: Callable[[Connection], T]) -> T:
        if self._closed:
            raise MetadataStoreError("metadata manager is closed")
        with self._errors(what), self._all_lock, self._engine.connect() as conn:
            return fn(conn)

    def _ensure_partition(self, conn: Connection, tp: TopicPartition) -> None:
        values = {"topic": tp.topic, "partition_id": tp.partition, "leader_epoch": -1, "broker_id": -1,
                      "fence_token": uuid.uuid4().hex, "updated_ms": self._clock.milliseconds()}
        stmt: Any
        if self._engine.dialect.name == "postgresql":
            from sqlalchemy.dialects.postgresql import insert as pg_insert

            stmt = pg_insert(leaders)
        else:
            from sqlalchemy.dialects.sqlite import insert as sqlite_insert

            stmt = sqlite_insert(leaders)
        conn.execute(stmt.values(**values).on_conflict_do_nothing(index_elements=["topic", "partition_id"]))

    def _cas(self, conn: Connection, tp: TopicPartition, condition: Any, values: dict[str, Any]) -> bool:
        """Conditionally update the partition's leader row; True if it changed."""
        token = uuid.uuid4().hex
        stmt = update(leaders).where(_tp_where(leaders, tp), condition).values(
            fence_token=token, updated_ms=self._clock.milliseconds(), **values)
        if self.fence_strategy == "returning":
            return conn.execute(stmt.returning(leaders.c.leader_epoch)).first() is not None
        if self.fence_strategy == "rowcount":
            return conn.execute(stmt).rowcount == 1
        conn.execute(stmt)
        row = conn.execute(select(leaders.c.fence_token).where(_tp_where(leaders, tp)).with_for_update()).first()
        return row is not None and row[0] == token

    def _fence(self, conn: Connection, tp: TopicPartition, leader_epoch: int, action: str) -> None:
        if not self._cas(conn, tp, leaders.c.leader_epoch == leader_epoch, {}):
            row = conn.execute(select(leaders.c.leader_epoch, leaders.c.broker_id)
                               .where(_tp_where(leaders, tp))).first()
            cur = None if row is None or row[0] < 0 else row
            raise FencedLeaderEpochError(tp, leader_epoch, cur[0] if cur else None,
                                         cur[1] if cur else None, action)

    @staticmethod
    def _segment_rows(conn: Connection, tp: TopicPartition,
                      segment_ids: Sequence[RemoteLogSegmentId]) -> dict[str, Row[Any]]:
        """The rows of ``segment_ids`` (all of ``tp``) in a few queries, by id.

        Raises:
            RemoteSegmentNotFoundError: one of them has no metadata (or is another partition's).
        """
        rows = SqlRemoteLogMetadataManager._rows_by_id(conn, [s.id for s in segment_ids])
        for s in segment_ids:
            row = rows.get(s.id)
            if row is None or row.topic != tp.topic or row.partition_id != tp.partition:
                raise RemoteSegmentNotFoundError(f"no metadata for remote segment {s}")
        return rows

    @staticmethod
    def _rows_by_id(conn: Connection, ids: Sequence[str]) -> dict[str, Row[Any]]:
        """The segment rows of ``ids`` that exist, by id, in a few queries."""
        return {row.segment_id: row for chunk in _chunked(ids)
                for row in conn.execute(select(segments).where(segments.c.segment_id.in_(chunk)))}

    @staticmethod
    def _segment_row(conn: Connection, segment_id: RemoteLogSegmentId) -> Row[Any]:
        row = conn.execute(select(segments).where(segments.c.segment_id == segment_id.id)).first()
        tp = segment_id.topic_partition
        if row is None or row.topic != tp.topic or row.partition_id != tp.partition:
            raise RemoteSegmentNotFoundError(f"no metadata for remote segment {segment_id}")
        return row

    @staticmethod
    def _vector(conn: Connection, tp: TopicPartition) -> dict[int, int]:
        rows = conn.execute(select(cleaner.c.epoch, cleaner.c.cleaner_offset).where(_tp_where(cleaner, tp)))
        return dict(rows.all())  # type: ignore[arg-type]

    @staticmethod
    def _lineage(conn: Connection, tp: TopicPartition) -> dict[int, int]:
        rows = conn.execute(select(epochs.c.epoch, epochs.c.start_offset).where(_tp_where(epochs, tp))
                            .order_by(epochs.c.epoch))
        return dict(rows.all())  # type: ignore[arg-type]

    # ------------------------------------------------------------------ leadership

    def become_leader(
        self, tp: TopicPartition, leader_epoch: int, broker_id: int, start_offset: int = 0
    ) -> LeaderState:
        state = LeaderState(tp, leader_epoch, broker_id)
        if start_offset < 0:
            raise InvalidRequestError(f"start_offset {start_offset} must be >= 0")

        def fn(conn: Connection) -> tuple[LeaderState, int]:
            self._ensure_partition(conn, tp)
            if not self._cas(conn, tp, leaders.c.leader_epoch < leader_epoch,
                             {"leader_epoch": leader_epoch, "broker_id": broker_id}):
                row = conn.execute(select(leaders.c.leader_epoch, leaders.c.broker_id)
                                   .where(_tp_where(leaders, tp))).one()
                raise FencedLeaderEpochError(
                    tp, leader_epoch, row[0], row[1], "become_leader",
                    detail=f"broker {broker_id} cannot become leader of {tp} at epoch {leader_epoch}: broker "
                           f"{row[1]} already holds epoch {row[0]}; leader epochs must strictly increase "
                           f"(use leader_epoch {row[0] + 1} or higher)")
            prev = conn.execute(select(epochs.c.epoch, epochs.c.start_offset).where(_tp_where(epochs, tp))
                                .order_by(epochs.c.epoch.desc()).limit(1)).first()
            if prev is not None and start_offset < prev[1]:
                raise InvalidRequestError(
                    f"leader epoch {leader_epoch} of {tp} cannot start at offset {start_offset}: the previous "
                    f"epoch {prev[0]} started at {prev[1]}")
            conn.execute(insert(epochs).values(topic=tp.topic, partition_id=tp.partition, epoch=leader_epoch,
                                               start_offset=start_offset))
            return state, 0

        return self._write(tp, "become_leader", fn)

    def leader_state(self, tp: TopicPartition) -> LeaderState | None:
        row = self._read("leader_state", lambda c: c.execute(
            select(leaders.c.leader_epoch, leaders.c.broker_id).where(_tp_where(leaders, tp))).first())
        return None if row is None or row[0] < 0 else LeaderState(tp, row[0], row[1])

    def leader_epochs(self, tp: TopicPartition) -> list[tuple[int, int]]:
        return list(self._read("leader_epochs", lambda c: self._lineage(c, tp)).items())

    # ------------------------------------------------------------------ segment writes

    def add_remote_log_segment_metadata(self, md: RemoteLogSegmentMetadata, *, leader_epoch: int) -> None:
        self.add_remote_log_segments([(md, None)], leader_epoch=leader_epoch)

    def add_remote_log_segments(self, new: Sequence[tuple[RemoteLogSegmentMetadata, bytes | None]], *,
                                leader_epoch: int) -> None:
        if not new:
            return
        tp = new[0][0].topic_partition
        for md, _bloom in new:
            sid = md.remote_log_segment_id
            if md.topic_partition != tp:
                raise InvalidRequestError(f"segments of one partition only: {sid} is not of {tp}")
            if md.state is not S.COPY_SEGMENT_STARTED or md.superseded_by is not None:
                raise InvalidStateTransitionError(sid, None, md.state, "a new segment must be COPY_SEGMENT_STARTED "
                                                  "and not superseded")
        what = (f"upload of remote segment {new[0][0].remote_log_segment_id}" if len(new) == 1
                else f"upload of {len(new)} remote segments of {tp}")

        def fn(conn: Connection) -> tuple[None, int]:
            self._fence(conn, tp, leader_epoch, what)  # a write first: SQLite holds its write lock from here
            existing = self._rows_by_id(conn, [md.id for md, _bloom in new])
            rows = [self._segment_values(md, leader_epoch) for md, _bloom in new
                    if not self._is_retried_add(md, existing.get(md.id))]
            if rows:
                conn.execute(insert(segments), rows)
            with_blooms = [(md, bloom) for md, bloom in new if bloom is not None]
            for chunk in _chunked([md.id for md, _bloom in with_blooms]):
                conn.execute(delete(blooms).where(blooms.c.segment_id.in_(chunk)))
            if with_blooms:
                conn.execute(insert(blooms), [{"segment_id": md.id, "topic": tp.topic, "partition_id": tp.partition,
                                               "data": bytes(bloom)} for md, bloom in with_blooms])
            return None, 0

        self._write(tp, "add_remote_log_segment_metadata", fn)

    @staticmethod
    def _is_retried_add(md: RemoteLogSegmentMetadata, row: Row[Any] | None) -> bool:
        """True when ``row`` is this very segment added before (a retry: nothing to insert);
        raises when the id is taken by anything else."""
        if row is None:
            return False
        old = _to_md(row)
        if (old.state is S.COPY_SEGMENT_STARTED and old.topic_partition == md.topic_partition
                and (old.start_offset, old.end_offset, old.segment_size_in_bytes)
                == (md.start_offset, md.end_offset, md.segment_size_in_bytes)):
            return True
        raise InvalidStateTransitionError(md.remote_log_segment_id, old.state, md.state,
                                          "segment id already exists; generate a fresh id for every upload attempt")

    def _segment_values(self, md: RemoteLogSegmentMetadata, leader_epoch: int) -> dict[str, Any]:
        """The row of a new segment."""
        tp = md.topic_partition
        return {"segment_id": md.id, "topic": tp.topic, "partition_id": tp.partition,
                "start_offset": md.start_offset, "end_offset": md.end_offset, "max_timestamp_ms": md.max_timestamp_ms,
                "broker_id": md.broker_id, "event_timestamp_ms": md.event_timestamp_ms,
                "size_bytes": md.segment_size_in_bytes, "state": md.state.value,
                "leader_epochs": _dump(md.segment_leader_epochs), "cleaner_offsets": _dump(md.cleaner_offsets),
                "superseded_by": None, "writer_epoch": leader_epoch, "created_ms": self._clock.milliseconds(),
                "key_index_bytes": md.key_index_bytes}

    def update_remote_log_segment_state(
        self,
        segment_id: RemoteLogSegmentId,
        state: RemoteLogSegmentState,
        *,
        leader_epoch: int,
        event_timestamp_ms: int,
        broker_id: int,
    ) -> RemoteLogSegmentMetadata:
        tp = segment_id.topic_partition

        def fn(conn: Connection) -> tuple[RemoteLogSegmentMetadata, int]:
            self._fence(conn, tp, leader_epoch, f"{state.name} of remote segment {segment_id}")
            row = self._segment_row(conn, segment_id)
            old = _to_md(row)
            if not S.is_valid_transition(old.state, state):
                raise InvalidStateTransitionError(segment_id, old.state, state)
            if old.state is state:
                return old, 0
            if state is S.COPY_SEGMENT_FINISHED and row.writer_epoch != leader_epoch:
                raise FencedLeaderEpochError(
                    tp, row.writer_epoch, leader_epoch, broker_id, "finish copy",
                    detail=f"remote segment {segment_id} was added under leader epoch {row.writer_epoch}; "
                           f"the leader at epoch {leader_epoch} cannot finish it (it is an orphan to delete)")
            conn.execute(update(segments).where(segments.c.segment_id == segment_id.id).values(
                state=state.value, event_timestamp_ms=event_timestamp_ms, broker_id=broker_id))
            if state is S.DELETE_SEGMENT_FINISHED:
                conn.execute(delete(blooms).where(blooms.c.segment_id == segment_id.id))
            delta = old.segment_size_in_bytes * (int(_referenced(state.value, old.superseded_by))
                                                 - int(_referenced(old.state.value, old.superseded_by)))
            new = old.with_state(state, event_timestamp_ms=event_timestamp_ms, broker_id=broker_id)
            return new, delta

        return self._write(tp, "update_remote_log_segment_state", fn)

    def publish_compaction(
        self,
        tp: TopicPartition,
        *,
        leader_epoch: int,
        new_segment_ids: Sequence[RemoteLogSegmentId],
        replaced_segment_ids: Sequence[RemoteLogSegmentId],
        cleaner_offsets: Mapping[int, int],
    ) -> None:
        vector = dict(sorted(cleaner_offsets.items()))
        new_ids = {s.id for s in new_segment_ids}
        if len(new_ids) != len(new_segment_ids) or new_ids & {s.id for s in replaced_segment_ids}:
            raise InvalidRequestError("publish_compaction: segment ids must be distinct and a segment cannot "
                                      "replace itself")
        for s in [*new_segment_ids, *replaced_segment_ids]:
            if s.topic_partition != tp:
                raise RemoteSegmentNotFoundError(f"remote segment {s} does not belong to {tp}")

        def fn(conn: Connection) -> tuple[None, int]:
            self._fence(conn, tp, leader_epoch, "publish of compacted segments")
            validate_cleaner_offsets(tp, leader_epoch, vector, self._vector(conn, tp), self._lineage(conn, tp))
            delta = 0
            rows = self._segment_rows(conn, tp, [*new_segment_ids, *replaced_segment_ids])
            new_rows = [rows[s.id] for s in new_segment_ids]
            finish: list[str] = []
            for s, row in zip(new_segment_ids, new_rows, strict=True):
                if row.state == S.COPY_SEGMENT_STARTED.value:
                    if row.writer_epoch != leader_epoch:
                        raise FencedLeaderEpochError(
                            tp, row.writer_epoch, leader_epoch, None, "publish",
                            detail=f"remote segment {s} was uploaded under leader epoch {row.writer_epoch} and "
                                   f"cannot be published at epoch {leader_epoch}")
                    finish.append(s.id)
                    delta += row.size_bytes
                elif not (_referenced(row.state, row.superseded_by) and _load(row.cleaner_offsets) == vector):
                    raise InvalidStateTransitionError(
                        s, S(row.state), S.COPY_SEGMENT_FINISHED,
                        "a compacted segment must be COPY_SEGMENT_STARTED when published")
            supersede: dict[str, list[str]] = {}  # replacement -> the segments it replaces
            for s in replaced_segment_ids:
                row = rows[s.id]
                if row.state != S.COPY_SEGMENT_FINISHED.value:
                    raise InvalidStateTransitionError(s, S(row.state), S.COPY_SEGMENT_FINISHED,
                                                      "only finished segments can be replaced")
                if row.superseded_by is None:
                    supersede.setdefault(_replacement(row, new_rows), []).append(s.id)
                    delta -= row.size_bytes
                elif row.superseded_by not in new_ids:
                    raise InvalidStateTransitionError(
                        s, S(row.state), S.COPY_SEGMENT_FINISHED,
                        f"already superseded by {row.superseded_by or '(nothing)'}")
            now = self._clock.milliseconds()
            if finish:
                conn.execute(update(segments).where(segments.c.segment_id.in_(finish)).values(
                    state=S.COPY_SEGMENT_FINISHED.value, cleaner_offsets=_dump(vector), event_timestamp_ms=now))
            for by, old_ids in supersede.items():
                for chunk in _chunked(old_ids):
                    conn.execute(update(segments).where(segments.c.segment_id.in_(chunk)).values(superseded_by=by))
            self._store_vector(conn, tp, vector)
            return None, delta

        self._write(tp, "publish_compaction", fn)

    def publish_cleaner_offsets(
        self, tp: TopicPartition, *, leader_epoch: int, cleaner_offsets: Mapping[int, int]
    ) -> None:
        vector = dict(sorted(cleaner_offsets.items()))

        def fn(conn: Connection) -> tuple[None, int]:
            self._fence(conn, tp, leader_epoch, "publish of cleaner offsets")
            validate_cleaner_offsets(tp, leader_epoch, vector, self._vector(conn, tp), self._lineage(conn, tp))
            self._store_vector(conn, tp, vector)
            return None, 0

        self._write(tp, "publish_cleaner_offsets", fn)

    @staticmethod
    def _store_vector(conn: Connection, tp: TopicPartition, vector: Mapping[int, int]) -> None:
        # lower epochs were validated equal, so replacing the whole vector only moves the newest entry
        conn.execute(delete(cleaner).where(_tp_where(cleaner, tp)))
        if vector:
            conn.execute(insert(cleaner), [{"topic": tp.topic, "partition_id": tp.partition, "epoch": e,
                                                "cleaner_offset": o} for e, o in vector.items()])

    # ------------------------------------------------------------------ reads

    def list_remote_log_segments(
        self,
        tp: TopicPartition,
        *,
        include_superseded: bool = False,
        states: Sequence[RemoteLogSegmentState] | None = None,
    ) -> list[RemoteLogSegmentMetadata]:
        wanted = [s.value for s in (states if states is not None else [S.COPY_SEGMENT_FINISHED])]
        stmt = select(segments).where(_tp_where(segments, tp), segments.c.state.in_(wanted))
        if not include_superseded:
            stmt = stmt.where(segments.c.superseded_by.is_(None))
        stmt = stmt.order_by(segments.c.start_offset, segments.c.segment_id)
        return self._read("list_remote_log_segments", lambda c: [_to_md(r) for r in c.execute(stmt)])

    def remote_log_segment_metadata(self, tp: TopicPartition, offset: int) -> RemoteLogSegmentMetadata | None:
        params = {"topic": tp.topic, "partition_id": tp.partition, "offset": offset}
        row = self._read("remote_log_segment_metadata", lambda c: c.execute(_SEGMENT_AT_OFFSET, params).first())
        return None if row is None else _to_md(row)

    def remote_log_size(self, tp: TopicPartition) -> int:
        with self._tp_lock(tp):  # a write of tp cannot commit between the SUM and caching it
            cached = self._sizes.get(tp)
            if cached is None:
                stmt = select(func.coalesce(func.sum(segments.c.size_bytes), 0)).where(
                    _tp_where(segments, tp), segments.c.state == S.COPY_SEGMENT_FINISHED.value,
                    segments.c.superseded_by.is_(None))
                cached = self._sizes[tp] = int(self._read("remote_log_size", lambda c: c.execute(stmt).scalar_one()))
            return cached

    def invalidate_caches(self, tp: TopicPartition | None = None) -> None:
        if tp is None:
            for t in list(self._sizes):
                self.invalidate_caches(t)
            return
        with self._tp_lock(tp):
            self._sizes.pop(tp, None)

    def cleaner_offsets(self, tp: TopicPartition) -> dict[int, int]:
        return dict(sorted(self._read("cleaner_offsets", lambda c: self._vector(c, tp)).items()))

    def resolve_cleaner_checkpoint(self, tp: TopicPartition) -> int | None:
        return resolve_checkpoint(self.cleaner_offsets(tp))

    def unreferenced_segments(
        self, tp: TopicPartition, *, orphan_grace_ms: int | None = None
    ) -> list[RemoteLogSegmentMetadata]:
        grace = self._orphan_grace_ms if orphan_grace_ms is None else orphan_grace_ms
        cutoff = self._clock.milliseconds() - grace
        leader = self.leader_state(tp)
        cur_epoch = leader.leader_epoch if leader is not None else -1
        stmt = select(segments).where(_tp_where(segments, tp), or_(
            and_(segments.c.state == S.COPY_SEGMENT_FINISHED.value, segments.c.superseded_by.is_not(None)),
            segments.c.state == S.DELETE_SEGMENT_STARTED.value,
            and_(segments.c.state == S.COPY_SEGMENT_STARTED.value,
                 or_(segments.c.writer_epoch < cur_epoch, segments.c.created_ms < cutoff)),
        )).order_by(segments.c.start_offset, segments.c.segment_id)
        return self._read("unreferenced_segments", lambda c: [_to_md(r) for r in c.execute(stmt)])

    def is_segment_within_leader_epochs(
        self, md: RemoteLogSegmentMetadata, tp: TopicPartition, log_end_offset: int | None = None
    ) -> bool:
        if md.topic_partition != tp:
            return False
        return is_segment_within_leader_epochs(md.segment_leader_epochs, md.end_offset,
                                               dict(self.leader_epochs(tp)), log_end_offset)

    # ------------------------------------------------------------------ bloom filters

    def put_bloom_filter(self, segment_id: RemoteLogSegmentId, data: bytes) -> None:
        tp = segment_id.topic_partition

        def fn(conn: Connection) -> tuple[None, int]:
            # a write first, so SQLite takes its write lock before the reads below
            conn.execute(delete(blooms).where(blooms.c.segment_id == segment_id.id))
            row = self._segment_row(conn, segment_id)
            if row.state == S.DELETE_SEGMENT_FINISHED.value:
                raise RemoteSegmentNotFoundError(f"remote segment {segment_id} was deleted")
            conn.execute(insert(blooms).values(segment_id=segment_id.id, topic=tp.topic, partition_id=tp.partition,
                                               data=bytes(data)))
            return None, 0

        self._write(tp, "put_bloom_filter", fn)

    def set_key_index(self, segment_id: RemoteLogSegmentId, size_bytes: int) -> None:
        if size_bytes < 0:
            raise InvalidRequestError(f"key index size {size_bytes} must be >= 0")
        tp = segment_id.topic_partition

        def fn(conn: Connection) -> tuple[None, int]:
            row = self._segment_row(conn, segment_id)
            if row.state == S.DELETE_SEGMENT_FINISHED.value:
                raise RemoteSegmentNotFoundError(f"remote segment {segment_id} was deleted")
            conn.execute(update(segments).where(segments.c.segment_id == segment_id.id)
                         .values(key_index_bytes=size_bytes))
            return None, 0

        self._write(tp, "set_key_index", fn)

    def get_bloom_filter(self, segment_id: RemoteLogSegmentId) -> bytes | None:
        tp = segment_id.topic_partition
        stmt = select(blooms.c.data).where(blooms.c.segment_id == segment_id.id, _tp_where(blooms, tp))
        row = self._read("get_bloom_filter", lambda c: c.execute(stmt).first())
        return None if row is None else bytes(row[0])

    def get_bloom_filters(self, tp: TopicPartition, segment_ids: Sequence[str]) -> dict[str, bytes]:
        ids = list(dict.fromkeys(segment_ids))

        def fn(conn: Connection) -> dict[str, bytes]:
            out: dict[str, bytes] = {}
            for i in range(0, len(ids), BLOOM_BATCH):  # bounded IN lists (SQLite's parameter limit)
                stmt = select(blooms.c.segment_id, blooms.c.data).where(
                    _tp_where(blooms, tp), blooms.c.segment_id.in_(ids[i:i + BLOOM_BATCH]))
                out.update((sid, bytes(data)) for sid, data in conn.execute(stmt))
            return out

        return self._read("get_bloom_filters", fn) if ids else {}

    # ------------------------------------------------------------------ admin

    def partitions(self) -> list[TopicPartition]:
        def fn(conn: Connection) -> list[TopicPartition]:
            a = conn.execute(select(leaders.c.topic, leaders.c.partition_id)).all()
            b = conn.execute(select(segments.c.topic, segments.c.partition_id).distinct()).all()
            return sorted({TopicPartition(t, p) for t, p in [*a, *b]})

        return self._read("partitions", fn)

    def begin_partition_deletion(
        self, tp: TopicPartition, *, leader_epoch: int, broker_id: int, event_timestamp_ms: int
    ) -> list[RemoteLogSegmentMetadata]:
        live = [S.COPY_SEGMENT_STARTED.value, S.COPY_SEGMENT_FINISHED.value]

        def fn(conn: Connection) -> tuple[list[RemoteLogSegmentMetadata], int]:
            self._fence(conn, tp, leader_epoch, "deletion of the partition's remote data")
            rows = conn.execute(select(segments).where(_tp_where(segments, tp))
                                .order_by(segments.c.start_offset, segments.c.segment_id)).all()
            delta = -sum(r.size_bytes for r in rows if _referenced(r.state, r.superseded_by))
            conn.execute(update(segments).where(_tp_where(segments, tp), segments.c.state.in_(live)).values(
                state=S.DELETE_SEGMENT_STARTED.value, event_timestamp_ms=event_timestamp_ms, broker_id=broker_id))
            out = [_to_md(r).with_state(S.DELETE_SEGMENT_STARTED, event_timestamp_ms=event_timestamp_ms,
                                        broker_id=broker_id)
                   for r in rows if r.state != S.DELETE_SEGMENT_FINISHED.value]
            return out, delta

        return self._write(tp, "begin_partition_deletion", fn)

    def delete_partition(self, tp: TopicPartition, *, leader_epoch: int | None = None) -> None:
        def fn(conn: Connection) -> tuple[None, int]:
            if leader_epoch is not None:
                exists = conn.execute(select(leaders.c.leader_epoch).where(_tp_where(leaders, tp))).first()
                if exists is not None:  # no row: deleted already (a retry) or never registered
                    self._fence(conn, tp, leader_epoch, "deletion of the partition's metadata")
            for table in (leaders, blooms, segments, cleaner, epochs):
                conn.execute(delete(table).where(_tp_where(table, tp)))
            conn.execute(delete(round_segments).where(
                round_segments.c.round_seq.in_(select(rounds.c.seq).where(_tp_where(rounds, tp)))))
            conn.execute(delete(rounds).where(_tp_where(rounds, tp)))
            return None, 0

        self._write(tp, "delete_partition", fn)
        with self._tp_lock(tp):
            self._sizes.pop(tp, None)

    # ------------------------------------------------------------------ round reports

    def record_compaction_report(self, report: CompactionReport, *, keep: int = DEFAULT_REPORTS_KEPT) -> None:
        if keep < 1:
            raise InvalidRequestError(f"keep={keep} must be >= 1")
        tp = report.topic_partition

        def fn(conn: Connection) -> tuple[None, int]:
            old = conn.execute(select(rounds.c.seq).where(rounds.c.round_id == report.round_id)).first()
            if old is not None:
                conn.execute(delete(round_segments).where(round_segments.c.round_seq == old[0]))
                conn.execute(delete(rounds).where(rounds.c.seq == old[0]))
            result = conn.execute(insert(rounds).values(
                round_id=report.round_id, topic=tp.topic, partition_id=tp.partition, engine=report.engine,
                leader_epoch=report.leader_epoch, started_ms=report.started_ms, ended_ms=report.ended_ms,
                checkpoint_before=report.checkpoint_before, checkpoint_after=report.checkpoint_after,
                outcome=report.outcome, error=report.error))
            pk = result.inserted_primary_key
            assert pk is not None
            seq = int(pk[0])
            if report.segments:
                conn.execute(insert(round_segments), _report_rows(seq, report))
            cutoff = conn.execute(select(rounds.c.seq).where(_tp_where(rounds, tp)).order_by(rounds.c.seq.desc())
                                  .offset(keep).limit(1)).first()
            if cutoff is not None:
                stale = select(rounds.c.seq).where(_tp_where(rounds, tp), rounds.c.seq <= cutoff[0])
                conn.execute(delete(round_segments).where(round_segments.c.round_seq.in_(stale)))
                conn.execute(delete(rounds).where(_tp_where(rounds, tp), rounds.c.seq <= cutoff[0]))
            return None, 0

        self._write(tp, "record_compaction_report", fn)

    def list_compaction_reports(self, tp: TopicPartition, *, limit: int = 20,
                                before: str | None = None) -> list[CompactionReport]:
        if limit < 1:
            raise InvalidRequestError(f"limit={limit} must be >= 1")

        def fn(conn: Connection) -> list[CompactionReport]:
            stmt = select(rounds).where(_tp_where(rounds, tp))
            if before is not None:
                row = conn.execute(select(rounds.c.seq).where(_tp_where(rounds, tp),
                                                              rounds.c.round_id == before)).first()
                if row is None:
                    raise InvalidRequestError(f"before={before!r} is not a round id of {tp}: page with the "
                                              f"round_id of the last report of the previous page")
                stmt = stmt.where(rounds.c.seq < row[0])
            rows = conn.execute(stmt.order_by(rounds.c.seq.desc()).limit(limit)).all()
            if not rows:
                return []
            segs: dict[int, list[Row[Any]]] = {r.seq: [] for r in rows}
            for s in conn.execute(select(round_segments).where(round_segments.c.round_seq.in_(list(segs)))
                                  .order_by(round_segments.c.round_seq, round_segments.c.ordinal)):
                segs[s.round_seq].append(s)
            return [_to_report(r, segs[r.seq]) for r in rows]

        return self._read("list_compaction_reports", fn)

    # ------------------------------------------------------------------ erasure receipts (#15)

    def _write_any(self, what: str, fn: Callable[[Connection], T]) -> T:
        """A write transaction not tied to one partition's lock."""
        if self._closed:
            raise MetadataStoreError("metadata manager is closed")
        with self._errors(what), self._all_lock, self._write_lock, self._engine.begin() as conn:
            return fn(conn)

    def create_erasure(self, record: ErasureRecord) -> None:
        def fn(conn: Connection) -> None:
            conn.execute(insert(erasures).values(
                erasure_id=record.erasure_id, topic=record.topic, created_ms=record.created_ms,
                deadline_ms=record.deadline_ms, keys=json.dumps(list(record.keys)), encoding=record.encoding))
            if record.partitions:
                conn.execute(insert(erasure_partitions), [
                    {"erasure_id": record.erasure_id, "partition_id": p.partition, "state": p.state,
                     "updated_ms": p.updated_ms, "detail": json.dumps(p.detail), "error": p.error}
                    for p in record.partitions])

        self._write_any("create_erasure", fn)

    def _erasure_records(self, conn: Connection, rows: Sequence[Row[Any]]) -> list[ErasureRecord]:
        if not rows:
            return []
        parts: dict[str, list[ErasurePartition]] = {r.erasure_id: [] for r in rows}
        for p in conn.execute(select(erasure_partitions).where(erasure_partitions.c.erasure_id.in_(list(parts)))
                              .order_by(erasure_partitions.c.erasure_id, erasure_partitions.c.partition_id)):
            parts[p.erasure_id].append(ErasurePartition(p.partition_id, p.state, p.updated_ms, json.loads(p.detail),
                                                        p.error))
        return [ErasureRecord(r.erasure_id, r.topic, r.created_ms, r.deadline_ms, tuple(json.loads(r.keys)),
                              r.encoding, tuple(parts[r.erasure_id])) for r in rows]

    def get_erasure(self, erasure_id: str) -> ErasureRecord | None:
        def fn(conn: Connection) -> ErasureRecord | None:
            rows = conn.execute(select(erasures).where(erasures.c.erasure_id == erasure_id)).all()
            found = self._erasure_records(conn, rows)
            return found[0] if found else None

        return self._read("get_erasure", fn)

    def list_erasures(self, *, topic: str | None = None, states: Sequence[str] | None = None,
                      limit: int = 1000) -> list[ErasureRecord]:
        if limit < 1:
            raise InvalidRequestError(f"limit={limit} must be >= 1")

        def fn(conn: Connection) -> list[ErasureRecord]:
            stmt = select(erasures)
            if topic is not None:
                stmt = stmt.where(erasures.c.topic == topic)
            if states is not None:
                stmt = stmt.where(erasures.c.erasure_id.in_(
                    select(erasure_partitions.c.erasure_id).where(erasure_partitions.c.state.in_(list(states)))))
            rows = conn.execute(stmt.order_by(erasures.c.created_ms.desc(), erasures.c.erasure_id)
                                .limit(limit)).all()
            return self._erasure_records(conn, rows)

        return self._read("list_erasures", fn)

    def update_erasure_partition(self, erasure_id: str, topic: str, part: ErasurePartition, *,
                                 leader_epoch: int | None = None) -> None:
        tp = TopicPartition(topic, part.partition)

        def fn(conn: Connection) -> tuple[None, int]:
            if leader_epoch is not None:
                self._fence(conn, tp, leader_epoch, "erasure progress")
            where = and_(erasure_partitions.c.erasure_id == erasure_id,
                         erasure_partitions.c.partition_id == part.partition)
            conn.execute(update(erasure_partitions).where(where).values(
                state=part.state, updated_ms=part.updated_ms, detail=json.dumps(part.detail), error=part.error))
            return None, 0

        self._write(tp, "update_erasure_partition", fn)

    # ------------------------------------------------------------------ topic configs

    def _write_global(self, what: str, fn: Callable[[Connection], T]) -> T:
        """One write transaction not tied to a partition (topic configs)."""
        if self._closed:
            raise MetadataStoreError("metadata manager is closed")
        with self._errors(what), self._all_lock, self._write_lock, self._engine.begin() as conn:
            return fn(conn)

    def put_topic_config(self, topic: StoredTopic) -> None:
        values = {"partitions": topic.partitions, "config": topic.config_json(),
                  "updated_ms": topic.updated_ms or self._clock.milliseconds()}

        def fn(conn: Connection) -> None:
            done = conn.execute(update(topic_configs).where(topic_configs.c.topic == topic.name).values(**values))
            if not done.rowcount:
                conn.execute(insert(topic_configs).values(topic=topic.name, **values))

        self._write_global("put_topic_config", fn)

    def get_topic_config(self, name: str) -> StoredTopic | None:
        stmt = select(topic_configs).where(topic_configs.c.topic == name)
        row = self._read("get_topic_config", lambda c: c.execute(stmt).first())
        return None if row is None else StoredTopic.from_row(row.topic, row.partitions, row.config, row.updated_ms)

    def list_topic_configs(self) -> list[StoredTopic]:
        rows = self._read("list_topic_configs",
                          lambda c: c.execute(select(topic_configs).order_by(topic_configs.c.topic)).all())
        return [StoredTopic.from_row(r.topic, r.partitions, r.config, r.updated_ms) for r in rows]

    def delete_topic_config(self, name: str) -> None:
        self._write_global("delete_topic_config",
                           lambda c: c.execute(delete(topic_configs).where(topic_configs.c.topic == name)))

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._engine.dispose()


def _replacement(old: Row[Any], new_rows: list[Row[Any]]) -> str:
    """The new segment that covers the replaced one's start ("" when compaction emptied it)."""
    best = ""
    for r in sorted(new_rows, key=lambda r: r.start_offset):
        if r.start_offset <= old.start_offset or not best:
            best = r.segment_id
        if r.start_offset <= old.start_offset <= r.end_offset:
            return str(r.segment_id)
    return best


_SCHEMA_LOCK_KEY = 0x74636D70  # "tcmp": PostgreSQL advisory lock serialising schema creation
_SCHEMA_ATTEMPTS = 10  # each lost race still leaves the winner's tables: a few rounds converge


def _create_schema(engine: Any) -> None:
    """Create or upgrade the schema, safely when several nodes open one store at once.

    On PostgreSQL the nodes serialise on an advisory lock (two concurrent CREATE TABLEs of the
    same name fail there: "already exists" or a duplicate key in pg_type); on any backend a
    creator that still loses such a race probes again and finds the tables made.
    """
    for attempt in range(_SCHEMA_ATTEMPTS):
        try:
            with _schema_lock(engine):
                _create_or_upgrade_schema(engine)
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
    from sqlalchemy import text

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
    from sqlalchemy import inspect, text

    if name in {c["name"] for c in inspect(engine).get_columns(table.name)}:
        return
    column = table.c[name]
    ddl = f"ALTER TABLE {table.name} ADD COLUMN {name} {column.type.compile(engine.dialect)}"
    with engine.begin() as conn:
        conn.execute(text(ddl))


def _report_rows(seq: int, report: CompactionReport) -> list[dict[str, Any]]:
    return [{"round_seq": seq, "ordinal": i, "segment_id": s.segment_id, "action": s.action,
             "base_offset": s.base_offset, "end_offset": s.end_offset, "superseded": s.superseded,
             "tombstone": s.tombstone, "aborted": s.aborted, "marker": s.marker, "bytes_in": s.bytes_in,
             "bytes_out": s.bytes_out, "downloaded": s.downloaded, "uploaded": s.uploaded, "requests": s.requests}
            for i, s in enumerate(report.segments)]


def _to_report(r: Row[Any], segs: list[Row[Any]]) -> CompactionReport:
    m = r._mapping
    return CompactionReport(
        round_id=m["round_id"], topic_partition=TopicPartition(m["topic"], m["partition_id"]), engine=m["engine"],
        leader_epoch=m["leader_epoch"], started_ms=m["started_ms"], ended_ms=m["ended_ms"],
        checkpoint_before=m["checkpoint_before"], checkpoint_after=m["checkpoint_after"], outcome=m["outcome"],
        error=m["error"],
        segments=tuple(SegmentReport(
            segment_id=s.segment_id, action=s.action, base_offset=s.base_offset, end_offset=s.end_offset,
            superseded=s.superseded, tombstone=s.tombstone, aborted=s.aborted, marker=s.marker,
            bytes_in=s.bytes_in, bytes_out=s.bytes_out, downloaded=s.downloaded, uploaded=s.uploaded,
            requests=s.requests) for s in segs))


def _postgres_on_connect(dbapi_connection: Any, _record: Any, *, lock_timeout_ms: int,
                         statement_timeout_ms: int) -> None:
    # session settings rather than libpq "options", so a URL's own ?options=... (search_path)
    # keeps working; SET is not transactional here because the connection is in autocommit
    # until SQLAlchemy begins
    cur = dbapi_connection.cursor()
    cur.execute(f"SET lock_timeout = {int(lock_timeout_ms)}")
    cur.execute(f"SET statement_timeout = {int(statement_timeout_ms)}")
    cur.execute(f"SET idle_in_transaction_session_timeout = {int(statement_timeout_ms)}")
    cur.close()
    dbapi_connection.commit()


def _sqlite_on_connect(dbapi_connection: Any, _record: Any) -> None:
    # WAL lets readers run while a writer commits; FULL sync keeps fencing decisions durable
    cur = dbapi_connection.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=FULL")
    cur.close()
