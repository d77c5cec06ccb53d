"""tiercompact demo and clean, run in-process on small inputs."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from service.cli import main
from service.demo import run_demo


def test_demo_compacts_and_every_key_reads_back(tmp_path: Path) -> None:
    out = io.StringIO()
    report = run_demo(1500, 60, tmp_path / "demo", out=out, seed=1)
    assert report["ok"] and report["keys_wrong"] == 0 and report["compacted"]
    assert report["records_after"] <= 60
    assert report["before"]["local_records"] + report["before"]["remote_records"] == 1500
    assert report["segments_tiered"] > 0 and report["before"]["remote_bytes"] > 0
    text = out.getvalue()
    assert "every key's latest value reads back" in text and text.rstrip().endswith("OK")
    assert "[##############################] 100%" in text


def test_demo_rejects_bad_sizes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--records", "0"]) == 2


def test_clean_command_prints_stats(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from log.local_log import RecordSpec
    from service.config import load_config
    from service.node import Node

    data = tmp_path / "d"
    with Node(load_config({"data_dir": data}, env={})) as node:
        node.create_topic("t", 1, {"cleanup.policy": "compact"})
        node.produce("t", 0, [RecordSpec(b"k", str(i).encode()) for i in range(10)])
        node.roll("t", 0)
    assert main(["clean", "t", "0", "--data-dir", str(data)]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["records_read"] == 10 and stats["records_retained"] == 1 and stats["checkpoint"] == 10
    assert main(["clean", "nope", "0", "--data-dir", str(data)]) == 1
    assert "topic 'nope' does not exist" in capsys.readouterr().err
