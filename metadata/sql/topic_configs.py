"""The SQL :class:`~metadata.topic_configs.TopicConfigStore`: one row per topic with its partition
count and config overrides as JSON, and one per deleted topic (whose deletion also drops the
consumer groups' committed offsets of it)."""

from __future__ import annotations

from sqlalchemy import Connection, delete, insert, select, text, update

from log.errors import TopicCollisionError
from log.types import topic_names_collide
from metadata.sql.engine import SqlStore
from metadata.sql.schema import deleted_topics, topic_configs
from metadata.topic_configs import StoredTopic

#: PostgreSQL advisory lock serialising topic creation across nodes ("tctc")
_TOPIC_CREATE_LOCK_KEY = 0x74637463


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
                conn.execute(delete(deleted_topics).where(deleted_topics.c.topic == topic.name))

        self._write_global("put_topic_config", fn)

    def create_topic_config(self, topic: StoredTopic) -> StoredTopic | None:
        values = {"partitions": topic.partitions, "config": topic.config_json(),
                  "updated_ms": topic.updated_ms or self._clock.milliseconds()}

        def fn(conn: Connection) -> StoredTopic | None:
            if conn.dialect.name == "postgresql":
                # creations of every node queue here for the rest of the transaction, so the name checks below and
                # the insert are one step (a unique key covers a same-name race, not a colliding one)
                conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _TOPIC_CREATE_LOCK_KEY})
            row = conn.execute(select(topic_configs).where(topic_configs.c.topic == topic.name)).first()
            if row is not None:
                return StoredTopic.from_row(row.topic, row.partitions, row.config, row.updated_ms)
            for (other,) in conn.execute(select(topic_configs.c.topic)):
                if topic_names_collide(other, topic.name):
                    raise TopicCollisionError(topic.name, other)
            conn.execute(insert(topic_configs).values(topic=topic.name, **values))
            conn.execute(delete(deleted_topics).where(deleted_topics.c.topic == topic.name))
            return None

        return self._write_global("create_topic_config", fn)

    def get_topic_config(self, name: str) -> StoredTopic | None:
        stmt = select(topic_configs).where(topic_configs.c.topic == name)
        row = self._read("get_topic_config", lambda c: c.execute(stmt).first())
        return None if row is None else StoredTopic.from_row(row.topic, row.partitions, row.config, row.updated_ms)

    def list_topic_configs(self) -> list[StoredTopic]:
        rows = self._read("list_topic_configs",
                          lambda c: c.execute(select(topic_configs).order_by(topic_configs.c.topic)).all())
        return [StoredTopic.from_row(r.topic, r.partitions, r.config, r.updated_ms) for r in rows]



    def record_topic_deletion(self, name: str, *, broker_id: int) -> None:
        # deferred: metadata.sql_group_offsets builds on metadata.sql, whose package imports this module
        from metadata.sql_group_offsets import delete_topic_offsets

        def fn(conn: Connection) -> None:
            conn.execute(delete(topic_configs).where(topic_configs.c.topic == name))
            conn.execute(delete(deleted_topics).where(deleted_topics.c.topic == name))
            conn.execute(insert(deleted_topics).values(topic=name, deleted_ms=self._clock.milliseconds(),
                                                       broker_id=broker_id))
            delete_topic_offsets(conn, name)  # the consumer groups' offsets of it go with it, as in Kafka

        self._write_global("record_topic_deletion", fn)

    def deleted_topics(self) -> dict[str, int]:
        rows = self._read("deleted_topics", lambda c: c.execute(select(deleted_topics)).all())
        return {r.topic: int(r.deleted_ms) for r in rows}

    def topic_deleted_ms(self, name: str) -> int | None:
        stmt = select(deleted_topics.c.deleted_ms).where(deleted_topics.c.topic == name)
        row = self._read("topic_deleted_ms", lambda c: c.execute(stmt).first())
        return None if row is None else int(row[0])
