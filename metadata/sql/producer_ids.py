"""The SQL :class:`~metadata.producer_ids.ProducerIdBlockStore`: one counter row
(``kafka_producer_id_blocks``), advanced by compare-and-set."""

from __future__ import annotations

from sqlalchemy import Connection, select, update

from metadata.producer_ids import MAX_PRODUCER_ID, ProducerIdBlock, ProducerIdsExhaustedError
from metadata.sql.engine import SqlStore
from metadata.sql.schema import producer_id_blocks

_ROW = 1
_ATTEMPTS = 100


class SqlProducerIdBlockStore(SqlStore):
    """Producer id blocks from the counter row (see :class:`~metadata.producer_ids.ProducerIdBlockStore`).

    ``UPDATE ... WHERE next_block_start = <read value>`` succeeds for exactly one of the nodes
    that read the same value (on both SQLite and PostgreSQL, without row locks); the others
    read again and retry.
    """

    def claim_block(self, broker_id: int, size: int) -> ProducerIdBlock:
        for _ in range(_ATTEMPTS):
            block = self._write_global("claim_producer_id_block", lambda c: self._try_claim(c, broker_id, size))
            if block is not None:
                return block
        raise ProducerIdsExhaustedError(f"could not claim a producer id block in {_ATTEMPTS} attempts "
                                        f"(heavy contention on the metadata store)")

    def _try_claim(self, conn: Connection, broker_id: int, size: int) -> ProducerIdBlock | None:
        t = producer_id_blocks
        start = conn.execute(select(t.c.next_block_start).where(t.c.id == _ROW)).scalar_one_or_none()
        if start is None:  # the first block ever; another node creating the row first means: read it again
            first = {"id": _ROW, "next_block_start": size, "last_broker_id": broker_id}
            return ProducerIdBlock(broker_id, 0, size) if self._insert_or_ignore(conn, t, first, ["id"]) else None
        if start > MAX_PRODUCER_ID - size:
            raise ProducerIdsExhaustedError(f"producer ids are exhausted (the next block would start at {start})")
        n = conn.execute(update(t).where(t.c.id == _ROW, t.c.next_block_start == start)
                         .values(next_block_start=start + size, last_broker_id=broker_id)).rowcount
        return ProducerIdBlock(broker_id, int(start), size) if n == 1 else None
