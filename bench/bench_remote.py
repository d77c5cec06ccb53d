"""Remote tier bench: object-store throughput and metadata-manager operation rates.

* upload / ranged-read throughput (MB/s) of 64 MiB in 8 MiB objects through moto's S3
  server over real HTTP (single PUTs below the 8 MiB multipart threshold, and one
  multipart pass with 5 MiB parts), compared with ``file://``; ranged reads are 1 MiB
  ranges at random offsets (what a chunked download of a remote segment does);
* SqlRemoteLogMetadataManager on a SQLite file: add+finish a segment, publish_compaction
  (1 new segment replacing 2), list_remote_log_segments over the resulting partition.

Numbers through moto measure the client path (boto3, HTTP, verification HEAD), not S3.
Writes bench/results/remote.json.
"""

from __future__ import annotations

import os
import random
import tempfile
import uuid
from pathlib import Path
from typing import Any

from bench.common import Timer, quick, write_result
from log.types import TopicPartition
from metadata.sql import SqlRemoteLogMetadataManager
from metadata.types import RemoteLogSegmentId, RemoteLogSegmentMetadata, RemoteLogSegmentState
from remote.file_store import FileObjectStore
from remote.object_store import ObjectStore
from remote.s3_store import MiB, S3ObjectStore

CREDS = {"access_key_id": "bench", "secret_access_key": "bench", "region": "us-east-1"}


def _store_bench(store: ObjectStore, total: int, obj_size: int, workdir: Path) -> dict[str, Any]:
    src = workdir / "obj.bin"
    src.write_bytes(os.urandom(obj_size))
    n = total // obj_size
    keys = [f"bench-0/{i:020d}-{uuid.uuid4().hex}.log" for i in range(n)]
    with Timer() as up:
        for k in keys:
            store.put_file(k, src)
    rng = random.Random(7)
    reads = total // MiB
    with Timer() as rd:
        for _ in range(reads):
            k = rng.choice(keys)
            start = rng.randrange(0, obj_size - MiB)
            assert len(store.get_range(k, start, start + MiB)) == MiB
    with Timer() as dl:
        for k in keys:
            store.get_to_file(k, workdir / "dl.bin")
    for k in keys:
        store.delete(k)
    mb = total / MiB
    return {"objects": n, "object_mib": obj_size // MiB, "upload_mb_s": round(mb / up.seconds, 1),
            "ranged_read_1mib_mb_s": round(reads / rd.seconds, 1),
            "full_download_mb_s": round(mb / dl.seconds, 1)}


def _metadata_bench(path: Path, n: int) -> dict[str, Any]:
    m = SqlRemoteLogMetadataManager(f"sqlite:///{path}")
    tp = TopicPartition("bench", 0)
    m.become_leader(tp, 0, 1)
    S = RemoteLogSegmentState

    def seg(start: int) -> RemoteLogSegmentMetadata:
        return RemoteLogSegmentMetadata(RemoteLogSegmentId.generate(tp), start, start + 99, start, 1, 0,
                                        1 << 20, {0: 0 if start == 0 else start})

    segs = []
    with Timer() as add:
        for i in range(n):
            md = seg(i * 100)
            m.add_remote_log_segment_metadata(md, leader_epoch=0)
            m.update_remote_log_segment_state(md.remote_log_segment_id, S.COPY_SEGMENT_FINISHED, leader_epoch=0,
                                              event_timestamp_ms=1, broker_id=1)
            segs.append(md)
    pubs = n // 2
    with Timer() as pub:
        for i in range(pubs):
            a, b = segs[2 * i], segs[2 * i + 1]
            new = RemoteLogSegmentMetadata(RemoteLogSegmentId.generate(tp), a.start_offset, b.end_offset, 0, 1, 0,
                                           1 << 19, {0: a.start_offset})
            m.add_remote_log_segment_metadata(new, leader_epoch=0)
            m.publish_compaction(tp, leader_epoch=0, new_segment_ids=[new.remote_log_segment_id],
                                 replaced_segment_ids=[a.remote_log_segment_id, b.remote_log_segment_id],
                                 cleaner_offsets={0: b.end_offset + 1})
    lists = 200
    with Timer() as ls:
        for _ in range(lists):
            visible = m.list_remote_log_segments(tp)
    with Timer() as size:
        for _ in range(10_000):
            m.remote_log_size(tp)
    m.close()
    return {"segments": n, "add_and_finish_per_s": round(n / add.seconds, 1),
            "publish_compaction_per_s": round(pubs / pub.seconds, 1),
            "list_per_s": round(lists / ls.seconds, 1), "list_returned_segments": len(visible),
            "remote_log_size_cached_per_s": round(10_000 / size.seconds)}


def main() -> None:
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one access-log line per request otherwise
    total = (16 if quick() else 64) * MiB
    obj = 8 * MiB
    out: dict[str, Any] = {"total_mib": total // MiB}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        out["file"] = _store_bench(FileObjectStore(work / "objects"), total, obj, work)
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        try:
            host, port = server.get_host_and_port()
            url = f"http://{host}:{port}"
            import boto3

            boto3.client("s3", endpoint_url=url, region_name="us-east-1", aws_access_key_id="bench",
                         aws_secret_access_key="bench").create_bucket(Bucket="bench")
            s3 = S3ObjectStore("bench", "b", endpoint_url=url, **CREDS)
            out["s3_moto_http"] = _store_bench(s3, total, obj, work)
            s3_mp = S3ObjectStore("bench", "mp", endpoint_url=url, multipart_threshold=5 * MiB,
                                  part_size=5 * MiB, **CREDS)
            out["s3_moto_http_multipart_5mib_parts"] = _store_bench(s3_mp, total, obj, work)
        finally:
            server.stop()
        out["metadata_sqlite_file"] = _metadata_bench(work / "md.db", 200 if quick() else 1000)
    write_result("remote", out)


if __name__ == "__main__":
    main()
