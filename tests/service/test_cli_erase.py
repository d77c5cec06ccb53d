"""``tiercompact erase TOPIC KEY... [--wait]``: on a data dir (a local, non-tiered
partition: the local cleaner's round and the replaced ``.deleted`` files) and through a
running service with ``--server URL --token T``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from log.local_log import RecordSpec
from service.cli import main
from service.config import load_config
from service.node import Node
from tests.e2e.test_erasure_e2e import Server, dir_blobs, find_values

SECRET = [b"SECRET-old-1-" + b"x" * 40, b"SECRET-old-2-" + b"y" * 40]


def test_erase_on_a_data_dir_waits_for_the_receipt(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    with Node(load_config({"data_dir": data}, env={})) as node:
        node.create_topic("people", 1, {"cleanup.policy": "compact", "file.delete.delay.ms": 3_600_000})
        node.produce("people", 0, [RecordSpec(b"alice", SECRET[0]), RecordSpec(b"bob", b"bob-1")])
        node.roll("people", 0)
        node.produce("people", 0, [RecordSpec(b"alice", SECRET[1]), RecordSpec(b"carol", b"carol-1")])
    assert all(find_values(dir_blobs(data), SECRET).values())
    assert main(["erase", "people", "alice", "--wait", "--data-dir", str(data)]) == 0
    receipt = json.loads(capsys.readouterr().out)
    assert receipt["state"] == "values_removed"
    (key,) = receipt["keys"]
    assert {s["base_offset"] for s in key["segments"]} == {0, 2}
    assert all(s["tier"] == "local" for s in key["segments"])
    # the replaced segments went at once, not after file.delete.delay.ms (an hour here)
    assert key["deleted"] and all("file" in d and not Path(d["file"]).exists() for d in key["deleted"])
    assert not any(find_values(dir_blobs(data), SECRET).values())
    with Node(load_config({"data_dir": data}, env={})) as node:
        latest = {r.key: r.value for r in node.read("people", 0, 0).records}
    assert latest == {b"bob": b"bob-1", b"carol": b"carol-1", b"alice": None}


def test_erase_through_a_running_service(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    token = "erase-token-123"
    srv = Server(tmp_path, (tmp_path / "objects").as_uri(), extra_args=("--token", token))
    srv.client.headers["Authorization"] = f"Bearer {token}"
    srv.start()
    try:
        srv.ok("POST", "/v1/topics", json={"name": "people", "partitions": 2, "config": {
            "cleanup.policy": "compact", "remote.storage.enable": True}})
        for p in (0, 1):
            srv.ok("POST", f"/v1/topics/people/partitions/{p}/records",
                   json={"records": [{"key": "alice", "value": SECRET[p].decode()}]})
        srv.ok("POST", "/v1/topics/people/partitions/1/tier")
        code = main(["erase", "people", "alice", "--wait", "--server", srv.client.base_url.__str__(),
                     "--token", token])
        receipt = json.loads(capsys.readouterr().out)
        assert code == 0, receipt
        assert receipt["state"] == "values_removed"
        assert sorted(k["partition"] for k in receipt["keys"]) == [0, 1]
        assert not any(find_values(dir_blobs(srv.data_dir, tmp_path / "objects"), SECRET).values())
        assert main(["erase", "people", "alice", "--server", str(srv.client.base_url)]) == 1  # no token: 401
        assert "401" in capsys.readouterr().err
    finally:
        srv.stop()
