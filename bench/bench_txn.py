"""Transactions per second and commit latency of a confluent-kafka transactional producer -> bench/results/txn.json.

A real ``tiercompact serve`` (fresh data dir, free ports) and one transactional producer in its own
process (tests/kafka/clients/txn_client.py ``bench``): transactions of 100 records (100-byte
values) over 1 and 4 partitions, each committed before the next begins; the figure is
transactions per second over the run and the p50/p99 of ``commit_transaction`` (EndTxn, the
PrepareCommit write, and the producer's wait for it).
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path
from typing import Any

from bench.common import quick, write_result
from tests.kafka.conftest import CLIENTS, CLIENTS_DIR, KafkaServe, run_client

CLIENTS.setdefault("txn", CLIENTS_DIR / "txn_client.py")


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main() -> None:
    count = 20 if quick() else 200
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-txn-") as tmp:
        server = KafkaServe(Path(tmp) / "data", ["--cleaner-threads", "1"], output=Path(tmp) / "serve.log")
        server.start()
        try:
            for parts in (1, 4):
                topic = f"bench-txn-{parts}"
                server.create_topic(topic, parts, {"cleanup.policy": "delete"})
                out = run_client("txn", {"action": "bench", "bootstrap": server.bootstrap, "topic": topic,
                                         "transactional_id": f"bench-{parts}", "count": count, "records": 100,
                                         "partitions": parts}, timeout=600)
                commits = out["commit_s"]
                runs.append({"partitions": parts, "transactions": count, "records_per_txn": 100,
                             "txn_per_s": round(count / out["seconds"], 1),
                             "records_per_s": round(count * 100 / out["seconds"]),
                             "commit_p50_ms": round(statistics.median(commits) * 1000, 1),
                             "commit_p99_ms": round(_pct(commits, 0.99) * 1000, 1)})
                print(runs[-1], flush=True)
        finally:
            server.stop()
    write_result("txn", {"runs": runs})


if __name__ == "__main__":
    main()
