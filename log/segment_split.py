"""Kafka's splitOverflowedSegment: rewrite a segment whose offsets overflow its base's 32-bit range."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from log.errors import SimulatedCrash
from log.segment import CLEANED_SUFFIX, LogSegment

if TYPE_CHECKING:
    from log.local_log import LocalLog

logger = logging.getLogger(__name__)


def split_overflowed_segment(log: LocalLog, seg: LogSegment) -> list[LogSegment]:
    """Kafka's splitOverflowedSegment (LogLoader; KAFKA-20036 for the cleaner): rewrite a
    segment whose offsets overflow its base's 32-bit range into as many segments as needed,
    copying batches byte for byte, with the swap protocol so a crash recovers.

    Each transaction-index entry goes to the new segment holding its marker. Returns the
    new segments (``[seg]`` when it does not overflow). Raises CorruptRecordError on a
    damaged batch (nothing is replaced).
    """
    with log.lock:
        if seg not in log.segments or seg is log.active_segment or not seg.has_overflow():
            return [seg]
        news: list[LogSegment] = []
        try:
            for pos, batch in seg.batches(0):
                batch.ensure_valid(source=str(seg.log_path), position=pos)
                if not news or not news[-1].can_hold(batch.last_offset):
                    base = seg.base_offset if not news and seg.can_hold(batch.last_offset) else batch.base_offset
                    news.append(log.create_cleaned_segment(base))
                news[-1].append(batch.raw, largest_offset=batch.last_offset,
                                largest_timestamp=batch.max_timestamp,
                                offset_of_largest_timestamp=batch.last_offset)
            for txn in seg.txn_index.all():
                holder = [n for n in news if n.base_offset <= txn.last_offset] or news[:1]
                holder[-1].append_aborted_txn(txn)
            for new in news:
                new.on_become_inactive()
                new.set_last_modified(seg.last_modified)
            logger.info("%s: split overflowed segment %d into %s", log.topic_partition, seg.base_offset,
                        [n.base_offset for n in news])
            log.replace_segments(news, [seg])
        except SimulatedCrash:
            raise
        except BaseException:
            for new in news:
                if new.suffix == CLEANED_SUFFIX:
                    new.delete_files()
            raise
        return news
