"""Errors of the Spark offload (they derive from the cleaner's, so the service maps them).

::

    LogCleaningError (cleaner.errors)
    └── SparkJobError      the Spark job failed (a task exhausted its retries, the session died);
                           the job's uploads were removed and nothing was published
"""

from __future__ import annotations

from cleaner.errors import LogCleaningError


class SparkJobError(LogCleaningError):
    """The Spark job failed before publishing; its uploads were removed (best effort)."""

    retriable = True
