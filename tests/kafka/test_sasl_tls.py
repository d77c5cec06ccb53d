"""SASL and TLS on the Kafka listener of a real ``tiercompact serve``, with real clients in their own processes:
SCRAM-SHA-256/512 with the users file or the HTTP token work; a wrong password, no SASL, and PLAIN without TLS are
refused (connection closed, nothing served); over TLS, PLAIN works and a client without SASL is still refused."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
from kafka.protocol.sasl import SaslHandshakeRequest, SaslHandshakeResponse

from tests.kafka.conftest import KafkaServe, run_client, run_clients
from tests.kafka.wire import read_frame

TOKEN = "kafka-sasl-test-token"
USERS = {"alice": "alice-secret", "bob": "bob-secret"}
#: client settings that make a refused client give up within seconds
FAST_FAIL: dict[str, dict[str, Any]] = {"confluent": {}, "kafka-python": {"max_block_ms": 3000,
                                                                           "bootstrap_timeout_ms": 3000}}


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("tls")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
                    "-keyout", str(d / "key.pem"), "-out", str(d / "cert.pem")], check=True, capture_output=True)
    return {"cert": str(d / "cert.pem"), "key": str(d / "key.pem")}


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, tls_files: dict[str, str]) -> Iterator[tuple[KafkaServe, ...]]:
    """Two nodes with credentials: one plaintext (SASL_PLAINTEXT), one TLS (SASL_SSL); started together."""
    root = tmp_path_factory.mktemp("sasl")
    users = root / "users.txt"
    users.write_text("# test users\n" + "".join(f"{u}:{p}\n" for u, p in USERS.items()))
    plain = KafkaServe(root / "plain", ["--sasl-users", str(users), "--token", TOKEN], output=root / "plain.log")
    tls = KafkaServe(root / "tls", ["--sasl-users", str(users), "--kafka-tls-cert", tls_files["cert"],
                                    "--kafka-tls-key", tls_files["key"]], output=root / "tls.log")
    plain.spawn()
    tls.spawn()
    try:
        yield plain.wait_ready(), tls.wait_ready()
    finally:
        plain.terminate()  # both stop at once
        tls.stop()
        plain.stop()


def _spec(server: KafkaServe, **kw: Any) -> dict[str, Any]:
    return {"bootstrap": server.bootstrap, "timeout_s": 20, **kw}


def test_scram_users_and_token_work_for_every_client(secured: tuple[KafkaServe, ...]) -> None:
    plain, _tls = secured
    plain.create_topic("secure", 1, token=TOKEN)
    creds = {"confluent": {"mechanism": "SCRAM-SHA-256", "username": "alice", "password": USERS["alice"]},
             "kafka-python": {"mechanism": "SCRAM-SHA-512", "username": "bob", "password": USERS["bob"]},
             "aiokafka": {"mechanism": "SCRAM-SHA-256", "username": "svc", "password": TOKEN}}
    produced = run_clients([(c, _spec(plain, action="produce", topic="secure", sasl=s, idempotent=True,
                                      records=[{"key": c, "value": "v"}])) for c, s in creds.items()])
    assert all(isinstance(o, list) for a in produced for o in a["offsets"]), produced
    read = run_client("kafka-python", _spec(plain, action="consume", topic="secure", sasl=creds["kafka-python"]))
    assert sorted(r["key"] for r in read["records"]) == sorted(creds)


def test_wrong_password_no_sasl_and_plain_without_tls_are_refused(secured: tuple[KafkaServe, ...]) -> None:
    plain, _tls = secured
    cases = [{"mechanism": "SCRAM-SHA-256", "username": "alice", "password": "wrong"},
             {"mechanism": "SCRAM-SHA-512", "username": "nobody", "password": "wrong"},
             {"mechanism": "PLAIN", "username": "alice", "password": USERS["alice"]},
             None]
    jobs = [(client, _spec(plain, action="produce", topic="secure", sasl=s, timeout_s=3, conf=FAST_FAIL[client],
                           records=[{"key": "x", "value": "refused"}]))
            for client in ("confluent", "kafka-python") for s in cases]
    for (client, spec), answer in zip(jobs, run_clients(jobs, check=False), strict=True):
        assert "error" in answer or not any(isinstance(o, list) for o in answer["offsets"]), (client, spec, answer)


def _frame(req: Any, version: int, cid: int) -> bytes:
    req.with_header(correlation_id=cid, client_id="raw")
    return bytes(req.encode(version=version, header=True, framed=True))




def test_unauthenticated_requests_close_the_connection(secured: tuple[KafkaServe, ...]) -> None:
    plain, _tls = secured
    with socket.create_connection(("127.0.0.1", plain.kafka_port), timeout=10) as s:
        s.sendall(_frame(ApiVersionsRequest(), 0, 1))  # allowed before authentication
        assert read_frame(s) is not None
        s.sendall(_frame(MetadataRequest(topics=None), 1, 2))
        assert read_frame(s) is None  # closed, nothing answered
    with socket.create_connection(("127.0.0.1", plain.kafka_port), timeout=10) as s:
        s.sendall(_frame(SaslHandshakeRequest(mechanism="PLAIN"), 1, 3))
        body = read_frame(s)
        assert body is not None
        resp = SaslHandshakeResponse.decode(body[4:], version=1)
        assert resp.error_code == 33 and "PLAIN" not in resp.mechanisms  # UNSUPPORTED_SASL_MECHANISM
        assert read_frame(s) is None


def test_tls_listener_plain_and_scram(secured: tuple[KafkaServe, ...], tls_files: dict[str, str]) -> None:
    _plain, tls = secured
    tls.create_topic("tls-topic", 1)
    tls_spec = {"ca": tls_files["cert"]}
    plain_creds = {"mechanism": "PLAIN", "username": "alice", "password": USERS["alice"]}
    scram = {"mechanism": "SCRAM-SHA-512", "username": "bob", "password": USERS["bob"]}
    produced = run_clients([
        ("confluent", _spec(tls, action="produce", topic="tls-topic", sasl=plain_creds, tls=tls_spec,
                            records=[{"key": "a", "value": "1"}])),
        ("aiokafka", _spec(tls, action="produce", topic="tls-topic", sasl=scram, tls=tls_spec, idempotent=True,
                           records=[{"key": "b", "value": "2"}])),
        ("confluent", _spec(tls, action="produce", topic="tls-topic", tls=tls_spec, timeout_s=3,
                               records=[{"key": "c", "value": "refused"}])),
    ], check=False)
    assert produced[0]["offsets"][0][1] in (0, 1) and produced[1]["offsets"][0][1] in (0, 1), produced
    assert "error" in produced[2] or not isinstance(produced[2]["offsets"][0], list), produced[2]
    read = run_client("confluent", _spec(tls, action="consume", topic="tls-topic", sasl=scram, tls=tls_spec))
    assert sorted(r["value"] for r in read["records"]) == ["1", "2"]


def test_scram_credential_apis_create_users_that_authenticate(secured: tuple[KafkaServe, ...],
                                                              tls_files: dict[str, str]) -> None:
    """AlterUserScramCredentials through confluent-kafka's admin client makes users that every client then
    authenticates as (their credentials live in the metadata store); kafka-python's admin client describes and
    deletes them; Kafka's errors for bad alterations; the users file's users stay the file's."""
    plain, tls = secured
    plain.create_topic("scram-users", 1, token=TOKEN)
    admin = {"mechanism": "SCRAM-SHA-256", "username": "alice", "password": USERS["alice"]}
    altered = run_client("confluent", _spec(plain, action="scram_alter", sasl=admin, upsert=[
        ["carol", "SCRAM-SHA-512", "carol-pw", 8192], ["dave", "SCRAM-SHA-256", "dave-pw", 4096],
        ["erin", "SCRAM-SHA-256", "erin-pw", 1000], ["alice", "SCRAM-SHA-256", "hijack", 4096]]))["results"]
    assert altered == {"carol": None, "dave": None, "erin": "UNACCEPTABLE_CREDENTIAL",
                       "alice": "UNACCEPTABLE_CREDENTIAL"}, altered
    described = run_client("kafka-python", _spec(plain, action="scram_describe", sasl=admin))["users"]
    assert described == {"alice": [["SCRAM-SHA-256", 4096], ["SCRAM-SHA-512", 4096]],
                         "bob": [["SCRAM-SHA-256", 4096], ["SCRAM-SHA-512", 4096]],
                         "carol": [["SCRAM-SHA-512", 8192]], "dave": [["SCRAM-SHA-256", 4096]]}, described
    named = run_client("confluent", _spec(plain, action="scram_describe", sasl=admin, users=["carol", "nobody"]))
    assert named["users"] == {"carol": [["SCRAM-SHA-512", 8192]], "nobody": "RESOURCE_NOT_FOUND"}, named

    carol = {"mechanism": "SCRAM-SHA-512", "username": "carol", "password": "carol-pw"}
    dave = {"mechanism": "SCRAM-SHA-256", "username": "dave", "password": "dave-pw"}
    produced = run_clients([
        ("kafka-python", _spec(plain, action="produce", topic="scram-users", sasl=carol,
                               records=[{"key": "carol", "value": "1"}])),
        ("aiokafka", _spec(plain, action="produce", topic="scram-users", sasl=dave,
                           records=[{"key": "dave", "value": "2"}]))])
    assert all(isinstance(o, list) for a in produced for o in a["offsets"]), produced
    refused = [{**carol, "mechanism": "SCRAM-SHA-256"},  # no credential of that mechanism (not the token either)
               {**dave, "password": "wrong"}, {**carol, "password": TOKEN}]
    jobs = [("confluent", _spec(plain, action="produce", topic="scram-users", sasl=s, timeout_s=3,
                                records=[{"key": "x", "value": "refused"}])) for s in refused]
    for (_c, spec), answer in zip(jobs, run_clients(jobs, check=False), strict=True):
        assert "error" in answer or not any(isinstance(o, list) for o in answer["offsets"]), (spec, answer)

    deleted = run_client("kafka-python", _spec(plain, action="scram_alter", sasl=admin,
                                               delete=[["carol", "SCRAM-SHA-512"], ["dave", "SCRAM-SHA-512"]]))
    assert deleted["results"]["carol"] is None, deleted
    assert "does not exist" in deleted["results"]["dave"], deleted  # RESOURCE_NOT_FOUND: nothing of dave's went
    again = run_client("confluent", _spec(plain, action="produce", topic="scram-users", sasl=carol, timeout_s=3,
                                          records=[{"key": "x", "value": "refused"}]), check=False)
    assert "error" in again or not any(isinstance(o, list) for o in again["offsets"]), again
    read = run_client("confluent", _spec(plain, action="consume", topic="scram-users", sasl=dave))
    assert sorted(r["value"] for r in read["records"]) == ["1", "2"]
    # PLAIN over TLS checks a stored user's password against its stored credential (the TLS node's own store)
    tls_admin = {"mechanism": "SCRAM-SHA-512", "username": "bob", "password": USERS["bob"]}
    tls_spec = {"ca": tls_files["cert"]}
    assert run_client("confluent", _spec(tls, action="scram_alter", sasl=tls_admin, tls=tls_spec, upsert=[
        ["frank", "SCRAM-SHA-256", "frank-pw", 4096]]))["results"] == {"frank": None}
    tls.create_topic("scram-plain", 1)
    ok = run_client("confluent", _spec(tls, action="produce", topic="scram-plain", tls=tls_spec, records=[
        {"key": "f", "value": "1"}], sasl={"mechanism": "PLAIN", "username": "frank", "password": "frank-pw"}))
    assert isinstance(ok["offsets"][0], list), ok
    bad = run_client("confluent", _spec(tls, action="produce", topic="scram-plain", tls=tls_spec, timeout_s=3,
                                        records=[{"key": "f", "value": "x"}],
                                        sasl={"mechanism": "PLAIN", "username": "frank", "password": "nope"}),
                     check=False)
    assert "error" in bad or not any(isinstance(o, list) for o in bad["offsets"]), bad
