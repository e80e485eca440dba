"""SCRAM credentials (Kafka's ScramControlManager): AlterUserScramCredentials (key 51) on the
controller, DescribeUserScramCredentials (key 50) from any image.

``kafka-configs --alter --entity-type users --entity-name alice --add-config
'SCRAM-SHA-512=[password=...]'`` sends the salted password (the client salts and hashes; the
password never crosses the wire) and the controller stores RFC 5802's StoredKey and
ServerKey derived from it as UserScramCredential records. Each user's changes are applied
or refused together, with Kafka's error codes and words.
"""

from __future__ import annotations

import hashlib
import hmac
from collections import Counter
from collections.abc import Iterator, Sequence
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from metadata.controller.context import ControllerContext, ControllerResult, EntityRun
from metadata.image import MetadataImage
from metadata.records import MetadataRecord, RemoveUserScramCredential, UserScramCredential
from protocol.api_keys import ApiKey
from protocol.entities import make, response_module
from protocol.turns import SLICE_ENTITIES, Turns, weighted_slices

# Kafka's ScramMechanism type ids, and each one's hash.
MECHANISMS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
MECHANISM_IDS = {name: key for key, name in MECHANISMS.items()}
_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MIN_ITERATIONS = 4096  # Kafka's ScramMechanism minIterations
MAX_ITERATIONS = 16384  # and maxIterations


def stored_and_server_key(mechanism: str, salted_password: bytes) -> tuple[bytes, bytes]:
    """RFC 5802 section 3: StoredKey = H(HMAC(SaltedPassword, "Client Key")), ServerKey =
    HMAC(SaltedPassword, "Server Key")."""
    name = _HASHES[mechanism]
    client_key = hmac.digest(salted_password, b"Client Key", name)
    stored_key = hashlib.new(name, client_key).digest()
    return stored_key, hmac.digest(salted_password, b"Server Key", name)


def alter_user_scram_credentials(
    ctx: ControllerContext, request: Any, api_version: int
) -> ControllerResult:
    """One result per user named (in order of first mention, deletions first): its records,
    or the error refusing all of that user's changes. (In one pass: the controller runs
    ``scram_run`` a slice of users at a time.)"""
    return scram_run(request, api_version).whole(ctx)


def scram_run(request: Any, api_version: int) -> EntityRun:
    """AlterUserScramCredentials a slice a turn (issue 22): the request is first read into
    each user's changes (a user's deletion and upsertion may be far apart), SLICE_ENTITIES
    changes a turn, then worked on a slice of users at a time (users are independent)."""
    module: Any = response_module(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, api_version)
    changes: dict[str, list[tuple[str, Any]]] = {}

    def reading() -> Iterator[Sequence[Any]]:
        read = 0
        for kind, items in (("delete", request.deletions), ("upsert", request.upsertions)):
            for item in items:
                changes.setdefault(item.name, []).append((kind, item))
                read += 1
                if read % SLICE_ENTITIES == 0:
                    yield ()  # a turn of reading
        yield from weighted_slices(list(changes.items()), lambda user: len(user[1]))

    def one(ctx: ControllerContext, user_items: Any) -> tuple[list[MetadataRecord], object]:
        user, items = user_items
        message: str | None = None
        user_records: list[MetadataRecord] = []
        try:
            user_records = _user_records(ctx.image, user, items)
        except _Refused as refused:
            code, message = refused.code, refused.message
        else:
            code = ErrorCode.none
        result = make(
            module.AlterUserScramCredentialsResult,
            {"user": user, "error_code": code, "error_message": message},
        )
        return user_records, result

    def finish(results: tuple[object, ...]) -> object:
        return make(
            module.AlterUserScramCredentialsResponse,
            {"throttle_time": timedelta(0), "results": results},
        )

    return EntityRun((), one, finish, reading=reading)


