"""SASL credentials and exchanges of the Kafka listener: SCRAM-SHA-256/512 (RFC 5802/7677) and PLAIN (TLS only).

Credentials come from three places, first match wins for a user name:

1. the users file (``--sasl-users``: one ``user:password`` per line, ``#`` comments), this node's;
2. the SCRAM credentials in the metadata store, which Kafka's AlterUserScramCredentials writes
   through any node (service/kafka/scram_admin.py), so every node sharing the store accepts them.
   A user with any stored credential authenticates with those only: SCRAM with the mechanism
   stored, PLAIN (over TLS) against either stored credential;
3. the node's HTTP token, which is the password of every other user name.

The file's SCRAM keys are derived once at start (PBKDF2, 4096 iterations, a random salt per user
and mechanism); a stored credential is read when a client names its user (a blocking read: every
exchange step runs on a listener worker, never on the event loop). An unknown user gets a made-up
salt, so the first answer does not tell who exists. Every failure is the same :class:`SaslFailed`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from log.errors import InvalidConfigError

if TYPE_CHECKING:
    from metadata.scram_credentials import ScramCredential, ScramCredentialStore
    from service.config import ServiceConfig

logger = logging.getLogger(__name__)

SCRAM_ITERATIONS = 4096
#: the SCRAM mechanisms and their hashes (Kafka's ScramMechanism, in the order of its type ids 1 and 2)
SCRAM_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}


class SaslFailed(Exception):
    """Authentication failed (the message is for the log; clients get Kafka's generic error)."""


@dataclass(frozen=True)
class ScramKeys:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int = SCRAM_ITERATIONS


def keys_from_salted(salted: bytes, hash_name: str, salt: bytes, iterations: int) -> ScramKeys:
    """StoredKey and ServerKey of a salted password (RFC 5802: what a server keeps)."""
    client_key = hmac.new(salted, b"Client Key", hash_name).digest()
    return ScramKeys(salt, hashlib.new(hash_name, client_key).digest(),
                     hmac.new(salted, b"Server Key", hash_name).digest(), iterations)


def scram_keys(password: str, hash_name: str, salt: bytes, iterations: int = SCRAM_ITERATIONS) -> ScramKeys:
    return keys_from_salted(hashlib.pbkdf2_hmac(hash_name, password.encode(), salt, iterations), hash_name, salt,
                            iterations)


def read_users_file(path: Path) -> dict[str, str]:
    """``user:password`` lines (blank lines and ``#`` comments skipped)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise InvalidConfigError(f"cannot read the SASL users file {path}: {e.strerror or e}") from None
    users: dict[str, str] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        user, sep, password = line.partition(":")
        if not sep or not user.strip() or not password:
            raise InvalidConfigError(f"SASL users file {path} line {n}: expected user:password")
        users[user.strip()] = password
    return users


class Authenticator:
    """The listener's credentials: which mechanisms a connection may use, and their exchanges."""

    def __init__(self, users: dict[str, str], token: str | None = None,
                 store: ScramCredentialStore | None = None) -> None:
        self._users = dict(users)
        self._token = token
        self._store = store
        self._scram: dict[tuple[str, str], ScramKeys] = {}
        self._token_scram: dict[str, ScramKeys] = {}
        self._fake_salt_key = secrets.token_bytes(32)
        for user, password in self._users.items():
            for mech, h in SCRAM_HASHES.items():
                self._scram[(mech, user)] = scram_keys(password, h, os.urandom(16))
        if token is not None:
            for mech, h in SCRAM_HASHES.items():
                self._token_scram[mech] = scram_keys(token, h, os.urandom(16))

    @staticmethod
    def from_config(config: ServiceConfig, store: ScramCredentialStore | None = None) -> Authenticator:
        users = read_users_file(config.sasl_users) if config.sasl_users is not None else {}
        return Authenticator(users, config.token, store)

    def file_users(self) -> list[str]:
        """The users file's user names."""
        return list(self._users)

    def file_user(self, user: str) -> bool:
        """Whether the users file lists ``user`` (its credentials are this node's configuration, not the store's)."""
        return user in self._users

    def mechanisms(self, tls: bool) -> list[str]:
        """PLAIN sends the password itself: only offered over TLS."""
        return [*SCRAM_HASHES, "PLAIN"] if tls else list(SCRAM_HASHES)

    def start(self, mechanism: str, tls: bool) -> Any:
        if mechanism not in self.mechanisms(tls):
            raise SaslFailed(f"mechanism {mechanism!r} is not enabled here")
        if mechanism == "PLAIN":
            return PlainExchange(self)
        return ScramExchange(self, mechanism)

    def _stored(self, user: str) -> list[ScramCredential] | None:
        """``user``'s stored credentials (blocking); None when the user has none or the store cannot say."""
        if self._store is None:
            return None
        try:
            found = self._store.scram_credentials(user)
        except Exception as e:  # noqa: BLE001 - the file's users and the token still work without the store
            logger.warning("cannot read the SCRAM credentials of %r from the metadata store: %s", user, e)
            return None
        return found or None

    def check_password(self, user: str, password: str) -> bool:
        """PLAIN (blocking: may read the store, and a stored credential costs a PBKDF2)."""
        expected = self._users.get(user)
        if expected is None:
            stored = self._stored(user)
            if stored is not None:
                c = stored[0]
                h = SCRAM_HASHES.get(c.mechanism)
                if h is None:
                    return False
                keys = scram_keys(password, h, c.salt, c.iterations)
                return hmac.compare_digest(keys.stored_key, c.stored_key)
            expected = self._token
        return expected is not None and hmac.compare_digest(expected.encode(), password.encode())

    def keys(self, mechanism: str, user: str) -> ScramKeys | None:
        """``user``'s keys for ``mechanism`` (blocking: may read the store), None if it has none."""
        found = self._scram.get((mechanism, user))
        if found is not None or user in self._users:
            return found
        stored = self._stored(user)
        if stored is not None:
            for c in stored:
                if c.mechanism == mechanism:
                    return ScramKeys(c.salt, c.stored_key, c.server_key, c.iterations)
            return None
        return self._token_scram.get(mechanism)

    def fake_salt(self, user: str) -> bytes:
        return hmac.new(self._fake_salt_key, user.encode(), "sha256").digest()[:16]


class PlainExchange:
    """RFC 4616: one message ``authzid NUL authcid NUL passwd``."""

    def __init__(self, auth: Authenticator) -> None:
        self.auth = auth
        self.principal: str | None = None

    def step(self, data: bytes) -> tuple[bytes, bool]:
        parts = data.split(b"\0")
        if len(parts) != 3:
            raise SaslFailed("malformed PLAIN message")
        authzid, user, password = (p.decode("utf-8", "strict") for p in parts)
        if authzid and authzid != user:
            raise SaslFailed("PLAIN authorization id differs from the user")
        if not self.auth.check_password(user, password):
            raise SaslFailed(f"wrong credentials for user {user!r} (PLAIN)")
        self.principal = user
        return b"", True


def _scram_unescape(name: str) -> str:
    return name.replace("=2C", ",").replace("=3D", "=")


class ScramExchange:
    """RFC 5802 server side: client-first -> server-first, client-final -> server-final."""

    def __init__(self, auth: Authenticator, mechanism: str) -> None:
        self.auth = auth
        self.mechanism = mechanism
        self.hash = SCRAM_HASHES[mechanism]
        self.principal: str | None = None
        self._state = 0
        self._user = ""
        self._keys: ScramKeys | None = None
        self._nonce = ""
        self._client_first_bare = ""
        self._server_first = ""

    def step(self, data: bytes) -> tuple[bytes, bool]:
        try:
            text = data.decode("utf-8", "strict")
        except UnicodeDecodeError:
            raise SaslFailed("SCRAM message is not UTF-8") from None
        if self._state == 0:
            return self._first(text), False
        if self._state == 1:
            return self._final(text), True
        raise SaslFailed("SCRAM exchange already finished")

    def _first(self, text: str) -> bytes:
        gs2, sep, bare = text.partition(",")
        authz, sep2, bare = bare.partition(",")
        if not sep or not sep2 or gs2 not in ("n", "y") or (authz and not authz.startswith("a=")):
            raise SaslFailed("malformed SCRAM client-first message (channel binding is not supported)")
        attrs = dict(a.split("=", 1) for a in bare.split(",") if "=" in a)
        if "n" not in attrs or "r" not in attrs or not attrs["r"]:
            raise SaslFailed("SCRAM client-first message lacks n= or r=")
        self._user = _scram_unescape(attrs["n"])
        if authz and _scram_unescape(authz[2:]) != self._user:
            raise SaslFailed("SCRAM authorization id differs from the user")
        self._keys = self.auth.keys(self.mechanism, self._user)
        salt = self._keys.salt if self._keys is not None else self.auth.fake_salt(self._user)
        self._nonce = attrs["r"] + base64.b64encode(os.urandom(18)).decode()
        self._client_first_bare = bare
        iterations = self._keys.iterations if self._keys is not None else SCRAM_ITERATIONS
        self._server_first = f"r={self._nonce},s={base64.b64encode(salt).decode()},i={iterations}"
        self._state = 1
        return self._server_first.encode()

    def _final(self, text: str) -> bytes:
        self._state = 2
        without_proof, sep, proof_b64 = text.rpartition(",p=")
        if not sep:
            raise SaslFailed("SCRAM client-final message lacks p=")
        attrs = dict(a.split("=", 1) for a in without_proof.split(",") if "=" in a)
        if attrs.get("r") != self._nonce:
            raise SaslFailed("SCRAM nonce mismatch")
        if attrs.get("c") not in ("biws", "eSws"):  # base64 of "n,," / "y,,": no channel binding
            raise SaslFailed("SCRAM channel binding is not supported")
        try:
            proof = base64.b64decode(proof_b64, validate=True)
        except ValueError:
            raise SaslFailed("SCRAM proof is not base64") from None
        keys = self._keys
        if keys is None:
            raise SaslFailed(f"unknown user {self._user!r} ({self.mechanism})")
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        signature = hmac.new(keys.stored_key, auth_message, self.hash).digest()
        if len(proof) != len(signature):
            raise SaslFailed("SCRAM proof has the wrong length")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(self.hash, client_key).digest(), keys.stored_key):
            raise SaslFailed(f"wrong credentials for user {self._user!r} ({self.mechanism})")
        self.principal = self._user
        server_signature = hmac.new(keys.server_key, auth_message, self.hash).digest()
        return b"v=" + base64.b64encode(server_signature)
