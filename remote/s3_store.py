"""S3ObjectStore: ``s3://bucket/prefix`` through boto3 (imported lazily), MinIO via endpoint_url.

* Objects up to ``multipart_threshold`` (8 MiB) go in one PUT; larger ones as a multipart
  upload of ``part_size`` parts, aborted on any failure so no partial upload lingers.
  S3 makes a completed PUT visible atomically, so readers never see a partial object.
* Every upload carries checksums the store verifies before it keeps anything: Content-MD5
  and x-amz-checksum-crc32c on a PUT and on every part of a multipart upload (S3 and MinIO
  reject a body that does not match: BadDigest). Because some S3 implementations (moto)
  do not check them, the answer is checked too: a PUT's or part's ETag must be the MD5 of
  the bytes sent (``verify_etag``; turn it off for SSE-KMS/SSE-C buckets, whose ETags are
  not MD5s), and a returned CRC-32C must be ours. When the caller passes the source's
  CRC-32C (ChecksummedData), the bytes read are checked against it before the upload is
  completed. A mismatch removes the object (aborts the multipart upload) and raises
  RemoteStorageChecksumError. A HEAD then compares sizes: a truncated upload is deleted
  and raises RemoteStorageIOError.
* Retries: one layer, ours: exponential backoff around each call for throttling, 5xx,
  connection errors, timeouts and short reads, bounded by ``max_attempts`` and by
  ``max_total_s`` per call (botocore's own retries are off, so attempts do not multiply).
  Connect and read timeouts bound each socket operation of an attempt, and a body must move at
  ``min_transfer_rate`` bytes a second at least: an attempt sending or reading ``n`` bytes fails
  (RemoteStorageTimeoutError, retried) once ``read_timeout_s + n / min_transfer_rate`` seconds
  have passed. Without it a store that trickles, each socket operation answered just within
  its timeout, would hold an upload or a download (and the request or round waiting on it) for
  ever.
* botocore's ClientError / BotoCoreError are translated into remote.errors here.
* Picklable: the client is dropped in ``__getstate__`` and rebuilt lazily per process
  (Spark executors receive stores). boto3 clients are thread-safe, so one per process.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import io
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, TypeVar
from urllib.parse import urlparse

from log.errors import InvalidConfigError
from log.locks import RANK_STORE_CLIENT, ordered_lock
from log.record.crc32c import crc32c
from remote.errors import (
    ObjectNotFoundError,
    RemoteStorageChecksumError,
    RemoteStorageError,
    RemoteStorageIOError,
    RemoteStorageNotInstalledError,
    RemoteStorageTimeoutError,
    RemoteStorageTransientError,
)
from remote.file_store import atomic_write_from
from remote.object_store import ObjectStore, PutData, open_upload, validate_key

T = TypeVar("T")
MiB = 1024 * 1024
MIN_PART_SIZE = 5 * MiB  # S3 rejects smaller non-final parts
_TRANSIENT_CODES = frozenset({
    "SlowDown", "Throttling", "ThrottlingException", "RequestTimeout", "RequestTimeoutException",
    "InternalError", "ServiceUnavailable", "RequestLimitExceeded", "IncompleteBody",
})
#: the store received a body that does not match the checksums sent with it
_CHECKSUM_CODES = frozenset({"BadDigest", "XAmzContentChecksumMismatch", "XAmzContentSHA256Mismatch"})
_NOT_FOUND_CODES = frozenset({"NoSuchKey", "404", "NotFound"})


class _ShortRead(RemoteStorageTransientError):
    pass


class S3ObjectStore(ObjectStore):
    """An S3 bucket (optionally under a key prefix) as an ObjectStore."""

    verifies_writes = True  # put() HEADs the object and compares sizes (_verify)

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        session_token: str | None = None,
        multipart_threshold: int = 8 * MiB,
        part_size: int = 8 * MiB,
        max_attempts: int = 5,
        backoff_s: float = 0.1,
        max_backoff_s: float = 5.0,
        connect_timeout_s: float = 10.0,
        read_timeout_s: float = 60.0,
        max_total_s: float = 120.0,
        min_transfer_rate: float = 256 * 1024,
        verify_etag: bool = True,
        addressing_style: str | None = None,
    ) -> None:
        if not bucket:
            raise InvalidConfigError("s3 object store needs a bucket: s3://<bucket>/<prefix>")
        if part_size < MIN_PART_SIZE:
            raise InvalidConfigError(f"part_size={part_size} is invalid: S3 parts must be at least {MIN_PART_SIZE}")
        if multipart_threshold < 1 or max_attempts < 1:
            raise InvalidConfigError("multipart_threshold and max_attempts must be >= 1")
        if not (connect_timeout_s > 0 and read_timeout_s > 0 and max_total_s > 0 and min_transfer_rate > 0):
            raise InvalidConfigError(f"connect_timeout_s={connect_timeout_s}, read_timeout_s={read_timeout_s}, "
                                     f"max_total_s={max_total_s} and min_transfer_rate={min_transfer_rate} must all be > 0")
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.endpoint_url = endpoint_url
        self.region = region or "us-east-1"
        self._credentials = (access_key_id, secret_access_key, session_token)
        self.multipart_threshold = multipart_threshold
        self.part_size = part_size
        self.max_attempts = max_attempts
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self._timeouts = (connect_timeout_s, read_timeout_s)
        self.max_total_s = max_total_s
        self.min_transfer_rate = float(min_transfer_rate)
        self.verify_etag = verify_etag
        self._addressing_style = addressing_style
        self._lock = ordered_lock("remote.store.client", RANK_STORE_CLIENT)
        self._client_obj: Any = None
        self._client_pid: int | None = None

    @classmethod
    def from_url(cls, url: str, **options: Any) -> S3ObjectStore:
        p = urlparse(url)
        if p.scheme != "s3" or not p.netloc:
            raise InvalidConfigError(f"object store URL {url!r} must look like s3://<bucket>/<prefix>")
        return cls(p.netloc, p.path.strip("/"), **options)

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"

    def __repr__(self) -> str:
        return f"S3ObjectStore({self.url!r}, endpoint_url={self.endpoint_url!r})"

    # ------------------------------------------------------------------ pickling / client

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_client_obj"] = None
        state["_client_pid"] = None
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = ordered_lock("remote.store.client", RANK_STORE_CLIENT)

    def _client(self) -> Any:
        pid = os.getpid()
        if self._client_obj is not None and self._client_pid == pid:
            return self._client_obj
        with self._lock:
            if self._client_obj is None or self._client_pid != pid:
                try:
                    import boto3
                    from botocore.config import Config
                except ImportError:
                    raise RemoteStorageNotInstalledError(
                        "the s3:// object store needs boto3: pip install 'tiercompact[s3]'") from None
                s3_cfg = {"addressing_style": self._addressing_style} if self._addressing_style else {}
                config = Config(
                    # _call is the only retry layer: botocore's would multiply its attempts
                    retries={"total_max_attempts": 1, "mode": "standard"},
                    connect_timeout=self._timeouts[0], read_timeout=self._timeouts[1], s3=s3_cfg or None,
                )
                ak, sk, tok = self._credentials
                session = boto3.session.Session()
                client = session.client(
                    "s3", endpoint_url=self.endpoint_url, region_name=self.region, config=config,
                    aws_access_key_id=ak, aws_secret_access_key=sk, aws_session_token=tok)
                _no_expect_continue(client)
                self._client_obj = client
                self._client_pid = pid
            return self._client_obj

    def close(self) -> None:
        with self._lock:
            client, self._client_obj = self._client_obj, None
        if client is not None:
            try:
                client.close()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass

    # ------------------------------------------------------------------ errors / retry

    def _full(self, key: str) -> str:
        validate_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def _translate(self, e: Exception, key: str | None, op: str) -> RemoteStorageError:
        import urllib3.exceptions
        from botocore import exceptions as bx

        where = f"s3 {op} of {key!r} in {self.url}" if key is not None else f"s3 {op} in {self.url}"
        if isinstance(e, RemoteStorageError):
            return e
        if isinstance(e, bx.HTTPClientError) and isinstance(e.kwargs.get("error"), RemoteStorageError):
            return e.kwargs["error"]  # type: ignore[no-any-return]  # a paced upload body gave up mid-send
        if isinstance(e, bx.ClientError):
            err = e.response.get("Error", {})
            code = str(err.get("Code", ""))
            status = int(e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
            msg = f"{where} failed: {code} {err.get('Message', '')}".rstrip()
            if code in _CHECKSUM_CODES:
                return RemoteStorageChecksumError(f"{msg}: the store received corrupt bytes and kept nothing",
                                                  key=key)
            if code in _NOT_FOUND_CODES:
                return ObjectNotFoundError(f"no object {key!r} in {self.url}", key=key)
            if code == "NoSuchBucket":
                return RemoteStorageIOError(f"{where} failed: bucket {self.bucket!r} does not exist", key=key)
            if code in _TRANSIENT_CODES or status >= 500 or status == 429:
                return RemoteStorageTransientError(msg, key=key)
            return RemoteStorageIOError(msg, key=key)
        if isinstance(e, bx.ReadTimeoutError | bx.ConnectTimeoutError):
            return RemoteStorageTimeoutError(f"{where} timed out: {e}", key=key)
        if isinstance(e, bx.EndpointConnectionError | bx.ConnectionClosedError | bx.ConnectionError
                      | bx.ResponseStreamingError | bx.IncompleteReadError):
            return RemoteStorageTransientError(f"{where} failed: {e}", key=key)
        if isinstance(e, bx.NoCredentialsError | bx.PartialCredentialsError):
            return RemoteStorageIOError(f"{where} failed: no AWS credentials (set AWS_ACCESS_KEY_ID/"
                                        f"AWS_SECRET_ACCESS_KEY or pass access_key_id/secret_access_key)", key=key)
        if isinstance(e, bx.BotoCoreError):
            return RemoteStorageIOError(f"{where} failed: {e}", key=key)
        if isinstance(e, OSError | urllib3.exceptions.HTTPError | http.client.HTTPException):
            # urllib3's ProtocolError ("Connection broken: ConnectionResetError") can escape
            # botocore while a body is read; it is a broken connection like any other
            return RemoteStorageTransientError(f"{where} failed: {e}", key=key)
        raise e

    def _call(self, op: str, key: str | None, fn: Callable[[], T]) -> T:
        """Run ``fn`` with translation and our own backoff for transient failures, at most
        ``max_attempts`` times and never starting a retry past ``max_total_s``."""
        delay = self.backoff_s
        deadline = time.monotonic() + self.max_total_s
        for attempt in range(1, self.max_attempts + 1):
            try:
                return fn()
            except Exception as e:  # noqa: BLE001 - translated just below
                err = self._translate(e, key, op)
                out_of_time = time.monotonic() + delay >= deadline
                if not isinstance(err, RemoteStorageTransientError) or attempt == self.max_attempts or out_of_time:
                    if err is e:
                        raise
                    raise err from None
            time.sleep(delay)
            delay = min(self.max_backoff_s, delay * 2)
        raise AssertionError("unreachable")  # pragma: no cover

    # ------------------------------------------------------------------ writes

    def put(self, key: str, data: PutData) -> int:
        full = self._full(key)
        stream, owned, expected = open_upload(key, data)
        try:
            head = stream.read(self.multipart_threshold + 1)
            if len(head) <= self.multipart_threshold:
                self._check_source(key, crc32c(head), expected)
                resp = self._call("put", key, lambda: self._client().put_object(
                    Bucket=self.bucket, Key=full, Body=self._paced_upload(key, head), ContentMD5=_b64_md5(head),
                    ChecksumCRC32C=_b64_crc(head)))
                sent = len(head)
            else:
                resp = None
                sent = self._multipart(key, full, head, stream, expected)
        except OSError as e:
            raise RemoteStorageIOError(f"reading the upload source for {key!r} failed: {e}", key=key) from None
        finally:
            if owned:
                stream.close()
        self._verify(key, full, sent)
        if resp is not None:  # a multipart upload checked each part's answer as it went
            self._check_put_answer(key, head, resp)
        return sent

    @staticmethod
    def _check_source(key: str, actual: int, expected: int | None) -> None:
        if expected is not None and actual != expected:
            raise RemoteStorageChecksumError(
                f"upload of {key!r}: the bytes read have CRC-32C {actual:08x}, the source's is {expected:08x} "
                f"(corrupted before reaching the store); nothing was written", key=key)

    def _check_answer(self, key: str, what: str, body: bytes, resp: dict[str, Any]) -> None:
        """The store's answer must describe the bytes we sent (see the module docstring)."""
        etag = str(resp.get("ETag", "")).strip('"')
        md5 = hashlib.md5(body, usedforsecurity=False).hexdigest()
        crc = resp.get("ChecksumCRC32C")
        if (self.verify_etag and len(etag) == 32 and etag != md5) or (crc is not None and crc != _b64_crc(body)):
            raise RemoteStorageChecksumError(
                f"{what} of {key!r} to {self.url}: the store received different bytes than were sent "
                f"(ETag {etag}, MD5 of the {len(body)} bytes sent {md5}; CRC-32C {crc})", key=key)

    def _check_put_answer(self, key: str, body: bytes, resp: dict[str, Any]) -> None:
        try:
            self._check_answer(key, "upload", body, resp)
        except RemoteStorageChecksumError:
            self.delete(key)
            raise

    def _multipart(self, key: str, full: str, head: bytes, stream: BinaryIO, expected: int | None) -> int:
        client = self._client()
        upload_id = self._call("create multipart upload", key, lambda: client.create_multipart_upload(
            Bucket=self.bucket, Key=full, ChecksumAlgorithm="CRC32C"))["UploadId"]
        try:
            parts: list[dict[str, Any]] = []
            buf = io.BytesIO(head)
            pending = buf.read(self.part_size)
            rest_of_head = buf.read()
            sent = 0
            number = 1
            crc = 0
            while pending:
                # refill from the remainder of head, then the stream
                nxt = rest_of_head[: self.part_size]
                rest_of_head = rest_of_head[self.part_size:]
                if len(nxt) < self.part_size:
                    nxt += stream.read(self.part_size - len(nxt))
                resp = self._call(f"upload part {number}", key, _bind_part(
                    self, client, key, full, upload_id, number, pending))
                parts.append({"PartNumber": number, "ETag": resp["ETag"], "ChecksumCRC32C": _b64_crc(pending)})
                crc = crc32c(pending, crc)
                sent += len(pending)
                number += 1
                pending = nxt
            self._check_source(key, crc, expected)
            self._call("complete multipart upload", key, lambda: client.complete_multipart_upload(
                Bucket=self.bucket, Key=full, UploadId=upload_id, MultipartUpload={"Parts": parts}))
            return sent
        except BaseException:
            try:
                self._call("abort multipart upload", key, lambda: client.abort_multipart_upload(
                    Bucket=self.bucket, Key=full, UploadId=upload_id))
            except RemoteStorageError:
                pass  # the bucket's lifecycle rule for incomplete uploads is the last resort
            raise

    def _verify(self, key: str, full: str, sent: int) -> None:
        actual = self._head_size(key, full)
        if actual != sent:
            try:
                self.delete(key)
            finally:
                raise RemoteStorageIOError(
                    f"upload of {key!r} to {self.url} was truncated: sent {sent} bytes, stored {actual}; "
                    f"the object was removed", key=key)

    def delete(self, key: str) -> None:
        full = self._full(key)
        self._call("delete", key, lambda: self._client().delete_object(Bucket=self.bucket, Key=full))

    # ------------------------------------------------------------------ reads

    def _head_size(self, key: str, full: str) -> int:
        def head() -> int:
            resp = self._client().head_object(Bucket=self.bucket, Key=full)
            length = resp.get("ContentLength")
            if length is None:
                # botocore leaves the field out of a HEAD whose header block was cut off: a
                # transient fault like a short read, never a builtin KeyError out of the adapter
                raise _ShortRead(f"s3 head of {key!r} in {self.url} answered without a Content-Length", key=key)
            return int(length)

        return self._call("head", key, head)

    def size(self, key: str) -> int:
        return self._head_size(key, self._full(key))

    def exists(self, key: str) -> bool:
        try:
            self.size(key)
            return True
        except ObjectNotFoundError:
            return False

    def _deadline(self, size: int) -> float:
        return time.monotonic() + self._timeouts[1] + size / self.min_transfer_rate

    def _too_slow(self, what: str, key: str, size: int) -> str:
        return f"s3 {what} of {key!r} in {self.url}: {size} bytes slower than {self.min_transfer_rate:.0f} B/s"

    def _paced(self, key: str, resp: dict[str, Any]) -> _PacedBody:
        """``resp``'s body, read at ``min_transfer_rate`` at least (else RemoteStorageTimeoutError)."""
        size = int(resp.get("ContentLength") or 0)
        return _PacedBody(resp["Body"], key, self._deadline(size), self._too_slow("read", key, size))

    def _paced_upload(self, key: str, body: bytes) -> _PacedUpload:
        """``body`` to send, at ``min_transfer_rate`` at least: one per attempt (its clock starts now)."""
        return _PacedUpload(body, key, self._deadline(len(body)), self._too_slow("upload", key, len(body)))

    def _read_body(self, key: str, resp: dict[str, Any]) -> bytes:
        body = self._paced(key, resp)
        try:
            data = body.read()
        finally:
            body.close()
        expected = int(resp.get("ContentLength", len(data)))
        if len(data) != expected:
            raise _ShortRead(f"s3 get of {key!r} returned {len(data)} of {expected} bytes", key=key)
        return bytes(data)

    def get(self, key: str) -> bytes:
        full = self._full(key)
        return self._call("get", key, lambda: self._read_body(
            key, self._client().get_object(Bucket=self.bucket, Key=full)))

    def _ranged(self, key: str, full: str, start: int, end: int | None) -> dict[str, Any] | None:
        """get_object for [start, end); None when the range starts at/after the object's end."""
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Key": full}
        if start > 0 or end is not None:
            kwargs["Range"] = f"bytes={start}-" + ("" if end is None else str(end - 1))
        try:
            return self._client().get_object(**kwargs)  # type: ignore[no-any-return]
        except Exception as e:
            from botocore.exceptions import ClientError

            if isinstance(e, ClientError) and e.response.get("Error", {}).get("Code") == "InvalidRange":
                return None
            raise

    def get_range(self, key: str, start: int, end_exclusive: int) -> bytes:
        self._check_range(start, end_exclusive)
        full = self._full(key)
        if end_exclusive == start:
            self.size(key)  # still report a missing object
            return b""

        def read() -> bytes:
            resp = self._ranged(key, full, start, end_exclusive)
            return b"" if resp is None else self._read_body(key, resp)

        return self._call("ranged get", key, read)

    def get_to_file(self, key: str, path: str | os.PathLike[str], start: int = 0, end: int | None = None) -> int:
        self._check_range(start, end)
        full = self._full(key)
        dst = Path(path)

        def download() -> int:
            if end == start:
                self.size(key)
                return atomic_write_from(dst, io.BytesIO(b""))
            resp = self._ranged(key, full, start, end)
            if resp is None:
                return atomic_write_from(dst, io.BytesIO(b""))
            body = self._paced(key, resp)
            try:
                n = atomic_write_from(dst, body)  # type: ignore[arg-type]  # read() is all it uses
            finally:
                body.close()
            if n != int(resp.get("ContentLength", n)):
                dst.unlink(missing_ok=True)
                raise _ShortRead(f"s3 download of {key!r} got {n} of {resp['ContentLength']} bytes", key=key)
            return n

        return self._call("download", key, download)

    def list(self, prefix: str = "") -> Iterator[str]:
        base = f"{self.prefix}/" if self.prefix else ""
        client = self._client()

        def pages() -> list[str]:
            out: list[str] = []
            for page in client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=base + prefix):
                out.extend(o["Key"][len(base):] for o in page.get("Contents", []))
            return out

        return iter(sorted(self._call("list", prefix, pages)))


