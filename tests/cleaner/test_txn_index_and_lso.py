"""The transaction index's search rules and the LSO it records.

* Kafka's ``TransactionIndex.collectAbortedTxns`` judges completeness on every entry, not only
  on the entries that match the searched range.
* An ABORT marker's entry records the LSO after the transaction: the first offset of the
  earliest other open transaction, which may be 0 (a 0 is not "none").
"""

from __future__ import annotations

from pathlib import Path

from cleaner.cleaner import Cleaner
from cleaner.config import CleanerConfig
from cleaner.log_to_clean import LogToClean, cleanable_offsets
from cleaner.offset_map import SkimpyOffsetMap
from log.clock import MockClock
from log.fetch import READ_COMMITTED, read_local
from log.index.txn_index import (
    AbortedTxn,
    TransactionIndex,
    collect_aborted_transactions,
    collect_aborted_txns,
)
from log.local_log import LocalLog, RecordSpec
from remote.remote_reader import collect_aborted
from tests.cleaner.model import Producers, all_batches


def test_collect_is_complete_on_a_non_matching_entry(tmp_path: Path) -> None:
    """An entry outside the range whose LSO reaches the upper bound completes the search."""
    idx = TransactionIndex(tmp_path / "00000000000000000000.txnindex", 0)
    idx.append(AbortedTxn(1, 0, 5, 100))   # ends below the fetch offset, but LSO 100 >= upper 20
    assert idx.collect(10, 20) == ([], True)
    idx.append(AbortedTxn(2, 12, 30, 31))  # after the completing entry: Kafka stops before it
    assert idx.collect(10, 20) == ([], True)
    assert collect_aborted_txns(idx.all(), 10, 20) == ([], True)
    assert collect_aborted(idx.all(), 10, 20) == ([], True)  # the remote read path's search, the same rule
    # a matching entry below the upper bound is returned and does not complete the search
    assert idx.collect(0, 200) == ([AbortedTxn(1, 0, 5, 100), AbortedTxn(2, 12, 30, 31)], False)


def test_chain_walk_stops_at_the_first_complete_index() -> None:
    loaded: list[int] = []

    def link(base: int, *txns: AbortedTxn):
        def load() -> list[AbortedTxn]:
            loaded.append(base)
            return list(txns)
        return base, load

    chain = [link(0), link(10, AbortedTxn(7, 3, 12, 4)), link(20, AbortedTxn(8, 21, 22, 50)), link(30)]
    # [5, 10): walks 0 (floor of 5), then 10: entry (7, 3..12) overlaps, LSO 4 < 10 -> go on;
    # 20: entry LSO 50 >= 10 completes the search although it does not overlap
    assert collect_aborted_transactions(chain, 5, 10) == [AbortedTxn(7, 3, 12, 4)]
    assert loaded == [0, 10, 20]
    loaded.clear()
    assert collect_aborted_transactions(chain, 25, 25) == []
    assert loaded == []


def _round(log: LocalLog, now: int) -> int:
    cfg = CleanerConfig(dedupe_buffer_size=24 * 1000, load_factor=1.0)
    o = cleanable_offsets(log, None, now)
    ltc = LogToClean(log.topic_partition, log, o.first_dirty_offset, o.first_uncleanable_dirty_offset)
    end, _stats = Cleaner(SkimpyOffsetMap(cfg.dedupe_buffer_per_thread), cfg).do_clean(ltc, now)
    return end


def test_lso_zero_is_recorded_and_aborted_data_is_removed_by_a_local_clean(make_log, clock: MockClock) -> None:
    """Producer 1's transaction starts at offset 0 and is still open when producer 2 aborts: the
    entry's LSO is 0. Recorded as the marker's offset + 1 instead, it "completed" the cleaner's
    search in the first segment and producer 1's ABORT (in the next segment) was never seen, so
    its aborted record survived the clean."""
    log = make_log(**{"cleanup.policy": "compact"})
    p = Producers(log)
    p.append([RecordSpec(b"a", b"aborted-by-1")], pid=1, transactional=True)   # offset 0, txn of pid 1 open
    p.append([RecordSpec(b"b", b"aborted-by-2")], pid=2, transactional=True)   # offset 1
    p.end(2, commit=False)                                                      # offset 2
    (entry,) = log.all_segments()[0].txn_index.all()
    assert entry == AbortedTxn(2, 1, 2, 0)
    log.roll()
    p.end(1, commit=False)                                                      # offset 3, the active segment
    assert log.last_stable_offset == 4
    end = _round(log, clock.milliseconds())
    assert end == 3
    values = [r.value for b in all_batches(log) if not b.is_control for r in b.records()]
    assert values == []  # both aborted records removed (their batches kept as empty headers)
    assert read_local(log, 0, max_bytes=1 << 20, isolation=READ_COMMITTED).records == []
