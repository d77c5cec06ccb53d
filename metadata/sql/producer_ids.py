"""The producer id block counter in SQL (SQLite or PostgreSQL): one row, advanced by compare-and-set."""

from __future__ import annotations

from typing import Any

from sqlalchemy import BigInteger, Column, Integer, MetaData, Table, insert, select, update
from sqlalchemy import exc as sa_exc

from metadata.producer_ids import (
    MAX_PRODUCER_ID,
    ProducerIdBlock,
    ProducerIdBlockStore,
    ProducerIdsExhaustedError,
)
from metadata.sql.cluster import open_engine

_meta = MetaData()

blocks_table = Table(
    "kafka_producer_id_blocks", _meta,
    Column("id", Integer, primary_key=True, autoincrement=False),
    #: the first id of the next block to hand out
    Column("next_block_start", BigInteger, nullable=False),
    #: who took the last block (for an operator reading the table)
    Column("last_broker_id", Integer, nullable=False),
)

_ROW = 1
_ATTEMPTS = 100


class SqlProducerIdBlockStore(ProducerIdBlockStore):
    """Blocks from the ``kafka_producer_id_blocks`` row, on the metadata store's database.

    ``UPDATE ... WHERE next_block_start = <read value>`` succeeds for exactly one of the nodes
    that read the same value (on both SQLite and PostgreSQL, without row locks); the others
    read again and retry.
    """

    def __init__(self, url: str, *, lock_timeout_ms: int = 5_000, engine: Any = None) -> None:
        self._engine = engine if engine is not None else open_engine(url, lock_timeout_ms=lock_timeout_ms)
        _meta.create_all(self._engine, checkfirst=True)

    def claim_block(self, broker_id: int, size: int) -> ProducerIdBlock:
        for _ in range(_ATTEMPTS):
            try:
                block = self._try_claim(broker_id, size)
            except sa_exc.IntegrityError:
                continue  # another node created the row first: read it again
            if block is not None:
                return block
        raise ProducerIdsExhaustedError(f"could not claim a producer id block in {_ATTEMPTS} attempts "
                                        f"(heavy contention on the metadata store)")

    def _try_claim(self, broker_id: int, size: int) -> ProducerIdBlock | None:
        t = blocks_table
        with self._engine.begin() as conn:
            start = conn.execute(select(t.c.next_block_start).where(t.c.id == _ROW)).scalar_one_or_none()
            if start is None:
                conn.execute(insert(t).values(id=_ROW, next_block_start=size, last_broker_id=broker_id))
                return ProducerIdBlock(broker_id, 0, size)
            if start > MAX_PRODUCER_ID - size:
                raise ProducerIdsExhaustedError(f"producer ids are exhausted (the next block would start at {start})")
            n = conn.execute(update(t).where(t.c.id == _ROW, t.c.next_block_start == start)
                             .values(next_block_start=start + size, last_broker_id=broker_id)).rowcount
            return ProducerIdBlock(broker_id, int(start), size) if n == 1 else None

    def close(self) -> None:
        self._engine.dispose()
