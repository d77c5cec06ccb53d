"""The Spark rewrite stage's sizing rule: groups packed into tasks of enough bytes."""

from __future__ import annotations

import pytest

from cleaner.spark.job import rewrite_bins

MiB = 1 << 20


@pytest.mark.parametrize(("groups", "size", "parallelism", "bins"), [
    (56, 8 * MiB, 2, 14),       # the bench's 8-MB segments: 4 groups (32 MB) a task, not 56 tasks
    (64, 256 * 1024, 2, 2),     # tiny segments: one task per core, not 64
    (3, 1 * MiB, 8, 3),         # never more tasks than groups
    (10, 1 << 30, 2, 10),       # 1-GB groups are each a task already
])
def test_bins(groups: int, size: int, parallelism: int, bins: int) -> None:
    bin_of, packed = rewrite_bins([(g, size) for g in range(groups)], parallelism, 32 * MiB)
    assert len(packed) == bins and all(packed)
    assert [g for b in packed for g in b] == list(range(groups))  # consecutive, in log order
    assert all(bin_of[g] == b for b, gs in enumerate(packed) for g in gs)
    sizes = [len(b) for b in packed]
    assert max(sizes) - min(sizes) <= 1


def test_uneven_groups_never_leave_a_bin_empty() -> None:
    sizes = [(0, 100 * MiB), (1, MiB), (2, MiB), (3, MiB)]
    _bin_of, packed = rewrite_bins(sizes, 4, 32 * MiB)
    assert all(packed) and [g for b in packed for g in b] == [0, 1, 2, 3]
