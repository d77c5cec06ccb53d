"""DescribeUserScramCredentials v0 and AlterUserScramCredentials v0 (KIP-554): users and their SCRAM credentials.

The credentials live in the metadata store (metadata/scram_credentials.py), so a user created
through any node authenticates on every node sharing the store (service/kafka/sasl.py). As
Kafka's broker answers them:

* Alter checks each user's alterations together and applies them in one transaction, or none of
  them: an empty user name and iterations outside 4096..16384 are UNACCEPTABLE_CREDENTIAL, a
  mechanism other than SCRAM-SHA-256 (1) and SCRAM-SHA-512 (2) UNSUPPORTED_SASL_MECHANISM, one
  (user, mechanism) altered twice DUPLICATE_RESOURCE, the deletion of a credential that is not
  there RESOURCE_NOT_FOUND. The server keeps the salt, the iterations, StoredKey and ServerKey
  (RFC 5802), never the salted password it was sent.
* Describe answers every user with a credential (sorted) when the request names none, else the
  users named: RESOURCE_NOT_FOUND for one without credentials or an empty name, DUPLICATE_RESOURCE
  for one named twice. Only mechanisms and iterations are told, never salts or keys.

Where this differs from Kafka: the users of this node's users file (``--sasl-users``) are this
node's configuration. Describe lists them (both mechanisms, 4096 iterations) beside the stored
users, and Alter refuses to change them (UNACCEPTABLE_CREDENTIAL: edit the file). Every
authenticated principal may call both APIs, as on a Kafka broker with no authorizer
(service/kafka/acls.py).
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

from kafka.errors import (
    DuplicateResourceError,
    ResourceNotFoundError,
    UnacceptableCredentialError,
    UnknownError,
    UnsupportedSaslMechanismError,
)
from kafka.protocol.admin import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
)

from metadata.scram_credentials import ScramCredential, ScramCredentialNotFoundError, ScramCredentialStore
from service.kafka.registry import RequestContext, kafka_api
from service.kafka.sasl import SCRAM_HASHES, SCRAM_ITERATIONS, keys_from_salted

logger = logging.getLogger(__name__)

#: Kafka's ScramMechanism type ids
MECHANISMS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
MECHANISM_IDS = {name: i for i, name in MECHANISMS.items()}
#: Kafka's bounds on a credential's iterations (ScramMechanism.minIterations; the broker's maximum)
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384

_Described = DescribeUserScramCredentialsResponse.DescribeUserScramCredentialsResult
_Info = _Described.CredentialInfo
_Altered = AlterUserScramCredentialsResponse.AlterUserScramCredentialsResult

EMPTY_USER = "Username must not be empty"
NO_SUCH_USER = "Attempt to describe a user credential that does not exist"
NO_SUCH_CREDENTIAL = "Attempt to delete a user credential that does not exist"
TWICE = "A user credential cannot be altered twice in the same request"
UNKNOWN_MECHANISM = "Unknown SCRAM mechanism"


def _store(ctx: RequestContext) -> ScramCredentialStore:
    return ctx.node.metadata


def _file_users(ctx: RequestContext, names: list[str] | None = None) -> set[str]:
    """Which of ``names`` (or all) this node's users file lists."""
    auth = ctx.listener.config.authenticator if ctx.listener is not None else None
    if auth is None:
        return set()
    if names is None:
        return set(auth.file_users())
    return {n for n in names if auth.file_user(n)}


# ---- describe ------------------------------------------------------------------------------------------------
def _infos(mechanisms: dict[str, int]) -> list[Any]:
    return [_Info(mechanism=MECHANISM_IDS[m], iterations=i) for m, i in sorted(mechanisms.items(),
                                                                                key=lambda kv: MECHANISM_IDS[kv[0]])]


def _credentials_by_user(ctx: RequestContext, user: str | None) -> dict[str, dict[str, int]]:
    """user -> {mechanism: iterations}: the store's, with this node's file users over them."""
    found: dict[str, dict[str, int]] = {}
    for c in _store(ctx).scram_credentials(user):
        if c.mechanism in MECHANISM_IDS:
            found.setdefault(c.user, {})[c.mechanism] = c.iterations
    for name in _file_users(ctx, None if user is None else [user]):
        found[name] = dict.fromkeys(MECHANISM_IDS, SCRAM_ITERATIONS)
    return found


