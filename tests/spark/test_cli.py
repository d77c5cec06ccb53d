"""`tiercompact spark-clean` standalone, against the stores of a (stopped) node's data dir."""

from __future__ import annotations

import json

import pytest

from log.local_log import RecordSpec
from service.cli import main
from service.config import load_config
from service.node import Node

pytestmark = pytest.mark.spark


def test_spark_clean_cli_cleans_every_partition_and_writes_the_checkpoint(spark, tmp_path, capsys):
    data = tmp_path / "data"
    cfg = load_config({"data_dir": str(data), "cleaner_threads": 0})
    with Node(cfg) as node:
        node.create_topic("orders", 2, {"cleanup.policy": "compact", "remote.storage.enable": True,
                                        "segment.bytes": 1024})
        for p in range(2):
            for r in range(3):
                node.produce("orders", p, [RecordSpec(f"k{i % 5}".encode(), f"v{r}-{i}".encode()) for i in range(8)])
                node.roll("orders", p)
            node.tier("orders", p)
    rc = main(["spark-clean", "orders", "--data-dir", str(data), "--master", "local[2,2]"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert [(o["partition"], o["status"]) for o in out] == [(0, "cleaned"), (1, "cleaned")]
    assert all(o["end_offset"] == 24 and o["records_retained"] < o["records_read"] for o in out)
    with Node(cfg) as node:
        # a standalone job never opens the data dir: the node takes the checkpoint from the
        # metadata store's cleaner-offset vector
        for tp in node.log_manager.all_logs():
            assert node.metadata.resolve_cleaner_checkpoint(tp) == 24
        assert node.clean("orders", 0)["checkpoint"] == 24
    assert main(["spark-clean", "nope", "--data-dir", str(data)]) == 2
    assert "holds no config" in capsys.readouterr().err
