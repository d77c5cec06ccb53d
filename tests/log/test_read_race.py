"""Local reads racing with segment replacement.

A read takes the segment list under the log's lock and reads the files without it; the
cleaner's swap renames the replaced segment to ``.deleted`` and deletes it. Before the fix
a read that reached such a segment failed with FileNotFoundError (a 500 from the API).
"""

from __future__ import annotations

import threading

from log.fetch import read_local
from log.local_log import LocalLog, RecordSpec

N_SEGMENTS = 12
PER_SEGMENT = 40


def _fill(log: LocalLog) -> int:
    for s in range(N_SEGMENTS):
        log.append_records([RecordSpec(f"k{s}-{i}".encode(), f"v{s}-{i}".encode()) for i in range(PER_SEGMENT)])
        log.roll()
    return log.log_end_offset


def _swap_in_copy(log: LocalLog, index: int) -> None:
    """What a cleaner round does to a segment that lost no record: write a ``.cleaned`` copy
    and swap it in (the old files become ``.deleted`` and, with no scheduler, are deleted
    at once, like a short file.delete.delay.ms)."""
    with log.lock:
        old = log.all_segments()[index]
        data = old.log_path.read_bytes()
        largest, ts, ts_offset = old.read_next_offset() - 1, old.max_timestamp_so_far, old.offset_of_max_timestamp_so_far
    new = log.create_cleaned_segment(old.base_offset)
    new.append(data, largest_offset=largest, largest_timestamp=ts, offset_of_largest_timestamp=ts_offset)
    log.replace_segments([new], [old])


def test_reads_see_every_offset_while_segments_are_swapped(make_log) -> None:
    log = make_log(segment_bytes=1 << 20)
    end = _fill(log)
    swaps = 400
    done = threading.Event()
    errors: list[BaseException] = []
    reads = [0]

    def swapper() -> None:
        try:
            for i in range(swaps):
                _swap_in_copy(log, i % N_SEGMENTS)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)
        finally:
            done.set()

    def reader(use_fetch: bool) -> None:
        try:
            while not done.is_set():
                offsets: list[int] = []
                nxt = 0
                while nxt < end:
                    if use_fetch:  # the API's local read path
                        res = read_local(log, nxt, max_bytes=600, max_records=25)
                        offsets += [r.offset for r in res.records]
                        nxt = res.next_offset
                    else:
                        batches = log.read(nxt, max_bytes=600)
                        offsets += [r.offset for b in batches for r in b.records() if r.offset >= nxt]
                        nxt = batches[-1].next_offset
                assert offsets == list(range(end))
                reads[0] += 1
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)
            done.set()

    threads = [threading.Thread(target=swapper)] + [threading.Thread(target=reader, args=(i % 2 == 0,))
                                                      for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads)
    assert not errors, errors
    assert reads[0] > 0
    assert [b.base_offset for b in log.read(0, max_bytes=1 << 30)][0] == 0
    assert not list(log.dir.glob("*.deleted")) and not list(log.dir.glob("*.swap"))


def test_reads_race_real_cleaner_rounds_without_errors(tmp_path) -> None:
    """The same race with the real cleaner: a producer keeps updating 50 keys and rolling,
    cleaner rounds keep swapping compacted segments in (file.delete.delay.ms=0), readers page
    through the log from its start. No read may fail, offsets only grow, and at the end the
    latest value of every key is the last one produced. (Timing decides whether a read meets a
    swap here; the previous test forces the race, this one checks the data end to end.)"""
    from cleaner.log_cleaner import clean_partition
    from log.log_manager import LogManager
    from log.types import TopicPartition

    lm = LogManager(tmp_path / "data")
    tp = TopicPartition("race", 0)
    lm.create_topic(tp.topic, 1, {"cleanup.policy": "compact", "segment.bytes": 1024, "file.delete.delay.ms": 0,
                                  "min.cleanable.dirty.ratio": 0.01})
    log = lm.get_log(tp)
    done = threading.Event()
    errors: list[BaseException] = []
    latest: dict[bytes, bytes] = {}
    rounds = [0]

    def producer() -> None:
        try:
            for r in range(200):
                recs = [RecordSpec(f"k{i}".encode(), f"v{r}-{i}".encode()) for i in range(50)]
                log.append_records(recs)
                latest.update((x.key, x.value) for x in recs)  # type: ignore[misc]
                log.roll()
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)

    def cleaner() -> None:
        try:
            while not done.is_set():
                clean_partition(lm, tp)
                rounds[0] += 1
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)
            done.set()

    def reader() -> None:
        try:
            while not done.is_set():
                nxt, last = log.log_start_offset, -1
                while nxt < log.high_watermark:
                    res = read_local(log, nxt, max_bytes=512, max_records=20)
                    offs = [r.offset for r in res.records]
                    assert offs == sorted(offs) and (not offs or offs[0] > last)
                    last = offs[-1] if offs else last
                    nxt = max(res.next_offset, nxt + (0 if offs else 1))
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)
            done.set()

    prod = threading.Thread(target=producer)
    others = [threading.Thread(target=cleaner)] + [threading.Thread(target=reader) for _ in range(3)]
    for t in [prod, *others]:
        t.start()
    prod.join(120)
    done.set()
    for t in others:
        t.join(120)
    try:
        assert not any(t.is_alive() for t in [prod, *others])
        assert not errors, errors
        assert rounds[0] > 0
        log.roll()
        clean_partition(lm, tp)
        seen = {r.key: r.value for b in log.read(log.log_start_offset, max_bytes=1 << 30) for r in b.records()}
        assert seen == latest
    finally:
        lm.close()
