"""Topic configs in the metadata store: every backend keeps, replaces, lists and forgets them,
and two managers on one store (two nodes, or a node and a Spark job) see the same configs."""

from __future__ import annotations

from pathlib import Path

from metadata.topic_configs import StoredTopic
from tests.contract.conftest import open_manager


def test_put_get_list_and_forget_at_deletion(metadata_backend: str, tmp_path: Path) -> None:
    with open_manager(metadata_backend, tmp_path) as m:
        assert m.list_topic_configs() == [] and m.get_topic_config("users") is None
        m.put_topic_config(StoredTopic("users", 3, {"cleanup.policy": "compact", "segment.bytes": 1024}))
        m.put_topic_config(StoredTopic("audit", 1, {}))
        got = m.get_topic_config("users")
        assert got is not None and got.partitions == 3 and got.config == {"cleanup.policy": "compact",
                                                                           "segment.bytes": 1024}
        assert got.updated_ms > 0
        # replaced whole (a PATCH stores the merged overrides)
        m.put_topic_config(StoredTopic("users", 3, {"cleanup.policy": "compact", "remote.storage.enable": True}))
        got = m.get_topic_config("users")
        assert got is not None and got.config == {"cleanup.policy": "compact", "remote.storage.enable": True}
        assert [t.name for t in m.list_topic_configs()] == ["audit", "users"]
        m.record_topic_deletion("users", broker_id=0)  # forgets the config
        m.record_topic_deletion("users", broker_id=0)  # a no-op for it the second time
        assert [t.name for t in m.list_topic_configs()] == ["audit"]


def test_shared_between_managers(metadata_backend: str, tmp_path: Path) -> None:
    if "memory" in metadata_backend:
        return  # one in-memory database per manager: nothing to share
    with open_manager(metadata_backend, tmp_path) as a:
        a.put_topic_config(StoredTopic("t", 2, {"remote.storage.enable": True}))
        from metadata import load_metadata_manager

        url = a._url  # the same store, as a second node or a Spark driver opens it
        with load_metadata_manager(url) as b:
            got = b.get_topic_config("t")
            assert got is not None and got.partitions == 2 and got.config == {"remote.storage.enable": True}


def test_create_is_atomic_and_refuses_a_colliding_name(metadata_backend: str, tmp_path: Path) -> None:
    """create_topic_config stores a new topic, answers the stored row for a name already there (writing nothing),
    and refuses a name that collides with another topic's ('.' against '_', Kafka's InvalidTopicException)."""
    import pytest

    from log.errors import TopicCollisionError

    with open_manager(metadata_backend, tmp_path) as m:
        assert m.create_topic_config(StoredTopic("a.b", 2, {"cleanup.policy": "compact"})) is None
        again = m.create_topic_config(StoredTopic("a.b", 5, {}))
        assert again is not None and again.partitions == 2 and again.config == {"cleanup.policy": "compact"}
        got = m.get_topic_config("a.b")
        assert got is not None and got.partitions == 2
        with pytest.raises(TopicCollisionError, match="collides with existing topic: a.b"):
            m.create_topic_config(StoredTopic("a_b", 1, {}))
        assert m.get_topic_config("a_b") is None
        assert m.create_topic_config(StoredTopic("a-b", 1, {})) is None  # '-' is not '.' or '_'
        m.record_topic_deletion("a.b", broker_id=0)
        assert m.create_topic_config(StoredTopic("a_b", 1, {})) is None  # the deleted one collides no more
        with pytest.raises(TopicCollisionError, match="collides with existing topic: a_b"):
            m.create_topic_config(StoredTopic("a.b", 1, {}))
        assert m.topic_deleted_ms("a.b") is not None  # still deleted: the refused create wrote nothing
        assert m.create_topic_config(StoredTopic("a-b", 1, {})) is not None
        m.record_topic_deletion("a-b", broker_id=0)
        assert m.create_topic_config(StoredTopic("a-b", 1, {})) is None and m.topic_deleted_ms("a-b") is None
