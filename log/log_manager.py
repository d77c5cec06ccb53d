"""LogManager: every partition log under one data dir, plus the topic registry.

Topic configs persist in ``<data dir>/topics.json`` (written atomically, with an
identical ``topics.json.bak`` written first); Kafka keeps them in its controller, which a
standalone service does not have. A ``topics.json`` that does not parse is replaced by a
valid backup; if neither is valid the node refuses to start, naming both files. Partition
directories are ``<topic>-<partition>`` in Kafka's layout; the data dir also holds
``cleaner-offset-checkpoint``.

Offline partitions: a partition whose directory cannot be opened without losing data (a
corrupt, truncated or emptied rolled segment, a malformed leader-epoch-checkpoint, any
error while loading) is kept *offline* with the reason, the way Kafka takes a failed log
offline, and every other partition still opens. An offline partition is absent from
:meth:`LogManager.all_logs`, so the cleaner, retention and tiering never touch it, and
:meth:`LogManager.get_log` raises :class:`~log.errors.PartitionOfflineError` with the
reason. Deleting its topic works; to bring it back, fix the file and restart.

Thread-safe.
"""

from __future__ import annotations

import fcntl
import json
import logging
import shutil
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from log.checkpoint import CLEANER_OFFSET_CHECKPOINT, TMP_SUFFIX, atomic_write_text
from log.clock import SYSTEM_CLOCK, Clock
from log.config import LogConfig
from log.errors import (
    DataDirInUseError,
    InvalidConfigError,
    InvalidRequestError,
    PartitionOfflineError,
    TiercompactError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from log.local_log import LocalLog
from log.locks import RANK_LOG_REGISTRY, ordered_rlock
from log.scheduler import Scheduler
from log.types import TopicPartition, validate_topic_name

logger = logging.getLogger(__name__)

TOPICS_FILE = "topics.json"
TOPICS_BACKUP_FILE = "topics.json.bak"
LOCK_FILE = ".lock"  # Kafka's log-dir lock: one process owns a data dir
DIRECTORY_ID_FILE = "directory.id"  # the data dir's identity (Kafka's directory.id, KIP-858), made at first start
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
            f"stop that process first, or send the request to it (tiercompact clean ... --server URL)") from None
    return f


def _directory_id(data_dir: Path) -> str:
    """The data dir's random identity, written at its first start (under the data dir lock): a process that holds
    the lock and finds this id in a registration knows that registration's process is gone."""
    path = data_dir / DIRECTORY_ID_FILE
    try:
        found = path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        found = ""
    if len(found) == 32 and all(c in "0123456789abcdef" for c in found):
        return found
    made = uuid.uuid4().hex
    atomic_write_text(path, made + "\n")
    return made


@dataclass(frozen=True)
class Topic:
    name: str
    partitions: int
    config: LogConfig

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "partitions": self.partitions, "config": dict(self.config.overrides)}


