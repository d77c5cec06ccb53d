"""The metadata protocols stay small and apart, and the SQL store implements every one of them."""

from __future__ import annotations

import pytest

from metadata import (
    ErasureReceiptStore,
    MetadataStore,
    RemoteLogMetadataManager,
    RoundReportStore,
    SegmentIndexStore,
    TopicConfigStore,
    TopicDeletionStore,
)
from metadata.sql import SqlRemoteLogMetadataManager

SIDE_STORES = (SegmentIndexStore, RoundReportStore, ErasureReceiptStore, TopicConfigStore, TopicDeletionStore)


def _methods(protocol: type) -> set[str]:
    return {name for name, value in vars(protocol).items() if callable(value) and not name.startswith("_")}


def test_the_kafka_interface_holds_none_of_the_side_stores() -> None:
    kafka = _methods(RemoteLogMetadataManager)
    assert len(kafka) <= 20
    for side in SIDE_STORES:
        assert not kafka & _methods(side), side.__name__
        assert len(_methods(side)) <= 4, side.__name__


@pytest.mark.parametrize("protocol", [RemoteLogMetadataManager, *SIDE_STORES, MetadataStore],
                         ids=lambda p: p.__name__)
def test_the_sql_store_implements_every_method(protocol: type) -> None:
    for name in _methods(protocol) | {"__enter__", "__exit__"} & set(vars(protocol)):
        assert getattr(SqlRemoteLogMetadataManager, name) is not vars(protocol)[name], f"{protocol.__name__}.{name}"
