"""Producer id blocks from the metadata store: unique across allocators (nodes) and restarts."""

from __future__ import annotations

import threading

from metadata.producer_ids import ProducerIdAllocator
from metadata.sql.producer_ids import SqlProducerIdBlockStore


def test_ids_are_unique_across_nodes_threads_and_restarts(shared_store_url: str) -> None:
    url = shared_store_url
    stores = [SqlProducerIdBlockStore(url) for _ in range(3)]
    allocs = [ProducerIdAllocator(s, broker_id=i, block_size=7) for i, s in enumerate(stores)]
    got: list[int] = []
    lock = threading.Lock()

    def take(a: ProducerIdAllocator) -> None:
        mine = [a.next_id() for _ in range(40)]
        with lock:
            got.extend(mine)

    threads = [threading.Thread(target=take, args=(a,)) for a in allocs for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == len(set(got)) == 240 and min(got) >= 0
    # a restarted node never reuses an id, even the unused rest of its block
    restarted = ProducerIdAllocator(SqlProducerIdBlockStore(url), broker_id=0, block_size=7)
    assert restarted.next_id() > max(got)
    for s in [*stores, restarted.store]:
        s.close()
