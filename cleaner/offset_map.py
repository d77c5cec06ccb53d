"""The cleaner's memory-bounded key -> latest offset map (Kafka's OffsetMap / SkimpyOffsetMap).

Layout of :class:`SkimpyOffsetMap` (storage/.../log/SkimpyOffsetMap.java), one entry per slot:

| bytes | field  | meaning |
|---|---|---|
| 0-15  | hash   | MD5 of the key bytes; 16 zero bytes = empty slot |
| 16-23 | offset | the latest offset seen for that key |

``slots = floor(memory / 24)``; the table never grows, whatever the number of keys. Kafka
keeps the 24 bytes in one ByteBuffer; here they live in three parallel numpy columns
(two uint64 halves of the hash and an int64 offset), 24 bytes per slot all the same.

Probing (Kafka's ``positionOf``): attempt ``i`` reads the big-endian int32 at hash bytes
``[min(i, 12), min(i, 12) + 4)`` and adds ``max(0, i - 12)`` (int32 arithmetic); the slot is
``abs(probe) % slots`` with ``abs(INT_MIN) = 0``. Keys are compared by hash only: an MD5
collision merges two keys, which Kafka accepts.

:class:`CompactOffsetMap` is the local cleaner's map: 16-byte slots (a 12-byte keyed digest and a
4-byte offset delta from the round's first mapped offset) in the record kernels' key table
(``cleaner/kernels/fastpath.py``: compiled, or the pure-Python reference), the same capacity rule,
allocated as keys arrive; it probes linearly from a digest's home slot (Kafka's probe sequence
jumps to an unrelated slot per attempt, a cache miss each), which changes no answer. The
cleaner recognises it and runs its compiled loops over it (``cleaner/fast_cleaner.py``); the
LogCleaner gives one to local and tiered rounds.
SkimpyOffsetMap is the reference path (any other OffsetMap, e.g. the Spark tasks' digest map,
goes through the same reference code) and the one to use where the map's full MD5 digests are
needed, since CompactOffsetMap keeps only keyed, truncated ones.

The cleaner's hot loops go through :meth:`OffsetMap.put_all` / :meth:`OffsetMap.get_all`, which
:class:`SkimpyOffsetMap` runs over whole chunks of keys with numpy (hash with hashlib, probe every
pending key of the chunk at once). They have exactly the semantics of calling :meth:`put` /
:meth:`get` once per key in order.

Thread-safety: none. Each cleaner thread owns its map.
"""

from __future__ import annotations

import abc
import hashlib
import os
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from cleaner.errors import OffsetMapFullError
from cleaner.kernels.fastpath import RecordKernels, kernels

HASH_SIZE = 16
ENTRY_SIZE = HASH_SIZE + 8
_INT32_MIN = -(2**31)
try:  # CPython's own MD5 (HACL*) is ~2.5x faster per short key than OpenSSL's via hashlib
    from _md5 import md5 as _MD5  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - other interpreters
    _MD5 = hashlib.md5


