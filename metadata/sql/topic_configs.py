"""The SQL :class:`~metadata.topic_configs.TopicConfigStore`: one row per topic with its partition
count and config overrides as JSON."""

from __future__ import annotations

from sqlalchemy import Connection, delete, insert, select, update

from metadata.sql.engine import SqlStore
from metadata.sql.schema import topic_configs
from metadata.topic_configs import StoredTopic


class SqlTopicConfigStore(SqlStore):
    """Topic configs shared by every node and Spark job (see
    :class:`~metadata.topic_configs.TopicConfigStore`)."""

    def put_topic_config(self, topic: StoredTopic) -> None:
        values = {"partitions": topic.partitions, "config": topic.config_json(),
                  "updated_ms": topic.updated_ms or self._clock.milliseconds()}

        def fn(conn: Connection) -> None:
            done = conn.execute(update(topic_configs).where(topic_configs.c.topic == topic.name).values(**values))
            if not done.rowcount:
                conn.execute(insert(topic_configs).values(topic=topic.name, **values))

        self._write_global("put_topic_config", fn)

    def get_topic_config(self, name: str) -> StoredTopic | None:
        stmt = select(topic_configs).where(topic_configs.c.topic == name)
        row = self._read("get_topic_config", lambda c: c.execute(stmt).first())
        return None if row is None else StoredTopic.from_row(row.topic, row.partitions, row.config, row.updated_ms)

    def list_topic_configs(self) -> list[StoredTopic]:
        rows = self._read("list_topic_configs",
                          lambda c: c.execute(select(topic_configs).order_by(topic_configs.c.topic)).all())
        return [StoredTopic.from_row(r.topic, r.partitions, r.config, r.updated_ms) for r in rows]

    def delete_topic_config(self, name: str) -> None:
        self._write_global("delete_topic_config",
                           lambda c: c.execute(delete(topic_configs).where(topic_configs.c.topic == name)))

