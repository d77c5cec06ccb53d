"""The metadata protocols stay small and apart, and the SQL store implements every one of them."""

from __future__ import annotations

import pytest

from metadata import (
    ClusterRegistry,
    ClusterSyncStore,
    ErasureReceiptStore,
    LogStartOffsetStore,
    MetadataStore,
    ProducerIdBlockStore,
    RemoteLogMetadataManager,
    RoundReportStore,
    SegmentIndexStore,
    TopicConfigStore,
    TopicDeletionStore,
)
from metadata.sql import SqlRemoteLogMetadataManager

SIDE_STORES = (SegmentIndexStore, RoundReportStore, ErasureReceiptStore, TopicConfigStore, TopicDeletionStore,
               ClusterSyncStore, LogStartOffsetStore)
#: the Kafka listener's stores, on the same database
KAFKA_STORES = (ClusterRegistry, ProducerIdBlockStore)


def _methods(protocol: type) -> set[str]:
    return {name for name, value in vars(protocol).items() if callable(value) and not name.startswith("_")}


def test_the_kafka_interface_holds_none_of_the_side_stores() -> None:
    kafka = _methods(RemoteLogMetadataManager)
    assert len(kafka) <= 20
    for side in SIDE_STORES:
        assert not kafka & _methods(side), side.__name__
        assert len(_methods(side)) <= 4, side.__name__


def test_the_kafka_listener_stores_stay_apart() -> None:
    kafka = _methods(RemoteLogMetadataManager)
    for store in KAFKA_STORES:
        assert not kafka & _methods(store), store.__name__
        for side in SIDE_STORES:
            assert not _methods(side) & _methods(store), (store.__name__, side.__name__)


def test_no_two_sql_stores_define_the_same_method() -> None:
    """The composed class has one namespace: a name two stores define would silently serve one of them."""
    owner: dict[str, str] = {}
    for base in SqlRemoteLogMetadataManager.__mro__:
        if not base.__module__.startswith("metadata.sql.") or base.__name__ == "SqlStore":
            continue
        for name, value in vars(base).items():
            if callable(value) and not name.startswith("__") and name != "_forget_partition":
                assert name not in owner, f"{name} is defined by both {owner[name]} and {base.__name__}"
                owner[name] = base.__name__


@pytest.mark.parametrize("protocol", [RemoteLogMetadataManager, *SIDE_STORES, *KAFKA_STORES, MetadataStore],
                         ids=lambda p: p.__name__)
def test_the_sql_store_implements_every_method(protocol: type) -> None:
    for name in _methods(protocol) | {"__enter__", "__exit__"} & set(vars(protocol)):
        assert getattr(SqlRemoteLogMetadataManager, name) is not vars(protocol)[name], f"{protocol.__name__}.{name}"