class OffsetMap(abc.ABC):
    """A fixed-capacity map from key to the latest offset seen for it in one cleaning round.

    ``latest_offset`` is the last offset handed to :meth:`put` or :meth:`update_latest_offset`
    (-1 after :meth:`clear`): the cleaner uses it as "how far this round mapped".
    """

    @property
    @abc.abstractmethod
    def slots(self) -> int:
        """Number of entries the map can hold."""

    @property
    @abc.abstractmethod
    def size(self) -> int:
        """Number of distinct keys in the map."""

    #: kept by every implementation's put and clear (and update_latest_offset)
    _latest: int

    @property
    def latest_offset(self) -> int:
        """The last offset given to :meth:`put` or :meth:`update_latest_offset`; -1 when cleared."""
        return self._latest

    @abc.abstractmethod
    def put(self, key: bytes, offset: int) -> None:
        """Map ``key`` to ``offset`` (overwriting) and set ``latest_offset = offset``.

        Raises:
            OffsetMapFullError: a new key arrives while every slot is taken.
        """

    @abc.abstractmethod
    def get(self, key: bytes) -> int:
        """The offset mapped for ``key``, or -1 if absent."""

    @abc.abstractmethod
    def clear(self) -> None:
        """Remove every entry and reset ``latest_offset`` to -1."""

    def update_latest_offset(self, offset: int) -> None:
        """Set ``latest_offset`` without adding an entry (the cleaner skips over offset gaps)."""
        self._latest = offset

    @property
    def utilization(self) -> float:
        """size / slots."""
        return self.size / self.slots

    def digests(self) -> list[bytes]:
        """The 16-byte MD5 digests of the keys in the map (what a key bloom filter is tested with)."""
        raise NotImplementedError

    def put_all(self, keys: Sequence[bytes], offsets: Sequence[int], max_entries: int) -> int:
        """Put ``keys[i] -> offsets[i]`` in order while ``size < max_entries`` holds before each put.

        This is the cleaner's capacity rule (A.4.1): once the map holds ``max_entries`` keys,
        even an overwrite is refused. Offsets must increase. Returns how many leading pairs were
        put (``len(keys)`` unless the map filled up).
        """
        for i, (k, o) in enumerate(zip(keys, offsets, strict=True)):
            if self.size >= max_entries:
                return i
            self.put(k, o)
        return len(keys)

    def get_all(self, keys: Sequence[bytes]) -> list[int]:
        """[:meth:`get` (k) for k in keys]."""
        return [self.get(k) for k in keys]


def max_map_entries(offset_map: OffsetMap, load_factor: float) -> int:
    """Keys one round may map: floor(slots x load factor) (A.4.1).

    Raises ValueError for a map too small to hold a single key.
    """
    n = int(offset_map.slots * load_factor)
    if n < 1:
        raise ValueError(f"offset map of {offset_map.slots} slots holds no key at load factor {load_factor}")
    return n


def _hash_matrix(keys: Sequence[bytes]) -> np.ndarray:
    """(n, 16) uint8 array of MD5 digests."""
    md5 = _MD5
    return np.frombuffer(b"".join([md5(k).digest() for k in keys]), dtype=np.uint8).reshape(-1, HASH_SIZE)


