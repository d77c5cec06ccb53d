"""'Keep each producer's last batch' uses producer state that covers the whole log.

A producer whose batches live only in remote segments must be protected by a tiered round just
as a local one is: the round reads the log's producer state (log.producer_state), which the
node restores from the producer snapshot uploaded with the newest remote segment, never a state
derived from the local segments or from the batches the round happens to read.
"""

from __future__ import annotations

import pytest

from log.errors import OutOfOrderSequenceError
from log.local_log import RecordSpec
from log.record import RecordBatch, iter_batches
from tests.tiered.conftest import BOTH_STORES, TP, World

PID = 7


def _remote_batches(w: World) -> list[RecordBatch]:
    out = []
    for md in w.rlmm.list_remote_log_segments(TP):
        data = w.rsm.fetch_log_segment(md, 0)
        out.extend(b for _pos, b in iter_batches(data))
    return out


@BOTH_STORES
def test_a_producer_seen_only_in_remote_segments_keeps_its_last_batch(make_world) -> None:
    w1 = make_world()
    w1.log.append_records([RecordSpec(b"a", b"by-producer-7", timestamp=w1.clock.milliseconds())],
                          producer_id=PID, producer_epoch=0, base_sequence=0)
    w1.produce([(b"a", b"plain-1"), (b"b", b"plain-2")])
    w1.roll_and_tier()
    assert w1.log.log_start_offset == 3  # every batch of producer 7 is remote-only now

    # a second node with an empty data dir takes over the partition
    w2 = make_world(broker_id=1)
    w2.rlm.become_leader(TP, w1.rlm.leader_epoch(TP) + 1, 1)
    assert not any(s.size for s in w2.log.all_segments())
    assert w2.log.producer_state.active_producers()[PID].last_data_offset == 0
    w2.produce([(b"a", b"plain-3")])
    w2.roll_and_tier()
    w2.clean()

    batches = {b.base_offset: b for b in _remote_batches(w2)}
    kept = batches.get(0)
    assert kept is not None, "producer 7's last batch was removed by the tiered round"
    assert (kept.producer_id, kept.base_sequence, kept.last_sequence, kept.records_count) == (PID, 0, 0, 0)
    assert 1 not in batches  # a plain superseded batch goes
    assert w2.read_all()[-2:] == [(2, b"b", b"plain-2"), (3, b"a", b"plain-3")]
    # the producer's sequence state survives: a retry is a duplicate, a gap is refused
    dup = w2.log.append_records([RecordSpec(b"a", b"by-producer-7")], producer_id=PID, producer_epoch=0,
                                base_sequence=0)
    assert dup.duplicate and dup.base_offset == 0
    with pytest.raises(OutOfOrderSequenceError):
        w2.log.append_records([RecordSpec(b"x", b"y")], producer_id=PID, producer_epoch=0, base_sequence=5)
    assert w2.log.append_records([RecordSpec(b"c", b"next")], producer_id=PID, producer_epoch=0,
                                 base_sequence=1).base_offset == 4
