"""CleanerConfig: the broker-level log.cleaner.* settings (Kafka's CleanerConfig).

| Kafka property | field | default |
|---|---|---|
| log.cleaner.threads | threads | 1 |
| log.cleaner.dedupe.buffer.size | dedupe_buffer_size | 128 MiB (total, split between threads) |
| log.cleaner.io.buffer.load.factor | load_factor | 0.9 |
| log.cleaner.io.buffer.size | io_buffer_size | 512 KiB (total, read + write buffers of all threads) |
| log.cleaner.io.max.bytes.per.second | io_max_bytes_per_second | unlimited |
| log.cleaner.backoff.ms | backoff_ms | 15000 |
| message.max.bytes | max_message_size | 1048588 |
| log.cleaner.enable | enable | true |

Topic-level settings (min.cleanable.dirty.ratio, delete.retention.ms, ...) come from each log's
LogConfig.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from cleaner.offset_map import ENTRY_SIZE
from log.errors import InvalidConfigError

INT_MAX = 2**31 - 1
MIN_IO_BUFFER = 1024

#: Kafka property name -> field name (for from_properties)
PROPERTY_NAMES = {
    "log.cleaner.enable": "enable",
    "log.cleaner.threads": "threads",
    "log.cleaner.dedupe.buffer.size": "dedupe_buffer_size",
    "log.cleaner.io.buffer.load.factor": "load_factor",
    "log.cleaner.io.buffer.size": "io_buffer_size",
    "log.cleaner.io.max.bytes.per.second": "io_max_bytes_per_second",
    "log.cleaner.backoff.ms": "backoff_ms",
    "message.max.bytes": "max_message_size",
}


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    threads: int = 1
    dedupe_buffer_size: int = 128 * 1024 * 1024
    load_factor: float = 0.9
    io_buffer_size: int = 512 * 1024
    io_max_bytes_per_second: float = math.inf
    backoff_ms: int = 15_000
    max_message_size: int = 1_048_588
    enable: bool = True

    def __post_init__(self) -> None:
        def bad(name: str, value: Any, rule: str) -> InvalidConfigError:
            prop = next((k for k, v in PROPERTY_NAMES.items() if v == name), name)
            return InvalidConfigError(f"{prop}={value!r} is invalid: {rule}")

        if not isinstance(self.threads, int) or not 1 <= self.threads <= 1024:
            raise bad("threads", self.threads, "must be an integer between 1 and 1024")
        if not isinstance(self.dedupe_buffer_size, int) or self.dedupe_buffer_size < ENTRY_SIZE * 2 * self.threads:
            raise bad("dedupe_buffer_size", self.dedupe_buffer_size,
                      f"must be at least {ENTRY_SIZE * 2} bytes (two {ENTRY_SIZE}-byte offset-map entries) "
                      f"per cleaner thread ({self.threads})")
        if not 0.0 < self.load_factor <= 1.0:
            raise bad("load_factor", self.load_factor, "must be in (0, 1]")
        if self.max_entries_per_thread < 1:
            raise bad("dedupe_buffer_size", self.dedupe_buffer_size,
                      f"with load factor {self.load_factor} the offset map holds no key; "
                      f"it needs slots * load factor > 1 (Kafka's 'dedupe buffer too small')")
        if not isinstance(self.io_buffer_size, int) or self.io_buffer_size < MIN_IO_BUFFER:
            raise bad("io_buffer_size", self.io_buffer_size, f"must be at least {MIN_IO_BUFFER}")
        if not self.io_max_bytes_per_second > 0:
            raise bad("io_max_bytes_per_second", self.io_max_bytes_per_second, "must be > 0 (inf = no limit)")
        if not isinstance(self.backoff_ms, int) or self.backoff_ms < 0:
            raise bad("backoff_ms", self.backoff_ms, "must be an integer >= 0")
        if not isinstance(self.max_message_size, int) or self.max_message_size < 0:
            raise bad("max_message_size", self.max_message_size, "must be an integer >= 0")

    @property
    def dedupe_buffer_per_thread(self) -> int:
        """Kafka: min(dedupe.buffer.size / threads, Int.MaxValue)."""
        return min(self.dedupe_buffer_size // self.threads, INT_MAX)

    @property
    def slots_per_thread(self) -> int:
        return self.dedupe_buffer_per_thread // ENTRY_SIZE

    @property
    def max_entries_per_thread(self) -> int:
        """Keys one round can map: floor(slots * load factor) (A.4.1)."""
        return int(self.slots_per_thread * self.load_factor)

    @property
    def io_buffer_per_thread(self) -> int:
        """Kafka splits io.buffer.size between threads and between the read and write buffers."""
        return max(self.io_buffer_size // self.threads // 2, MIN_IO_BUFFER)

    @staticmethod
    def from_properties(props: Mapping[str, Any]) -> CleanerConfig:
        """Build from Kafka property names (``log.cleaner.threads``) or field names; unknown keys are errors."""
        defaults = {f.name: f.default for f in fields(CleanerConfig)}
        names = set(defaults)
        kwargs: dict[str, Any] = {}
        for k, v in props.items():
            name = PROPERTY_NAMES.get(k, k)
            if name not in names:
                raise InvalidConfigError(f"unknown cleaner config key {k!r}; known: {', '.join(sorted(PROPERTY_NAMES))}")
            default = defaults[name]
            try:
                if isinstance(default, bool):
                    v = v if isinstance(v, bool) else str(v).lower() == "true"
                elif isinstance(default, int):
                    v = int(v)
                else:
                    v = float(v)
            except (TypeError, ValueError):
                raise InvalidConfigError(f"{k}={v!r} is invalid: expected a number") from None
            kwargs[name] = v
        return CleanerConfig(**kwargs)