def _distinct(h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(index of the first occurrence of each distinct hash, inverse map record -> distinct)."""
    k = h.view(np.uint64)
    _, first_idx, inv = np.unique(k[:, 0], return_index=True, return_inverse=True)
    inv = inv.ravel()
    # equal first halves with different second halves: practically never; be exact anyway
    if not np.array_equal(k[first_idx[inv], 1], k[:, 1]):
        void = np.ascontiguousarray(h).view(np.dtype((np.void, HASH_SIZE))).ravel()
        _, first_idx, inv = np.unique(void, return_index=True, return_inverse=True)
        inv = inv.ravel()
    return first_idx, inv


class SkimpyOffsetMap(OffsetMap):
    """Kafka's SkimpyOffsetMap: open addressing over a fixed table of MD5 hashes and offsets.

    ``memory`` bytes buy ``memory // 24`` slots. The table is allocated once and zeroed by
    :meth:`clear`; a Python dict is never used for entries, so memory does not grow with the
    number of keys. Not thread-safe.
    """

    bytes_per_entry = ENTRY_SIZE

    def __init__(self, memory: int) -> None:
        slots = memory // ENTRY_SIZE
        if slots < 1:
            raise ValueError(f"offset map memory {memory} is below one {ENTRY_SIZE}-byte entry")
        self._slots = slots
        self._h0 = np.zeros(slots, dtype=np.uint64)
        self._h1 = np.zeros(slots, dtype=np.uint64)
        self._off = np.zeros(slots, dtype=np.int64)
        self._size = 0
        self._latest = -1
        #: probe attempts beyond the first, summed over lookups (Kafka's collision statistic)
        self.collisions = 0
        self.lookups = 0

    # ---- OffsetMap --------------------------------------------------------------------
    @property
    def slots(self) -> int:
        return self._slots

    @property
    def size(self) -> int:
        return self._size

    @property
    def memory_bytes(self) -> int:
        return self._h0.nbytes + self._h1.nbytes + self._off.nbytes

    def clear(self) -> None:
        if self._size:
            self._h0.fill(0)
            self._h1.fill(0)
            self._off.fill(0)
        self._size = 0
        self._latest = -1
        self.collisions = 0
        self.lookups = 0

    def put(self, key: bytes, offset: int) -> None:
        if self._size >= self._slots:  # Kafka refuses even an overwrite here
            raise OffsetMapFullError(f"attempt to add a new entry to a full offset map ({self._slots} slots)")
        h = _hash_matrix([key])
        found, slot, att = self._resolve(h)
        if found[0]:
            self._off[int(slot[0])] = offset
        else:
            self._insert(h, np.array([offset], dtype=np.int64), slot, att)
        self._latest = offset

    def get(self, key: bytes) -> int:
        return self.get_all([key])[0]

    def get_all(self, keys: Sequence[bytes]) -> list[int]:
        if not keys:
            return []
        found, slot, _att = self._resolve(_hash_matrix(keys))
        out = np.where(found, self._off[slot], -1)
        return out.tolist()

    def get_array(self, keys: Sequence[bytes]) -> np.ndarray:
        """Like :meth:`get_all`, as an int64 array (no list conversion)."""
        if not keys:
            return np.empty(0, dtype=np.int64)
        found, slot, _att = self._resolve(_hash_matrix(keys))
        return np.where(found, self._off[slot], -1)

    def put_all(self, keys: Sequence[bytes], offsets: Sequence[int], max_entries: int) -> int:
        n = len(keys)
        if n == 0:
            return 0
        if self._size >= max_entries:
            return 0
        max_entries = min(max_entries, self._slots)
        h = _hash_matrix(keys)
        offs = np.asarray(offsets, dtype=np.int64)
        # distinct hashes of the chunk, in order of first appearance
        first_idx, inv = _distinct(h)
        uh = h[first_idx]
        found, slot, attempts = self._resolve(uh)
        # record j adds a key iff it is the first occurrence of a hash that is not in the map
        is_new = np.zeros(n, dtype=bool)
        is_new[first_idx[~found]] = True
        size_before = self._size + np.cumsum(is_new) - is_new
        over = np.flatnonzero(size_before >= max_entries)
        consumed = int(over[0]) if over.size else n
        if consumed == 0:
            return 0
        # offsets increase, so each key's last offset among the consumed records is its max
        last = np.full(len(first_idx), -1, dtype=np.int64)
        np.maximum.at(last, inv[:consumed], offs[:consumed])
        used = last >= 0
        upd = used & found
        self._off[slot[upd]] = last[upd]
        ins = np.flatnonzero(used & ~found)
        if ins.size:
            # insert in order of first appearance; two new keys may probe into the same empty slot
            ins = ins[np.argsort(first_idx[ins], kind="stable")]
            self._insert(uh[ins], last[ins], slot[ins], attempts[ins])
        self._latest = int(offs[consumed - 1])
        return consumed

    # ---- probing ----------------------------------------------------------------------
    def _probe(self, windows: np.ndarray, attempts: np.ndarray) -> np.ndarray:
        """Slots for each key's attempt number (Kafka's positionOf)."""
        col = np.minimum(attempts, 12)
        probe = windows[np.arange(len(attempts)), col] + np.maximum(attempts - 12, 0)
        probe = ((probe + 2**31) % 2**32) - 2**31  # int32 wrap-around, as Java's int addition
        probe = np.where(probe == _INT32_MIN, 0, np.abs(probe))
        return probe % self._slots

    @staticmethod
    def _windows(h: np.ndarray) -> np.ndarray:
        """(n, 13) int64: the big-endian int32 at each hash byte offset 0..12."""
        n = h.shape[0]
        out = np.empty((n, 13), dtype=np.int64)
        buf = np.ascontiguousarray(h)
        for i in range(13):
            out[:, i] = np.ndarray(shape=(n,), dtype=">i4", buffer=buf, offset=i, strides=(HASH_SIZE,))
        return out

    def _resolve(self, h: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For each hash: (found, slot, attempt). ``slot`` is the match, or the first empty probe."""
        n = h.shape[0]
        k = np.ascontiguousarray(h).view(np.uint64)
        k0, k1 = k[:, 0], k[:, 1]
        windows = self._windows(h)
        found = np.zeros(n, dtype=bool)
        slot = np.full(n, -1, dtype=np.int64)
        attempts = np.zeros(n, dtype=np.int64)
        pending = np.arange(n)
        # a lookup gives up (absent) after every residue had a chance; at the cleaner's load
        # factor (<= 0.9) it never comes close
        limit = 2 * self._slots + 64
        self.lookups += n
        while pending.size:
            s = self._probe(windows[pending], attempts[pending])
            s0, s1 = self._h0[s], self._h1[s]
            match = (s0 == k0[pending]) & (s1 == k1[pending])
            empty = (s0 == 0) & (s1 == 0)
            done = match | empty
            found[pending[match]] = True
            slot[pending[done]] = s[done]
            pending = pending[~done]
            attempts[pending] += 1
            self.collisions += int(pending.size)
            if pending.size and int(attempts[pending].min()) > limit:
                break
        return found, slot, attempts

    def _insert(self, h: np.ndarray, offs: np.ndarray, slot: np.ndarray, attempts: np.ndarray) -> None:
        """Insert new keys whose lookup ended at an empty ``slot`` after ``attempts`` probes."""
        k = np.ascontiguousarray(h).view(np.uint64)
        windows = self._windows(h)
        pending = np.arange(h.shape[0])
        att = attempts.copy()
        cur = self._probe(windows, att)  # == ``slot`` unless the lookup gave up
        while pending.size:
            s = cur[pending]
            free = (self._h0[s] == 0) & (self._h1[s] == 0)
            cand = pending[free]
            # the first key (in insertion order) to want a free slot takes it
            _, win = np.unique(s[free], return_index=True)
            winners = cand[win]
            ws = cur[winners]
            self._h0[ws] = k[winners, 0]
            self._h1[ws] = k[winners, 1]
            self._off[ws] = offs[winners]
            self._size += int(winners.size)
            taken = np.zeros(h.shape[0], dtype=bool)
            taken[winners] = True
            pending = pending[~taken[pending]]
            if pending.size:
                att[pending] += 1
                cur[pending] = self._probe(windows[pending], att[pending])

    def digest_array(self) -> np.ndarray:
        """The keys' MD5 digests as an (n, 16) uint8 array (bloom filters test these at once)."""
        used = (self._h0 != 0) | (self._h1 != 0)
        return np.column_stack([self._h0[used], self._h1[used]]).view(np.uint8).reshape(-1, 16)

    def digests(self) -> list[bytes]:
        return [r.tobytes() for r in self.digest_array()]


