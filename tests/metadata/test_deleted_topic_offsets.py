"""A topic's deletion in the metadata store drops every consumer group's committed and pending offsets of it (Kafka's GroupMetadataManager.cleanupGroupMetadata), for every node sharing the store."""

from __future__ import annotations

from log.types import TopicPartition
from metadata import load_metadata_manager
from metadata.coordinators import GROUP
from metadata.group_offsets import CommittedOffset, CoordinatorFence
from metadata.sql_coordinators import SqlCoordinatorStore
from metadata.sql_group_offsets import SqlGroupStore
from metadata.topic_configs import StoredTopic

GONE0, GONE1, KEPT = TopicPartition("gone", 0), TopicPartition("gone", 1), TopicPartition("kept", 0)


def test_deleting_a_topic_drops_its_offsets_in_every_group(shared_store_url: str) -> None:
    meta = load_metadata_manager(shared_store_url)  # the node deleting the topic
    claims = SqlCoordinatorStore(shared_store_url)  # another node's group coordinator
    groups = SqlGroupStore(engine=claims.engine)
    try:
        claim = claims.claim(GROUP, 0, 7, "inc", 1_000, expected_epoch=None)
        assert claim is not None
        fence = CoordinatorFence(0, 7, claim.epoch)
        for t in ("gone", "kept"):
            meta.put_topic_config(StoredTopic(t, 2, {}))
        groups.commit("g1", {GONE0: CommittedOffset(5), GONE1: CommittedOffset(6), KEPT: CommittedOffset(7)}, fence)
        groups.commit("g2", {GONE1: CommittedOffset(8)}, fence)
        groups.add_txn_offsets("g1", 4242, 0, {GONE0: CommittedOffset(9), KEPT: CommittedOffset(10)}, fence)

        meta.record_topic_deletion("gone", broker_id=1)

        assert groups.offsets("g1") == {KEPT: CommittedOffset(7)}
        assert groups.offsets("g2") == {}
        assert groups.pending_txn_partitions("g1") == {KEPT}
        assert groups.complete_txn(4242, commit=True) == 1  # only the kept topic's pending offset was left
        assert groups.offsets("g1") == {KEPT: CommittedOffset(10)}
        # created again: it starts without offsets
        meta.put_topic_config(StoredTopic("gone", 2, {}))
        assert groups.offsets("g1", [GONE0, GONE1]) == {}
    finally:
        groups.close()
        claims.close()
        meta.close()


def test_a_store_without_group_tables_deletes_topics_as_before(shared_store_url: str) -> None:
    """No node ever ran a Kafka listener on this store: there are no offsets to drop."""
    meta = load_metadata_manager(shared_store_url)
    try:
        meta.put_topic_config(StoredTopic("t", 1, {}))
        meta.record_topic_deletion("t", broker_id=0)
        assert "t" in meta.deleted_topics() and meta.get_topic_config("t") is None
    finally:
        meta.close()
