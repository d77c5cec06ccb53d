"""Producer ids unique across every node sharing the metadata store: blocks from a shared counter (Kafka's ProducerIdManager).

Each node asks the store for a block of :data:`BLOCK_SIZE` consecutive ids (one atomic
increment of a shared counter, ``ProducerIdBlockStore.claim_block``) and hands them out from
memory; the next block is fetched when the current one runs out. Ids are never reused, even
across restarts (an unused rest of a block is simply skipped), so two producers anywhere in
the cluster never share an id.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Protocol

from metadata.errors import MetadataError

#: ids per block (Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE)
BLOCK_SIZE = 1000
#: Kafka's producer ids are int64; an allocator that reaches this has nothing left to give
MAX_PRODUCER_ID = 2**63 - 1


class ProducerIdsExhaustedError(MetadataError):
    """The shared counter reached the int64 range's end (Kafka's producer id overflow)."""


@dataclass(frozen=True, slots=True)
class ProducerIdBlock:
    """Ids ``first .. first + size - 1``, claimed by ``broker_id``."""

    broker_id: int
    first: int
    size: int

    @property
    def last(self) -> int:
        return self.first + self.size - 1


class ProducerIdBlockStore(Protocol):
    """The shared counter behind the blocks (SQL: :mod:`metadata.sql.producer_ids`)."""

    def claim_block(self, broker_id: int, size: int) -> ProducerIdBlock:
        """Atomically take the next ``size`` ids for ``broker_id``; no other caller, on any node, gets them."""


class ProducerIdAllocator:
    """Hands out producer ids from blocks claimed in ``store``; thread-safe."""

    def __init__(self, store: ProducerIdBlockStore, broker_id: int, *, block_size: int = BLOCK_SIZE) -> None:
        self.store = store
        self.broker_id = broker_id
        self.block_size = block_size
        self._lock = threading.Lock()
        self._next = 0
        self._block: ProducerIdBlock | None = None

    def next_id(self) -> int:
        with self._lock:
            if self._block is None or self._next > self._block.last:
                self._block = self.store.claim_block(self.broker_id, self.block_size)
                self._next = self._block.first
            pid = self._next
            self._next += 1
            return pid