COMPACT_ENTRY_SIZE = 16


class CompactOffsetMap(OffsetMap):
    """The offset map in 16-byte slots, over the record kernels' :class:`KeyTable`.

    Slot = 12-byte digest of the key (SipHash-2-4-128 keyed with a secret drawn per round by
    :meth:`clear`, truncated to 96 bits; MD5-96 in the pure-Python kernels) + little-endian
    uint32 ``offset - base``, base being the first offset put in the round. ``memory`` bytes buy
    ``memory // 16`` slots (the Kafka capacity rule uses them); the table itself starts at 1024
    slots and doubles while under that, so a round over few keys touches little memory.

    An offset more than 2^32-1 above the round's base cannot be stored: :meth:`put_all` stops
    there as if the map were full, so the round ends at that offset and the next one continues
    (Kafka's "multiple passes"). :meth:`put` raises OffsetMapFullError for it.

    The digests are keyed and truncated, so :meth:`digests` is not offered: a bloom filter of
    MD5 digests cannot be tested with them (the tiered cleaner digests its dirty keys itself,
    ``cleaner.key_skip.DirtyKeys``). Not thread-safe.
    """

    bytes_per_entry = COMPACT_ENTRY_SIZE

    def __init__(self, memory: int, record_kernels: RecordKernels | None = None) -> None:
        slots = memory // COMPACT_ENTRY_SIZE
        if slots < 1:
            raise ValueError(f"offset map memory {memory} is below one {COMPACT_ENTRY_SIZE}-byte entry")
        self.kernels = record_kernels if record_kernels is not None else kernels()
        self.table = self.kernels.KeyTable(slots)
        self.table.reset(os.urandom(16))
        self._latest = -1
        #: id(segment) -> (weak reference, first byte, end byte) the map pass read this round
        self._mapped: dict[int, tuple[weakref.ref[Any], int, int]] = {}
        #: id(segment) -> (weak reference, the map pass's notes of its plain batches)
        self._notes: dict[int, tuple[weakref.ref[Any], bytearray]] = {}

    @property
    def slots(self) -> int:
        return int(self.table.capacity)

    @property
    def size(self) -> int:
        return int(self.table.size)

    @property
    def memory_bytes(self) -> int:
        """Bytes of table allocated now (<= slots x 16)."""
        return int(self.table.memory_bytes)

    @property
    def collisions(self) -> int:
        return int(self.table.collisions)

    def clear(self) -> None:
        self.table.reset(os.urandom(16))  # a new secret per round
        self._latest = -1
        self._mapped.clear()
        self._notes.clear()

    def note_mapped(self, segment: object, first_byte: int, end_byte: int) -> None:
        """The map pass read ``segment``'s batches in ``[first_byte, end_byte)`` (this round). The
        rewriting pass may then decide those very batches' records with the table's supersession
        bitmap (``KeyTable._known``): same segment object, same bytes (a rolled segment does not
        change while the cleaner holds it), so an offset the bitmap knows is that record's."""
        self._mapped[id(segment)] = (weakref.ref(segment), first_byte, end_byte)

    def mapped_range(self, segment: object) -> tuple[int, int]:
        """``[first_byte, end_byte)`` of ``segment`` the map pass read this round, or (0, 0)."""
        entry = self._mapped.get(id(segment))
        if entry is None or entry[0]() is not segment:
            return 0, 0
        return entry[1], entry[2]

    def new_batch_notes(self, segment: object) -> bytearray:
        """An empty buffer for the map pass's notes of ``segment``'s plain batches (the kernels'
        ``map_batches``), kept for this round: the rewriting pass finds in them the batches it
        need not read (``superseded_runs``)."""
        notes = bytearray()
        self._notes[id(segment)] = (weakref.ref(segment), notes)
        return notes

    def batch_notes(self, segment: object) -> bytearray | None:
        """The notes the map pass took of ``segment`` this round, or None."""
        entry = self._notes.get(id(segment))
        if entry is None or entry[0]() is not segment or not entry[1]:
            return None
        return entry[1]

    def put(self, key: bytes, offset: int) -> None:
        st = self.table.put(key, offset, self.slots)
        if st == self.kernels.FULL:
            raise OffsetMapFullError(f"attempt to add a new entry to a full offset map ({self.slots} slots)")
        if st == self.kernels.DELTA_OVERFLOW:
            raise OffsetMapFullError(f"offset {offset} is more than 2^32-1 above the round's first offset "
                                     f"{self.table.base}")
        self._latest = offset

    def get(self, key: bytes) -> int:
        return int(self.table.get(key))

    def put_all(self, keys: Sequence[bytes], offsets: Sequence[int], max_entries: int) -> int:
        put = self.table.put
        ok = self.kernels.OK
        for i, (k, o) in enumerate(zip(keys, offsets, strict=True)):
            if put(k, o, max_entries) != ok:
                return i
            self._latest = o
        return len(keys)

    def get_all(self, keys: Sequence[bytes]) -> list[int]:
        get = self.table.get
        return [get(k) for k in keys]
