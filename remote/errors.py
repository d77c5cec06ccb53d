"""Errors of the remote (object store) layer.

    TiercompactError
    └── RemoteStorageError                 an object-store operation failed (key in the message)
        ├── RemoteStorageTransientError    retriable: throttling, 5xx, connection reset
        │   ├── RemoteStorageTimeoutError  the operation timed out
        │   ├── RemoteStorageChecksumError what the store holds is not what was sent (nothing kept)
        │   └── StoreUnavailableError      the store is known to be down (circuit open): fail fast
        ├── ObjectNotFoundError            no object under that key
        ├── RemoteStorageIOError           non-retriable failure: denied, bad request, truncated data
        └── RemoteStorageNotInstalledError the backend's library is missing (pip install hint)

botocore's ClientError/BotoCoreError and OSError are translated in the store modules and
never leave them.
"""

from __future__ import annotations

from log.errors import TiercompactError


class RemoteStorageError(TiercompactError):
    """An object-store operation failed. ``key`` is the object key when one is involved."""

    def __init__(self, message: str, *, key: str | None = None) -> None:
        self.key = key
        super().__init__(message if key is None or key in message else f"{message} (key {key!r})")


class RemoteStorageTransientError(RemoteStorageError):
    """A failure a retry may fix."""

    retriable = True


class RemoteStorageTimeoutError(RemoteStorageTransientError):
    """The store did not answer in time."""


class RemoteStorageChecksumError(RemoteStorageTransientError):
    """An upload's checksum did not verify: the bytes the store received (or wrote) differ
    from the source's. The store removed what it wrote, so nothing corrupt stays under the
    key; retrying the upload may succeed (the corruption happened in transit)."""


class StoreUnavailableError(RemoteStorageTransientError):
    """The object store failed repeatedly and is treated as down for a cool-down period
    (remote.breaker); the call was not attempted. ``retry_after_s`` says when to try again."""

    def __init__(self, message: str, *, key: str | None = None, retry_after_s: float = 1.0) -> None:
        self.retry_after_s = retry_after_s
        super().__init__(message, key=key)


class ObjectNotFoundError(RemoteStorageError):
    """No object exists under the key."""


class SegmentReplacedError(ObjectNotFoundError):
    """The remote segment a read was reading was replaced meanwhile (a cleaner's publish): what the read gathered
    around it may no longer match, so the read starts over (the read paths retry on ObjectNotFoundError)."""


class RemoteStorageIOError(RemoteStorageError):
    """A failure a retry will not fix (access denied, invalid request, data verification failed)."""


class RemoteStorageNotInstalledError(RemoteStorageError):
    """The library a backend needs is not installed."""
