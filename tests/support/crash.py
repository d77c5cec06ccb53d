"""What a process death does to a LogManager, for tests that "restart" in the same process."""

from __future__ import annotations

from log.local_log import CLEAN_SHUTDOWN_FILE
from log.log_manager import LogManager


def simulate_process_death(lm: LogManager) -> None:
    """Files are closed without a clean-shutdown marker and the data dir's lock is released,
    as the kernel does when the process dies; nothing is flushed or finished."""
    for log in lm.all_logs().values():
        for seg in log.all_segments():
            seg.close()
        (log.dir / CLEAN_SHUTDOWN_FILE).unlink(missing_ok=True)
    if lm._lock_file is not None:
        lm._lock_file.close()
        lm._lock_file = None
