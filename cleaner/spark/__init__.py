"""Spark offload of tiered compaction: picklable tasks (``tasks``) and the driver (``job``).

Only :mod:`cleaner.spark.job` imports pyspark; :mod:`cleaner.spark.tasks` is plain Python so
its functions can be unit-tested (and run) without a Spark session.
"""

from __future__ import annotations