def _no_expect_continue(client: Any) -> None:
    """Send PUT bodies without ``Expect: 100-continue`` (botocore adds it to every S3 PUT and POST with a body).

    botocore's wait for the interim answer reads header lines until an empty one, and a connection that ends
    right after the ``100 Continue`` status line makes each read return nothing: the thread spins there for
    ever, deaf to every timeout (found by the soak: an upload of the tiered cleaner spun for minutes, and the
    requests waiting on its round hung). Without the header the body follows the request headers at once, paced
    by :class:`_PacedUpload`, and the answer is read by http.client, which takes an early end as a broken
    connection (retried). Our bodies are at most a part (``part_size``): sending one the store refuses costs
    little."""
    from botocore.handlers import add_expect_header

    client.meta.events.unregister("before-call.s3", add_expect_header)


class _PacedBody:
    """A response body whose reads fail with RemoteStorageTimeoutError once ``deadline`` (monotonic)
    has passed: each socket read is bounded by botocore's read timeout, the whole transfer by this.

    Reads go through urllib3's ``read1`` (one socket read at most, whatever it brought), so the
    deadline is looked at between the store's own pieces: botocore's ``read(n)`` gathers ``n``
    bytes before it returns, which on a trickling store may take any time. So ``read(n)`` may
    return fewer than ``n`` bytes before the end, as a raw stream's does. Errors are left to
    :meth:`S3ObjectStore._translate` (urllib3's are transient there)."""

    _CHUNK = 1 << 20

    def __init__(self, body: Any, key: str, deadline: float, what: str) -> None:
        self._body = body
        self._read1 = getattr(getattr(body, "_raw_stream", None), "read1", None)  # urllib3 >= 2
        self._key = key
        self._deadline = deadline
        self._what = what

    def read(self, n: int | None = -1) -> bytes:
        if n is not None and n >= 0:
            return self._piece(n)
        chunks = []
        while chunk := self._piece(self._CHUNK):
            chunks.append(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def _piece(self, n: int) -> bytes:
        return self._checked(self._read1(n) if self._read1 is not None else self._body.read(min(n, 1 << 16)))

    def _checked(self, data: bytes) -> bytes:
        if data and time.monotonic() > self._deadline:
            raise RemoteStorageTimeoutError(f"{self._what}: gave up", key=self._key)
        return data

    def close(self) -> None:
        self._body.close()


class _PacedUpload(io.BytesIO):
    """An upload body that fails with RemoteStorageTimeoutError once ``deadline`` (monotonic) has
    passed: urllib3 reads and sends it a block at a time, so a store that takes it in slowly
    stops the attempt between two blocks (botocore also reads it once to sign it, at once)."""

    def __init__(self, body: bytes, key: str, deadline: float, what: str) -> None:
        super().__init__(body)
        self._size = len(body)
        self._key = key
        self._deadline = deadline
        self._what = what

    def read(self, n: int | None = -1) -> bytes:
        if time.monotonic() > self._deadline and self.tell() < self._size:
            raise RemoteStorageTimeoutError(f"{self._what}: gave up", key=self._key)
        return super().read(n)


def _b64_md5(body: bytes) -> str:
    return base64.b64encode(hashlib.md5(body, usedforsecurity=False).digest()).decode()


def _b64_crc(body: bytes) -> str:
    return base64.b64encode(crc32c(body).to_bytes(4, "big")).decode()


def _bind_part(store: S3ObjectStore, client: Any, key: str, full: str, upload_id: str, number: int,
               body: bytes) -> Callable[[], Any]:
    def upload() -> Any:
        resp = client.upload_part(Bucket=store.bucket, Key=full, UploadId=upload_id, PartNumber=number,
                                  Body=store._paced_upload(key, body), ContentMD5=_b64_md5(body),
                                  ChecksumCRC32C=_b64_crc(body))
        store._check_answer(key, f"upload of part {number}", body, resp)  # a retry re-sends the part
        return resp

    return upload
