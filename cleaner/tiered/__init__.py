"""Tiered cleaning: Kafka's cleaning round for a partition whose segments live in an object store.

The package, one module a step: :mod:`~cleaner.tiered.plan` (the cleanable range from metadata
alone, and the grouping), :mod:`~cleaner.tiered.space` (the round's temporary disk),
:mod:`~cleaner.tiered.sources` (a source segment: a linked local copy or a verified download),
:mod:`~cleaner.tiered.txn_indexes` (aborted transactions over both tiers),
:mod:`~cleaner.tiered.round` (the round itself, :class:`TieredCleaner`) and
:mod:`~cleaner.tiered.selection` (the tiered pool's LogToClean).
"""

from cleaner.tiered.plan import TieredRoundPlan, dirty_ratio, group_remote_segments, plan_round
from cleaner.tiered.round import MAX_KEPT_SOURCES, TieredCleaner
from cleaner.tiered.selection import TieredContext, TieredLogToClean, tiered_log_to_clean
from cleaner.tiered.space import TempSpace
from cleaner.tiered.txn_indexes import RoundTxnIndexes

__all__ = [
    "MAX_KEPT_SOURCES",
    "RoundTxnIndexes",
    "TempSpace",
    "TieredCleaner",
    "TieredContext",
    "TieredLogToClean",
    "TieredRoundPlan",
    "dirty_ratio",
    "group_remote_segments",
    "plan_round",
    "tiered_log_to_clean",
]
