"""DescribeUserScramCredentials and AlterUserScramCredentials on the wire, against a listener over a real node
with SASL: Kafka's error for each bad alteration, a user's alterations applied together or not at all, and a
stored credential authenticating (its own iteration count announced) through the SCRAM client of
tests/kafka/test_sasl_exchanges.py, which the server code did not write."""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Iterator
from typing import Any

import pytest
from kafka.protocol.admin import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
)
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from service.config import load_config
from service.kafka.listener import KafkaListener, KafkaListenerConfig
from service.kafka.sasl import Authenticator
from service.node import Node
from tests.kafka.test_sasl_exchanges import Conn, _scram

ADMIN = ("root", "root-pass")
SHA256, SHA512 = 1, 2
UNSUPPORTED_SASL_MECHANISM, RESOURCE_NOT_FOUND, DUPLICATE_RESOURCE, UNACCEPTABLE_CREDENTIAL = 33, 91, 92, 93
Upsert = AlterUserScramCredentialsRequest.ScramCredentialUpsertion
Delete = AlterUserScramCredentialsRequest.ScramCredentialDeletion


@pytest.fixture(scope="module")
def port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    node = Node(load_config({"data_dir": tmp_path_factory.mktemp("scram") / "data", "cleaner_threads": 0}, env={}))
    node.start()
    auth = Authenticator(dict([ADMIN]), None, node.metadata)
    listener = KafkaListener(node, KafkaListenerConfig(host="127.0.0.1", port=0, authenticator=auth)).start()
    yield listener.port
    listener.stop()
    node.shutdown()


def _login(port: int, user: str, password: str, mech: str = "SCRAM-SHA-256") -> tuple[bool, Conn, list[str]]:
    c = Conn(port)
    assert c.call(SaslHandshakeRequest(mechanism=mech), 1, SaslHandshakeResponse).error_code == 0
    firsts: list[str] = []

    def send(token: bytes) -> bytes | None:
        resp = c.call(SaslAuthenticateRequest(auth_bytes=token), 2, SaslAuthenticateResponse)
        if resp.error_code:
            return None
        firsts.append(bytes(resp.auth_bytes).decode())
        return bytes(resp.auth_bytes)

    return _scram(mech, user, password, send), c, firsts


@pytest.fixture
def admin(port: int) -> Conn:
    ok, c, _ = _login(port, *ADMIN)
    assert ok
    return c


def _upsert(user: str, password: str, mechanism: int = SHA256, iterations: int = 4096, salt: bytes | None = None,
            salted: bytes | None = None) -> Any:
    salt = os.urandom(16) if salt is None else salt
    h = {SHA256: "sha256", SHA512: "sha512"}.get(mechanism, "sha256")
    salted = hashlib.pbkdf2_hmac(h, password.encode(), salt or b"x", iterations) if salted is None else salted
    return Upsert(name=user, mechanism=mechanism, iterations=iterations, salt=salt, salted_password=salted)


def _alter(c: Conn, upserts: list[Any] = (), deletes: list[tuple[str, int]] = ()) -> dict[str, tuple[int, str]]:
    resp = c.call(AlterUserScramCredentialsRequest(
        upsertions=list(upserts), deletions=[Delete(name=n, mechanism=m) for n, m in deletes]), 0,
        AlterUserScramCredentialsResponse)
    return {r.user: (r.error_code, r.error_message or "") for r in resp.results}


def _describe(c: Conn, users: list[str] | None) -> Any:
    req = DescribeUserScramCredentialsRequest(
        users=None if users is None else [DescribeUserScramCredentialsRequest.UserName(name=u) for u in users])
    return c.call(req, 0, DescribeUserScramCredentialsResponse)


def test_alterations_answer_kafka_errors_and_apply_per_user(admin: Conn) -> None:
    got = _alter(admin, [_upsert("u1", "p1"), _upsert("u2", "p2", iterations=100),
                         _upsert("u3", "p3", iterations=20000), _upsert("u4", "p4", mechanism=7),
                         _upsert("", "p5"), _upsert("u6", "p6", SHA512), _upsert("u6", "p6b", SHA512),
                         _upsert("u7", "p7", salted=b"short"), _upsert("u8", "p8", salt=b""),
                         _upsert(ADMIN[0], "taken")],
                 [("u9", SHA256), ("u10", 0)])
    assert {u: code for u, (code, _m) in got.items()} == {
        "u1": 0, "u2": UNACCEPTABLE_CREDENTIAL, "u3": UNACCEPTABLE_CREDENTIAL, "u4": UNSUPPORTED_SASL_MECHANISM,
        "": UNACCEPTABLE_CREDENTIAL, "u6": DUPLICATE_RESOURCE, "u7": UNACCEPTABLE_CREDENTIAL,
        "u8": UNACCEPTABLE_CREDENTIAL, ADMIN[0]: UNACCEPTABLE_CREDENTIAL, "u9": RESOURCE_NOT_FOUND,
        "u10": UNSUPPORTED_SASL_MECHANISM}, got
    assert got["u2"][1] == "Too few iterations" and got["u3"][1] == "Too many iterations"
    assert got["u9"][1] == "Attempt to delete a user credential that does not exist"
    # a user whose deletion fails keeps everything, the upsertion beside it included
    assert _alter(admin, [_upsert("u1", "other", SHA256, 8192)], [("u1", SHA512)])["u1"][0] == RESOURCE_NOT_FOUND
    d = _describe(admin, ["u1"])
    assert [(i.mechanism, i.iterations) for i in d.results[0].credential_infos] == [(SHA256, 4096)]


def test_describe_all_named_duplicated_and_unknown(admin: Conn) -> None:
    assert _alter(admin, [_upsert("d1", "p", SHA512, 8192), _upsert("d1", "p", SHA256)]) == {"d1": (0, "")}
    every = _describe(admin, None)
    assert every.error_code == 0
    by_user = {r.user: [(i.mechanism, i.iterations) for i in r.credential_infos] for r in every.results}
    assert by_user["d1"] == [(SHA256, 4096), (SHA512, 8192)]
    assert by_user[ADMIN[0]] == [(SHA256, 4096), (SHA512, 4096)]  # the users file's, as this node has them
    assert [r.user for r in every.results] == sorted(by_user)
    named = _describe(admin, ["d1", "nobody", "d1x", "d1x", ""])
    assert [(r.user, r.error_code) for r in named.results] == [
        ("d1", 0), ("nobody", RESOURCE_NOT_FOUND), ("d1x", DUPLICATE_RESOURCE), ("", RESOURCE_NOT_FOUND)]
    assert named.results[1].error_message == "Attempt to describe a user credential that does not exist: nobody"


def test_a_stored_credential_authenticates_with_its_iterations(port: int, admin: Conn) -> None:
    salt = os.urandom(24)
    assert _alter(admin, [_upsert("eve", "eve-pw", SHA512, 10000, salt=salt)]) == {"eve": (0, "")}
    ok, c, firsts = _login(port, "eve", "eve-pw", "SCRAM-SHA-512")
    assert ok
    assert f"s={base64.b64encode(salt).decode()},i=10000" in firsts[0]
    assert _describe(c, ["eve"]).results[0].error_code == 0  # authenticated: served
    assert not _login(port, "eve", "wrong", "SCRAM-SHA-512")[0]
    assert not _login(port, "eve", "eve-pw", "SCRAM-SHA-256")[0]  # no credential of that mechanism
    assert _alter(admin, deletes=[("eve", SHA512)]) == {"eve": (0, "")}
    assert not _login(port, "eve", "eve-pw", "SCRAM-SHA-512")[0]
