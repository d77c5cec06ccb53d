"""producer.id.expiration.ms: idle producers are forgotten as Kafka's
removeExpiredProducers does, and the cleaner then drops their last batch."""

from __future__ import annotations

import pytest

from log.clock import MockClock
from log.config import LogConfig
from log.errors import InvalidConfigError
from log.local_log import LocalLog, RecordSpec
from tests.cleaner.model import Producers, all_batches
from tests.cleaner.test_cleaner import _put, _round

EXPIRY = 60_000


def test_an_idle_producer_expires_and_its_last_batch_is_cleaned(make_log, clock: MockClock) -> None:
    log = make_log(**{"producer.id.expiration.ms": EXPIRY})
    Producers(log).append([RecordSpec(b"a", b"1")], pid=5)
    _put(log, (b"a", b"2"), (b"z", b"1"))
    log.roll()
    clock.advance(EXPIRY - 1)
    assert log.remove_expired_producers() == []          # not idle long enough
    _round(log, clock.milliseconds())
    assert all_batches(log)[0].producer_id == 5            # kept as an empty header
    clock.advance(1)
    assert log.remove_expired_producers() == [5]
    assert 5 not in log.producer_state.active_producers()
    _round(log, clock.milliseconds(), checkpoint=None)
    assert [b.producer_id for b in all_batches(log)] == [-1, -1]  # Kafka drops the expired producer's batch


def test_a_producer_with_an_open_transaction_never_expires(make_log, clock: MockClock) -> None:
    log = make_log(**{"producer.id.expiration.ms": EXPIRY})
    Producers(log).append([RecordSpec(b"a", b"1")], pid=7, transactional=True)
    clock.advance(10 * EXPIRY)
    assert log.remove_expired_producers() == []
    assert log.producer_state.first_unstable_offset() == 0


def test_expired_producers_stay_forgotten_after_a_reopen(make_log, clock: MockClock) -> None:
    log = make_log(**{"producer.id.expiration.ms": EXPIRY})
    Producers(log).append([RecordSpec(b"a", b"1")], pid=5)
    log.roll()  # writes a snapshot that still holds producer 5
    clock.advance(EXPIRY)
    log.close()
    reopened = LocalLog(log.dir, log.config, clock=clock)
    assert 5 not in reopened.producer_state.active_producers()


def test_the_config_is_validated() -> None:
    assert LogConfig.from_dict({}).get("producer.id.expiration.ms") == 86_400_000
    with pytest.raises(InvalidConfigError, match="producer.id.expiration.ms"):
        LogConfig.from_dict({"producer.id.expiration.ms": 0})
