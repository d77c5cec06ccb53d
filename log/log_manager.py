"""LogManager: every partition log under one data dir, plus the topic registry.

Topic configs persist in ``<data dir>/topics.json`` (written atomically); Kafka keeps
them in its controller, which a standalone service does not have. Partition
directories are ``<topic>-<partition>`` in Kafka's layout; the data dir also holds
``cleaner-offset-checkpoint``. Thread-safe.
"""

from __future__ import annotations

import fcntl
import json
import shutil
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from log.checkpoint import CLEANER_OFFSET_CHECKPOINT, atomic_write_text
from log.clock import SYSTEM_CLOCK, Clock
from log.config import LogConfig
from log.errors import DataDirInUseError, InvalidRequestError, TopicExistsError, UnknownTopicOrPartitionError
from log.local_log import LocalLog
from log.scheduler import Scheduler
from log.types import TopicPartition, validate_topic_name

TOPICS_FILE = "topics.json"
LOCK_FILE = ".lock"  # Kafka's log-dir lock: one process owns a data dir
MAX_PARTITIONS = 10_000


def _lock_data_dir(data_dir: Path) -> IO[bytes]:
    """Hold an exclusive lock on ``<data dir>/.lock`` for the manager's life (Kafka's FileLock).

    Two processes appending to, cleaning or recovering the same partition directories would
    corrupt them; the second one gets an error instead.
    """
    f = open(data_dir / LOCK_FILE, "a+b")  # noqa: SIM115 - held until close()
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.close()
        raise DataDirInUseError(
            f"data dir {data_dir} is in use by another tiercompact process (it holds {data_dir / LOCK_FILE}); "
            f"stop that process first, or use another --data-dir") from None
    return f


@dataclass(frozen=True)
class Topic:
    name: str
    partitions: int
    config: LogConfig

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "partitions": self.partitions, "config": dict(self.config.overrides)}


class LogManager:
    def __init__(self, data_dir: Path, *, clock: Clock = SYSTEM_CLOCK, scheduler: Scheduler | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._lock_file: IO[bytes] | None = _lock_data_dir(self.data_dir)
        self.clock = clock
        self.scheduler = scheduler
        self._lock = threading.RLock()
        self._topics: dict[str, Topic] = {}
        self._logs: dict[TopicPartition, LocalLog] = {}
        self._load()

    @property
    def cleaner_checkpoint_path(self) -> Path:
        return self.data_dir / CLEANER_OFFSET_CHECKPOINT

    def _load(self) -> None:
        path = self.data_dir / TOPICS_FILE
        if path.exists():
            try:
                raw = json.loads(path.read_text())
            except json.JSONDecodeError as e:
                raise InvalidRequestError(f"{path} is not valid JSON ({e}); restore it from a backup") from None
            for t in raw.get("topics", []):
                self._topics[t["name"]] = Topic(t["name"], int(t["partitions"]), LogConfig.from_dict(t["config"]))
        for topic in self._topics.values():
            for p in range(topic.partitions):
                tp = TopicPartition(topic.name, p)
                self._logs[tp] = LocalLog(self.data_dir / tp.dir_name, topic.config, clock=self.clock,
                                          scheduler=self.scheduler)

    def _persist(self) -> None:
        doc = {"version": 1, "topics": [t.as_dict() for t in sorted(self._topics.values(), key=lambda t: t.name)]}
        atomic_write_text(self.data_dir / TOPICS_FILE, json.dumps(doc, indent=2, sort_keys=True))

    # ---- topics --------------------------------------------------------------------------
    def create_topic(self, name: str, partitions: int = 1, config: Mapping[str, Any] | None = None) -> Topic:
        validate_topic_name(name)
        if not isinstance(partitions, int) or not 1 <= partitions <= MAX_PARTITIONS:
            raise InvalidRequestError(f"partitions={partitions!r} is invalid: must be 1..{MAX_PARTITIONS}")
        cfg = LogConfig.from_dict(config or {})
        with self._lock:
            if name in self._topics:
                raise TopicExistsError(f"topic {name!r} already exists")
            topic = Topic(name, partitions, cfg)
            for p in range(partitions):
                tp = TopicPartition(name, p)
                self._logs[tp] = LocalLog(self.data_dir / tp.dir_name, cfg, clock=self.clock, scheduler=self.scheduler)
            self._topics[name] = topic
            self._persist()
            return topic

    def topic(self, name: str) -> Topic:
        with self._lock:
            t = self._topics.get(name)
            if t is None:
                raise UnknownTopicOrPartitionError(f"unknown topic {name!r}; create it with POST /v1/topics")
            return t

    def topics(self) -> list[Topic]:
        with self._lock:
            return sorted(self._topics.values(), key=lambda t: t.name)

    def alter_config(self, name: str, changes: Mapping[str, Any]) -> Topic:
        with self._lock:
            old = self.topic(name)
            topic = Topic(name, old.partitions, old.config.with_overrides(changes))
            self._topics[name] = topic
            for p in range(topic.partitions):
                self._logs[TopicPartition(name, p)].config = topic.config
            self._persist()
            return topic

    def delete_topic(self, name: str) -> list[TopicPartition]:
        with self._lock:
            topic = self.topic(name)
            removed = []
            for p in range(topic.partitions):
                tp = TopicPartition(name, p)
                log = self._logs.pop(tp)
                log.close()
                shutil.rmtree(log.dir, ignore_errors=True)
                removed.append(tp)
            del self._topics[name]
            self._persist()
            return removed

    # ---- logs ----------------------------------------------------------------------------
    def get_log(self, tp: TopicPartition) -> LocalLog:
        with self._lock:
            log = self._logs.get(tp)
            if log is None:
                raise UnknownTopicOrPartitionError(
                    f"unknown partition {tp}; topic {tp.topic!r} "
                    + (f"has {self._topics[tp.topic].partitions} partitions" if tp.topic in self._topics
                       else "does not exist"))
            return log

    def all_logs(self) -> dict[TopicPartition, LocalLog]:
        with self._lock:
            return dict(self._logs)

    def close(self) -> None:
        with self._lock:
            for log in self._logs.values():
                log.close()
            if self._lock_file is not None:
                self._lock_file.close()  # releases the flock
                self._lock_file = None