class LogManager:
    def __init__(self, data_dir: Path, *, clock: Clock = SYSTEM_CLOCK, scheduler: Scheduler | None = None,
                 page_cache_window: int = -1) -> None:
        self.data_dir = Path(data_dir)
        #: each log's newest bytes kept in the page cache (-1: all of them; log/page_cache.py)
        self.page_cache_window = page_cache_window
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._lock_file: IO[bytes] | None = _lock_data_dir(self.data_dir)
        self.directory_id = _directory_id(self.data_dir)
        self.clock = clock
        self.scheduler = scheduler
        self._lock = ordered_rlock("log.registry", RANK_LOG_REGISTRY)
        self._topics: dict[str, Topic] = {}
        self._logs: dict[TopicPartition, LocalLog] = {}
        #: partitions whose directory failed to load -> why (see the module docstring)
        self._offline: dict[TopicPartition, str] = {}
        try:
            self._load()
        except BaseException:
            self.close()  # a manager that failed to open holds no lock and no open log
            raise

    @property
    def cleaner_checkpoint_path(self) -> Path:
        return self.data_dir / CLEANER_OFFSET_CHECKPOINT

    def _load(self) -> None:
        for name in (TOPICS_FILE, TOPICS_BACKUP_FILE, CLEANER_OFFSET_CHECKPOINT):
            # an atomic write a crash interrupted; the file it was replacing is intact
            (self.data_dir / (name + TMP_SUFFIX)).unlink(missing_ok=True)
        for topic in self._read_topics():
            self._topics[topic.name] = topic
        for topic in self._topics.values():
            for p in range(topic.partitions):
                self._open_log(TopicPartition(topic.name, p), topic.config)

    def _read_topics(self) -> list[Topic]:
        """The topic registry from topics.json, else from a valid topics.json.bak (restored)."""
        path, backup = self.data_dir / TOPICS_FILE, self.data_dir / TOPICS_BACKUP_FILE
        if not path.exists() and not backup.exists():
            return []
        try:
            return self._parse_topics(path)
        except InvalidConfigError as e:
            error = e
        try:
            topics = self._parse_topics(backup)
        except InvalidConfigError as backup_error:
            raise InvalidConfigError(
                f"{error}; the backup is unusable too ({backup_error}). The node cannot know its topics without "
                f"it: restore {path} from a backup (it lists each topic's partitions and config; the partition "
                f"directories <topic>-<n> in {self.data_dir} show which topics existed), then start again"
            ) from None
        logger.warning("%s; restored it from %s (%d topics)", error, backup.name, len(topics))
        atomic_write_text(path, backup.read_text(encoding="utf-8"))
        return topics

    @staticmethod
    def _parse_topics(path: Path) -> list[Topic]:
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            topics = [Topic(t["name"], int(t["partitions"]), LogConfig.from_dict(t["config"]))
                      for t in raw.get("topics", [])]
            for t in topics:
                validate_topic_name(t.name)
                if not 1 <= t.partitions <= MAX_PARTITIONS:
                    raise ValueError(f"topic {t.name!r} has {t.partitions} partitions")
            return topics
        except FileNotFoundError:
            raise InvalidConfigError(f"{path} is missing") from None
        except (OSError, ValueError, KeyError, TypeError, AttributeError, TiercompactError) as e:
            raise InvalidConfigError(f"{path} is not a valid topic registry ({type(e).__name__}: {e})") from None

    def _new_log(self, tp: TopicPartition, config: LogConfig) -> LocalLog:
        """Open (or create) one partition's log in this data dir, with the manager's clock, scheduler and window."""
        return LocalLog(self.data_dir / tp.dir_name, config, clock=self.clock, scheduler=self.scheduler,
                        page_cache_window=self.page_cache_window)

    def _open_log(self, tp: TopicPartition, config: LogConfig) -> LocalLog | None:
        """Open (and recover) one partition; a failure takes only that partition offline."""
        try:
            log = self._new_log(tp, config)
        except Exception as e:  # any failure to load must not stop the other partitions
            reason = str(e) if isinstance(e, TiercompactError) else (
                f"{type(e).__name__}: {e}. Check the files in {self.data_dir / tp.dir_name}, fix or restore "
                f"them (or delete the topic), and restart the node")
            logger.error("partition %s is OFFLINE: %s", tp, reason,
                         exc_info=not isinstance(e, TiercompactError))
            self._offline[tp] = reason
            return None
        self._logs[tp] = log
        return log

    def _persist(self) -> None:
        doc = {"version": 1, "topics": [t.as_dict() for t in sorted(self._topics.values(), key=lambda t: t.name)]}
        text = json.dumps(doc, indent=2, sort_keys=True)
        # the backup first: a crash between the two leaves the old topics.json, itself valid
        atomic_write_text(self.data_dir / TOPICS_BACKUP_FILE, text)
        atomic_write_text(self.data_dir / TOPICS_FILE, text)

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
                self._logs[tp] = self._new_log(tp, cfg)
            self._topics[name] = topic
            self._persist()
            return topic

    def add_partitions(self, name: str, count: int) -> Topic:
        """Grow ``name`` to ``count`` partitions (Kafka's CreatePartitions: never fewer)."""
        with self._lock:
            old = self.topic(name)
            if not isinstance(count, int) or not old.partitions < count <= MAX_PARTITIONS:
                raise InvalidRequestError(f"partitions={count!r} is invalid for topic {name!r}: it has "
                                          f"{old.partitions}; the new count must be more, up to {MAX_PARTITIONS}")
            for p in range(old.partitions, count):
                tp = TopicPartition(name, p)
                self._logs[tp] = self._new_log(tp, old.config)
            topic = self._topics[name] = Topic(name, count, old.config)
            self._persist()
            return topic

    def topic(self, name: str) -> Topic:
        with self._lock:
            t = self._topics.get(name)
            if t is None:
                raise UnknownTopicOrPartitionError(f"unknown topic {name!r}: no topic of that name exists (create it "
                                                   f"first)")
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
                log = self._logs.get(TopicPartition(name, p))
                if log is not None:  # an offline partition gets the new config when it opens again
                    log.config = topic.config
            self._persist()
            return topic

    def delete_topic(self, name: str) -> list[TopicPartition]:
        with self._lock:
            topic = self.topic(name)
            removed = []
            for p in range(topic.partitions):
                tp = TopicPartition(name, p)
                log = self._logs.pop(tp, None)
                if log is not None:
                    log.close()
                self._offline.pop(tp, None)
                shutil.rmtree(self.data_dir / tp.dir_name, ignore_errors=True)
                removed.append(tp)
            del self._topics[name]
            self._persist()
            return removed

    # ---- logs ----------------------------------------------------------------------------
    def get_log(self, tp: TopicPartition) -> LocalLog:
        with self._lock:
            log = self._logs.get(tp)
            if log is None and tp in self._offline:
                raise PartitionOfflineError(f"partition {tp} is offline: {self._offline[tp]}")
            if log is None:
                raise UnknownTopicOrPartitionError(
                    f"unknown partition {tp}; topic {tp.topic!r} "
                    + (f"has {self._topics[tp.topic].partitions} partitions" if tp.topic in self._topics
                       else "does not exist"))
            return log

    def all_logs(self) -> dict[TopicPartition, LocalLog]:
        """The online partitions' logs (offline ones are left out: nothing may touch them)."""
        with self._lock:
            return dict(self._logs)

    def offline_partitions(self) -> dict[TopicPartition, str]:
        """Offline partition -> the reason it could not be opened (and what to do)."""
        with self._lock:
            return dict(self._offline)

    def offline_reason(self, tp: TopicPartition) -> str | None:
        with self._lock:
            return self._offline.get(tp)

    def close(self, *, clean: bool = True, timeout: float | None = None) -> bool:
        """Close every log (see LocalLog.close; ``timeout`` bounds the whole close) and release
        the data dir. Returns whether every log was closed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._lock.acquire(timeout=-1 if timeout is None else timeout):
            logger.warning("the topic registry is busy at shutdown; logs left unclosed (recovered at the next start)")
            return False
        try:
            closed = True
            for log in self._logs.values():
                left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
                closed = log.close(clean=clean, timeout=left) and closed
            if self._lock_file is not None:
                self._lock_file.close()  # releases the flock
                self._lock_file = None
            return closed
        finally:
            self._lock.release()