class _Refused(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _user_records(
    image: MetadataImage, user: str, items: list[tuple[str, Any]]
) -> list[MetadataRecord]:
    if not user:
        raise _Refused(ErrorCode.unacceptable_credential, "Username must not be empty")
    mechanisms = [int(item.mechanism) for _, item in items]
    if len(set(mechanisms)) != len(mechanisms):
        raise _Refused(
            ErrorCode.duplicate_resource,
            "A user credential cannot be altered twice in the same request",
        )
    records: list[MetadataRecord] = []
    for kind, item in items:
        mechanism = MECHANISMS.get(int(item.mechanism))
        if mechanism is None:
            raise _Refused(ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism")
        if kind == "delete":
            if (user, mechanism) not in image.scram_credentials:
                raise _Refused(
                    ErrorCode.resource_not_found,
                    "Attempt to delete a user credential that does not exist",
                )
            records.append(RemoveUserScramCredential(user, mechanism))
            continue
        iterations = int(item.iterations)
        if iterations < MIN_ITERATIONS:
            raise _Refused(
                ErrorCode.unacceptable_credential, f"Iterations must be >= {MIN_ITERATIONS}"
            )
        if iterations > MAX_ITERATIONS:
            raise _Refused(
                ErrorCode.unacceptable_credential, f"Iterations must be <= {MAX_ITERATIONS}"
            )
        salted = bytes(item.salted_password)
        if not salted or not bytes(item.salt):
            raise _Refused(ErrorCode.unacceptable_credential, "Salt and password must be set")
        stored_key, server_key = stored_and_server_key(mechanism, salted)
        records.append(
            UserScramCredential(
                user, mechanism, bytes(item.salt), stored_key, server_key, iterations
            )
        )
    return records


async def describe_user_scram_credentials(
    image: MetadataImage, request: Any, api_version: int
) -> object:
    """Mechanisms and iteration counts (never keys) of the named users, or of every user
    with a credential when ``users`` is null; a slice of users a turn of the loop."""
    module: Any = response_module(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, api_version)
    by_user: dict[str, list[tuple[str, int]]] = {}
    for (user, mechanism), credential in sorted(image.scram_credentials.items()):
        by_user.setdefault(user, []).append((mechanism, credential.iterations))
    named = request.users
    wanted = list(by_user) if named is None else [item.name for item in named]
    # Counted once (wanted.count per name was quadratic: 20,000 names held the loop 3 s).
    duplicates = {name for name, count in Counter(wanted).items() if count > 1}
    results = []
    turns = Turns()
    for name in dict.fromkeys(wanted):
        await turns.tick()
        code, message, infos = ErrorCode.none, None, ()
        if name in duplicates:
            code = ErrorCode.duplicate_resource
            message = (
                "Cannot describe SCRAM credentials for the same user twice in a single request"
            )
        elif name not in by_user:
            code = ErrorCode.resource_not_found
            message = "Attempt to describe a user credential that does not exist"
        else:
            infos = tuple(
                make(
                    module.CredentialInfo,
                    {"mechanism": MECHANISM_IDS[mechanism], "iterations": iterations},
                )
                for mechanism, iterations in by_user[name]
            )
        results.append(
            make(
                module.DescribeUserScramCredentialsResult,
                {
                    "user": name,
                    "error_code": code,
                    "error_message": message,
                    "credential_infos": infos,
                },
            )
        )
    return make(
        module.DescribeUserScramCredentialsResponse,
        {"throttle_time": timedelta(0), "error_code": ErrorCode.none, "results": tuple(results)},
    )


def refuse_alter(module: Any, request: Any, code: ErrorCode, message: str | None = None) -> object:
    """Every user of an AlterUserScramCredentials request refused with ``code``."""
    users = dict.fromkeys(
        [d.name for d in request.deletions] + [u.name for u in request.upsertions]
    )
    results = tuple(
        make(
            module.AlterUserScramCredentialsResult,
            {"user": user, "error_code": code, "error_message": message},
        )
        for user in users
    )
    return make(
        module.AlterUserScramCredentialsResponse,
        {"throttle_time": timedelta(0), "results": results},
    )
