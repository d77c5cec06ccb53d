"""Topic configs in the metadata store: every backend keeps, replaces, lists and forgets them,
and two managers on one store (two nodes, or a node and a Spark job) see the same configs."""

from __future__ import annotations

from pathlib import Path

from metadata.topic_configs import StoredTopic
from tests.contract.conftest import open_manager


def test_put_get_list_delete(metadata_backend: str, tmp_path: Path) -> None:
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
        m.delete_topic_config("users")
        m.delete_topic_config("users")  # a no-op the second time
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
