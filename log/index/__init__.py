"""Kafka's per-segment index files (.index, .timeindex, .txnindex) and the key bloom filter."""