def _describe(ctx: RequestContext, request: Any) -> Any:
    names = [u.name for u in request.users] if request.users else []
    try:
        if not names:
            every = _credentials_by_user(ctx, None)
            results = [_Described(user=u, error_code=0, error_message=None, credential_infos=_infos(every[u]))
                       for u in sorted(every)]
            return DescribeUserScramCredentialsResponse(throttle_time_ms=0, error_code=0, error_message=None,
                                                        results=results)
    except Exception as e:  # noqa: BLE001 - the store could not list the users: the request's error
        logger.warning("DescribeUserScramCredentials failed: %s", e)
        return DescribeUserScramCredentialsResponse(throttle_time_ms=0, error_code=UnknownError.errno,
                                                    error_message=f"cannot read the credentials: {e}", results=[])
    results = []
    for name in dict.fromkeys(names):  # one answer per user, in the order first named
        if not name:
            results.append(_Described(user=name, error_code=ResourceNotFoundError.errno, error_message=EMPTY_USER,
                                      credential_infos=[]))
        elif names.count(name) > 1:
            results.append(_Described(
                user=name, error_code=DuplicateResourceError.errno, credential_infos=[],
                error_message=f"Cannot describe SCRAM credentials for the same user twice in a single request: {name}"))
        else:
            try:
                mechanisms = _credentials_by_user(ctx, name).get(name)
            except Exception as e:  # noqa: BLE001 - this user's error
                results.append(_Described(user=name, error_code=UnknownError.errno, credential_infos=[],
                                          error_message=f"cannot read the credentials: {e}"))
                continue
            if not mechanisms:
                results.append(_Described(user=name, error_code=ResourceNotFoundError.errno, credential_infos=[],
                                          error_message=f"{NO_SUCH_USER}: {name}"))
            else:
                results.append(_Described(user=name, error_code=0, error_message=None,
                                          credential_infos=_infos(mechanisms)))
    return DescribeUserScramCredentialsResponse(throttle_time_ms=0, error_code=0, error_message=None, results=results)


@kafka_api(DescribeUserScramCredentialsRequest, min_version=0, max_version=0)
async def handle_describe_user_scram_credentials(ctx: RequestContext, request: Any) -> Any:
    return await ctx.run(_describe, ctx, request)


# ---- alter ---------------------------------------------------------------------------------------------------
def _upsert_error(u: Any) -> tuple[int, str] | None:
    if not u.name:
        return UnacceptableCredentialError.errno, EMPTY_USER
    mechanism = MECHANISMS.get(u.mechanism)
    if mechanism is None:
        return UnsupportedSaslMechanismError.errno, UNKNOWN_MECHANISM
    if u.iterations < MIN_ITERATIONS:
        return UnacceptableCredentialError.errno, "Too few iterations"
    if u.iterations > MAX_ITERATIONS:
        return UnacceptableCredentialError.errno, "Too many iterations"
    size = hashlib.new(SCRAM_HASHES[mechanism]).digest_size
    if not u.salt:
        return UnacceptableCredentialError.errno, "Salt must not be empty"
    if len(u.salted_password or b"") != size:
        return UnacceptableCredentialError.errno, f"A {mechanism} salted password is {size} bytes"
    return None


def _delete_error(d: Any) -> tuple[int, str] | None:
    if not d.name:
        return UnacceptableCredentialError.errno, EMPTY_USER
    if d.mechanism not in MECHANISMS:
        return UnsupportedSaslMechanismError.errno, UNKNOWN_MECHANISM
    return None


def _alter(ctx: RequestContext, request: Any) -> Any:
    deletions = list(request.deletions or ())
    upsertions = list(request.upsertions or ())
    order = list(dict.fromkeys([d.name for d in deletions] + [u.name for u in upsertions]))
    errors: dict[str, tuple[int, str]] = {}
    for d in deletions:
        err = _delete_error(d)
        if err is not None:
            errors[d.name] = err
    for u in upsertions:  # as Kafka's, an upsertion's error is the one a user answers when both have one
        err = _upsert_error(u)
        if err is not None:
            errors[u.name] = err
    for name in _file_users(ctx, [n for n in order if n not in errors]):
        errors[name] = (UnacceptableCredentialError.errno,
                        f"user {name!r} is in this node's SASL users file (--sasl-users): change it there")
    pairs = [(d.name, d.mechanism) for d in deletions if d.name not in errors] + \
        [(u.name, u.mechanism) for u in upsertions if u.name not in errors]
    for name, mechanism in pairs:
        if pairs.count((name, mechanism)) > 1:
            errors[name] = (DuplicateResourceError.errno, TWICE)
    results = []
    for name in order:
        err = errors.get(name)
        if err is None:
            err = _apply(ctx, name, [d for d in deletions if d.name == name], [u for u in upsertions if u.name == name])
        results.append(_Altered(user=name, error_code=err[0], error_message=err[1] or None))
    return AlterUserScramCredentialsResponse(throttle_time_ms=0, results=results)


def _apply(ctx: RequestContext, name: str, deletions: list[Any], upsertions: list[Any]) -> tuple[int, str]:
    upserts = []
    for u in upsertions:
        mechanism = MECHANISMS[u.mechanism]
        keys = keys_from_salted(bytes(u.salted_password), SCRAM_HASHES[mechanism], bytes(u.salt), u.iterations)
        upserts.append(ScramCredential(name, mechanism, u.iterations, keys.salt, keys.stored_key, keys.server_key))
    try:
        _store(ctx).alter_scram_credentials(name, upserts, [MECHANISMS[d.mechanism] for d in deletions])
    except ScramCredentialNotFoundError:
        return ResourceNotFoundError.errno, NO_SUCH_CREDENTIAL
    except Exception as e:  # noqa: BLE001 - the store failed: this user's error, nothing of it applied
        logger.warning("AlterUserScramCredentials of %r failed: %s", name, e)
        return UnknownError.errno, f"cannot store the credentials: {e}"
    logger.info("SCRAM credentials of %r altered (%d upserted, %d deleted)", name, len(upserts), len(deletions))
    return 0, ""


@kafka_api(AlterUserScramCredentialsRequest, min_version=0, max_version=0)
async def handle_alter_user_scram_credentials(ctx: RequestContext, request: Any) -> Any:
    return await ctx.run(_alter, ctx, request)
