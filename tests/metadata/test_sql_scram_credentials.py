"""SCRAM credentials in the metadata store: what one node writes every node sharing the store reads; a user's
alterations apply together or not at all; a version 8 store gets the table when it opens."""

from __future__ import annotations

from pathlib import Path

import pytest

from metadata.scram_credentials import ScramCredential, ScramCredentialNotFoundError
from metadata.sql import SqlRemoteLogMetadataManager
from tests.support.old_store import store_at_version


def _cred(user: str, mechanism: str = "SCRAM-SHA-256", iterations: int = 4096, tag: bytes = b"1") -> ScramCredential:
    return ScramCredential(user, mechanism, iterations, b"salt" + tag, b"stored" + tag, b"server" + tag)


def test_credentials_are_shared_and_altered_per_user_atomically(shared_store_url: str) -> None:
    with SqlRemoteLogMetadataManager(shared_store_url) as a, SqlRemoteLogMetadataManager(shared_store_url) as b:
        a.alter_scram_credentials("carol", [_cred("carol"), _cred("carol", "SCRAM-SHA-512", 8192)], [])
        a.alter_scram_credentials("ann", [_cred("ann")], [])
        assert [(c.user, c.mechanism, c.iterations) for c in b.scram_credentials()] == [
            ("ann", "SCRAM-SHA-256", 4096), ("carol", "SCRAM-SHA-256", 4096), ("carol", "SCRAM-SHA-512", 8192)]
        b.alter_scram_credentials("carol", [_cred("carol", tag=b"2")], [])  # replaces, through the other node
        assert a.scram_credentials("carol")[0] == _cred("carol", tag=b"2")
        with pytest.raises(ScramCredentialNotFoundError):  # the second deletion finds nothing: neither applies
            a.alter_scram_credentials("carol", [], ["SCRAM-SHA-512", "SCRAM-SHA-512"])
        with pytest.raises(ScramCredentialNotFoundError):  # nor does the upsert beside a failed deletion
            a.alter_scram_credentials("ann", [_cred("ann", "SCRAM-SHA-512")], ["SCRAM-SHA-512"])
        assert len(b.scram_credentials("carol")) == 2 and len(b.scram_credentials("ann")) == 1
        b.alter_scram_credentials("carol", [], ["SCRAM-SHA-256", "SCRAM-SHA-512"])
        assert a.scram_credentials("carol") == [] and a.scram_credentials("nobody") == []
        with pytest.raises(ValueError):
            a.alter_scram_credentials("ann", [_cred("carol")], [])


def test_a_version_8_store_gets_the_scram_credentials_table(tmp_path: Path) -> None:
    from metadata.sql.schema import scram_credentials

    with store_at_version(tmp_path, 8, scram_credentials) as url:
        with SqlRemoteLogMetadataManager(url) as m:
            m.alter_scram_credentials("ann", [_cred("ann")], [])
            assert m.scram_credentials() == [_cred("ann")]
