"""Object stores and tiering: ObjectStore backends, RemoteStorageManager (and the RemoteLogManager)."""

from __future__ import annotations

from typing import Any

from log.errors import InvalidConfigError
from remote.object_store import ObjectStore

__all__ = ["ObjectStore", "load_object_store"]


def load_object_store(url: str, **options: Any) -> ObjectStore:
    """Open the object store at ``url``.

    ``file:///abs/dir`` (or a plain path) -> :class:`remote.file_store.FileObjectStore`;
    ``s3://bucket[/prefix]`` -> :class:`remote.s3_store.S3ObjectStore` with ``options``
    (endpoint_url, region, multipart_threshold, part_size, max_attempts, access_key_id, ...).
    """
    if url.startswith("file://") or "://" not in url:
        from remote.file_store import FileObjectStore

        if options:
            raise InvalidConfigError(f"file:// object store takes no options, got {sorted(options)}")
        return FileObjectStore(url)
    if url.startswith("s3://"):
        from remote.s3_store import S3ObjectStore

        return S3ObjectStore.from_url(url, **options)
    raise InvalidConfigError(
        f"object store URL {url!r} is not supported: use file:///<dir> or s3://<bucket>/<prefix>"
    )
