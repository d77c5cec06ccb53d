"""SCRAM credentials every node sharing the metadata store accepts (what Kafka keeps per user for SCRAM-SHA-256/512).

A credential is what RFC 5802 lets a server keep: the salt, the iteration count, StoredKey
and ServerKey, never the password nor the salted password. Kafka's AlterUserScramCredentials
writes them (service/kafka/scram_admin.py) and the listener's SCRAM exchange reads them
(service/kafka/sasl.py), on any node: a user created through one node authenticates on all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from metadata.errors import MetadataError


class ScramCredentialNotFoundError(MetadataError):
    """A deletion named a (user, mechanism) that has no credential (Kafka's RESOURCE_NOT_FOUND)."""


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """One user's credential for one mechanism (``SCRAM-SHA-256`` or ``SCRAM-SHA-512``)."""

    user: str
    mechanism: str
    iterations: int
    salt: bytes
    stored_key: bytes
    server_key: bytes


class ScramCredentialStore(Protocol):
    """The users' SCRAM credentials (SQL: :mod:`metadata.sql.scram_credentials`)."""

    def scram_credentials(self, user: str | None = None) -> list[ScramCredential]:
        """Every stored credential, or ``user``'s only; ordered by user, then mechanism."""

    def alter_scram_credentials(self, user: str, upserts: Sequence[ScramCredential],
                                deletions: Sequence[str]) -> None:
        """In one transaction: delete ``user``'s credential of each mechanism in ``deletions``, then insert or
        replace ``upserts`` (each of ``user``). Nothing changes if a deletion names a credential that is not
        there (ScramCredentialNotFoundError)."""
