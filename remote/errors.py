"""Errors of the remote (object store) layer.

    TiercompactError
    └── RemoteStorageError                 an object-store operation failed (key in the message)
        ├── RemoteStorageTransientError    retriable: throttling, 5xx, connection reset
        │   └── RemoteStorageTimeoutError  the operation timed out
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


class ObjectNotFoundError(RemoteStorageError):
    """No object exists under the key."""


class RemoteStorageIOError(RemoteStorageError):
    """A failure a retry will not fix (access denied, invalid request, data verification failed)."""


class RemoteStorageNotInstalledError(RemoteStorageError):
    """The library a backend needs is not installed."""
