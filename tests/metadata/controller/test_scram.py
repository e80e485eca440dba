"""AlterUserScramCredentials and DescribeUserScramCredentials against an image: Kafka's
refusals, per user, and the stored keys a client's salted password yields."""

from __future__ import annotations

import asyncio
import hashlib
from types import SimpleNamespace
from typing import Any

from kio.schema.errors import ErrorCode

from metadata.controller.scram import (
    alter_user_scram_credentials,
    describe_user_scram_credentials,
)
from metadata.delta import MetadataDelta
from metadata.image import EMPTY, MetadataImage
from metadata.records import RemoveUserScramCredential, UserScramCredential
from protocol.api_keys import ApiKey
from protocol.entities import make, request_module
from protocol.sasl import SaslClient, SaslServer, ScramCredential, Verdict
from protocol.security import ListenerSecurity, SaslCredentials, SecurityProtocol

ALTER: Any = request_module(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0)
DESCRIBE: Any = request_module(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0)
SALT = b"0123456789abcdef"


def _upsert(name: str, password: str, iterations: int = 4096, mechanism: int = 2) -> Any:
    salted = hashlib.pbkdf2_hmac("sha512", password.encode(), SALT, iterations)
    values = {"name": name, "mechanism": mechanism, "iterations": iterations}
    return make(ALTER.ScramCredentialUpsertion, values | {"salt": SALT, "salted_password": salted})


def _delete(name: str, mechanism: int = 2) -> Any:
    return make(ALTER.ScramCredentialDeletion, {"name": name, "mechanism": mechanism})


def _alter(image: MetadataImage, deletions: tuple = (), upsertions: tuple = ()) -> Any:
    request = make(
        ALTER.AlterUserScramCredentialsRequest,
        {"deletions": deletions, "upsertions": upsertions},
    )
    return alter_user_scram_credentials(SimpleNamespace(image=image), request, 0)  # type: ignore[arg-type]


def _apply(image: MetadataImage, records: tuple) -> MetadataImage:
    delta = MetadataDelta(image)
    for record in records:
        delta.replay(record)
    return delta.apply(image.offset + len(records), 1)


def test_an_upserted_user_logs_in_with_the_password_the_client_salted() -> None:
    result = _alter(EMPTY, upsertions=(_upsert("alice", "pw"),))
    assert [r.error_code for r in result.response.results] == [ErrorCode.none]
    [record] = result.records
    assert isinstance(record, UserScramCredential)
    image = _apply(EMPTY, result.records)

    def lookup(user: str, mechanism: str) -> ScramCredential | None:
        return image.scram_credentials.get((user, mechanism))

    listener = ListenerSecurity("L", SecurityProtocol.SASL_PLAINTEXT, mechanisms=("SCRAM-SHA-512",))
    server = SaslServer(listener, lookup)
    client = SaslClient(SaslCredentials("SCRAM-SHA-512", "alice", "pw"))
    request = client.handshake_request()
    outcome = server.receive(SimpleNamespace(api_key=17, api_version=1), request, 0)  # type: ignore[arg-type]
    assert outcome.verdict is Verdict.ANSWER
    step: object | None = client.first_request()
    while step is not None:
        outcome = server.receive(SimpleNamespace(api_key=36, api_version=2), step, 0)  # type: ignore[arg-type]
        assert outcome.verdict is Verdict.ANSWER, outcome.reason
        step = client.next_request(outcome.response)
    assert server.session is not None and server.session.principal == "User:alice"


def test_refusals_are_per_user_with_kafkas_codes() -> None:
    image = _apply(EMPTY, _alter(EMPTY, upsertions=(_upsert("bob", "pw"),)).records)
    result = _alter(
        image,
        deletions=(_delete("ghost"), _delete("bob"), _delete("")),
        upsertions=(
            _upsert("bob", "new"),  # deleted and upserted for the same mechanism
            _upsert("few", "pw", iterations=1000),
            _upsert("many", "pw", iterations=20000),
            _upsert("odd", "pw", mechanism=7),
            _upsert("fine", "pw"),
        ),
    )
    codes = {r.user: (r.error_code, r.error_message) for r in result.response.results}
    assert codes == {
        "ghost": (
            ErrorCode.resource_not_found,
            "Attempt to delete a user credential that does not exist",
        ),
        "bob": (
            ErrorCode.duplicate_resource,
            "A user credential cannot be altered twice in the same request",
        ),
        "": (ErrorCode.unacceptable_credential, "Username must not be empty"),
        "few": (ErrorCode.unacceptable_credential, "Iterations must be >= 4096"),
        "many": (ErrorCode.unacceptable_credential, "Iterations must be <= 16384"),
        "odd": (ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"),
        "fine": (ErrorCode.none, None),
    }
    assert [r.name for r in result.records] == ["fine"]
    removed = _alter(image, deletions=(_delete("bob"),)).records
    assert removed == (RemoveUserScramCredential("bob", "SCRAM-SHA-512"),)
    assert _apply(image, removed).scram_credentials == {}


def test_describe_lists_mechanisms_and_iterations_never_keys() -> None:
    image = _apply(
        EMPTY,
        _alter(EMPTY, upsertions=(_upsert("a", "x", 5000), _upsert("b", "y"))).records,
    )
    every: Any = asyncio.run(
        describe_user_scram_credentials(
            image, make(DESCRIBE.DescribeUserScramCredentialsRequest, {"users": None}), 0
        )
    )
    assert [
        (r.user, [(c.mechanism, c.iterations) for c in r.credential_infos]) for r in every.results
    ] == [("a", [(2, 5000)]), ("b", [(2, 4096)])]
    named = make(
        DESCRIBE.DescribeUserScramCredentialsRequest,
        {"users": tuple(make(DESCRIBE.UserName, {"name": n}) for n in ("a", "zed", "b", "b"))},
    )
    described: Any = asyncio.run(describe_user_scram_credentials(image, named, 0))
    codes = [(r.user, r.error_code) for r in described.results]
    assert codes == [
        ("a", ErrorCode.none),
        ("zed", ErrorCode.resource_not_found),
        ("b", ErrorCode.duplicate_resource),
    ]
