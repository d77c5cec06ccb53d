"""Settings that used to be accepted silently and are now refused with a clear message:
authentication that would fail open (the node must not start), and turning
remote.storage.enable off on a tiered topic (Kafka refuses it too)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.config import ServiceConfigError, load_config

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("flags", "env", "needles"), [
    ({"token": "   "}, {}, ["token", "flag --token", "blank"]),
    ({"token": ""}, {}, ["token", "blank"]),
    ({}, {"TIERCOMPACT_TOKEN": " "}, ["token", "environment variable TIERCOMPACT_TOKEN", "blank"]),
    ({"token": " padded-token-1 "}, {}, ["token", "whitespace"]),
    ({"auth_reads": True}, {}, ["auth_reads", "no token", "flag --auth-reads", "--token"]),
    ({}, {"TIERCOMPACT_AUTH_READS": "true"}, ["auth_reads", "no token", "TIERCOMPACT_AUTH_READS"]),
    ({"auth_reads": True, "token": "  "}, {}, ["blank"]),
])
def test_authentication_that_would_fail_open_is_refused(tmp_path: Path, flags: dict, env: dict,
                                                        needles: list[str]) -> None:
    with pytest.raises(ServiceConfigError) as ei:
        load_config({"data_dir": tmp_path, **flags}, env=env)
    for n in needles:
        assert n in str(ei.value), str(ei.value)


def test_auth_reads_without_token_in_a_config_file_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "tc.toml"
    f.write_text("auth_reads = true\n")
    with pytest.raises(ServiceConfigError, match=r"auth_reads .*no token.*config file .*tc.toml"):
        load_config({"data_dir": tmp_path}, env={}, config_file=f)


def test_a_rejected_token_is_never_printed(tmp_path: Path) -> None:
    with pytest.raises(ServiceConfigError) as ei:
        load_config({"data_dir": tmp_path, "token": "sh0rt"}, env={})
    assert "sh0rt" not in str(ei.value) and "at least 8 characters" in str(ei.value)


def test_valid_authentication_settings_still_load(tmp_path: Path) -> None:
    cfg = load_config({"data_dir": tmp_path, "token": "abcdefgh1", "auth_reads": True}, env={})
    assert (cfg.token, cfg.auth_reads) == ("abcdefgh1", True)
    assert load_config({"data_dir": tmp_path}, env={}).token is None  # no token at all: an open node, on purpose


@pytest.mark.parametrize(("args", "env", "needle"), [
    (["--token", "  "], {}, "blank"),
    ([], {"TIERCOMPACT_TOKEN": " "}, "TIERCOMPACT_TOKEN"),
    (["--auth-reads"], {}, "no token"),
])
def test_serve_refuses_to_start_fully_open(tmp_path: Path, args: list[str], env: dict, needle: str) -> None:
    """The real ``tiercompact serve`` process exits with status 2 and says why, before it
    opens a port or a data dir."""
    clean_env = {k: v for k, v in os.environ.items() if not k.startswith("TIERCOMPACT_")}
    proc = subprocess.run([sys.executable, "-c", "import sys; from service.cli import main; sys.exit(main())",
                           "serve", "--data-dir", str(tmp_path / "data"), "--port", "0", *args],
                          env={**clean_env, **env, "PYTHONPATH": str(REPO)}, cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert needle in proc.stderr, proc.stderr
    assert not (tmp_path / "data").exists()


@pytest.fixture
def tiered(client: TestClient) -> TestClient:
    r = client.post("/v1/topics", json={"name": "t", "config": {"cleanup.policy": "compact",
                                                                  "remote.storage.enable": True}})
    assert r.status_code == 201, r.text
    return client


@pytest.mark.parametrize("value", [False, "false", None])
def test_turning_remote_storage_off_on_a_tiered_topic_is_refused(tiered: TestClient, value: object) -> None:
    p0 = "/v1/topics/t/partitions/0"
    assert tiered.post(f"{p0}/records", json={"records": [{"key": "a", "value": "1"}]}).status_code == 200
    assert tiered.post(f"{p0}/roll").status_code == 200
    assert tiered.post(f"{p0}/tier").json()["copied"] == [0]
    r = tiered.patch("/v1/topics/t/config", json={"config": {"remote.storage.enable": value}})
    assert r.status_code == 400, r.text
    assert "remote.storage.enable cannot be turned off" in r.json()["error"]
    assert "delete the topic" in r.json()["error"]
    assert tiered.get("/v1/topics/t").json()["config"]["remote.storage.enable"] is True
    assert [x["value"] for x in tiered.get(f"{p0}/records?offset=0").json()["records"]] == ["1"]


def test_other_remote_storage_changes_are_still_allowed(tiered: TestClient) -> None:
    r = tiered.patch("/v1/topics/t/config", json={"config": {"remote.storage.enable": True,
                                                              "local.retention.ms": 1000}})
    assert r.status_code == 200, r.text
    assert tiered.post("/v1/topics", json={"name": "u"}).status_code == 201
    r = tiered.patch("/v1/topics/u/config", json={"config": {"remote.storage.enable": True}})
    assert r.status_code == 200, r.text  # turning it on is fine, as in Kafka


@pytest.mark.parametrize(("config", "needle"), [
    ({"segment.bytes": 2**31}, "segment.bytes=2147483648 is invalid: out of range for Kafka's int32"),
    ({"segment.index.bytes": 2**62}, "segment.index.bytes=4611686018427387904 is invalid: out of range"),
    ({"max.message.bytes": "99999999999"}, "max.message.bytes=99999999999 is invalid: out of range"),
    ({"retention.ms": 2**63}, "retention.ms=9223372036854775808 is invalid: out of range for Kafka's int64"),
    ({"segment.ms": 10**400}, "segment.ms=<1329-bit int> is invalid"),
    ({"min.cleanable.dirty.ratio": 10**400}, "min.cleanable.dirty.ratio=<1329-bit int> is invalid: expected float"),
])
def test_topic_config_values_past_their_kafka_type_are_400(client: TestClient, config: dict, needle: str) -> None:
    """segment.bytes=2^70 was accepted, and an int too large for a float was an OverflowError 500."""
    r = client.post("/v1/topics", json={"name": "c", "config": config})
    assert r.status_code == 400, r.text
    assert needle in r.json()["error"]
    assert client.post("/v1/topics", json={"name": "c"}).status_code == 201
    r = client.patch("/v1/topics/c/config", json={"config": config})
    assert r.status_code == 400, r.text
    assert needle in r.json()["error"]
    assert client.get("/v1/topics/c").json()["config"] == {}


def test_topic_config_values_at_their_kafka_limits_are_accepted(client: TestClient) -> None:
    config = {"segment.bytes": 2**31 - 1, "retention.ms": 2**63 - 1, "max.compaction.lag.ms": 2**63 - 1}
    r = client.post("/v1/topics", json={"name": "c", "config": config})
    assert r.status_code == 201, r.text
    assert r.json()["config"] == config
