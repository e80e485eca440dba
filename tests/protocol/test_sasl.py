"""The SASL exchange without sockets: our client against our server, PLAIN and SCRAM, the
gate before authentication, failures, and KIP-368 re-authentication."""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from kraft.scram_args import ScramArgumentError, parse_add_scram
from protocol import wire
from protocol.api_keys import ApiKey
from protocol.entities import make, request_module
from protocol.sasl import (
    SASL_AUTHENTICATE_KEY,
    SASL_HANDSHAKE_KEY,
    Outcome,
    SaslClient,
    SaslError,
    SaslServer,
    ScramCredential,
    Verdict,
)
from protocol.security import ListenerSecurity, SaslCredentials, SecurityProtocol, parse_jaas

METADATA_KEY = 3
USERS = {
    ("alice", "SCRAM-SHA-512"): parse_add_scram("SCRAM-SHA-512=[name=alice,password=alice-pw]"),
    ("bob", "SCRAM-SHA-256"): parse_add_scram("SCRAM-SHA-256=[name=bob,password=bob-pw]"),
}


def _lookup(user: str, mechanism: str) -> ScramCredential | None:
    record = USERS.get((user, mechanism))
    if record is None:
        return None
    return ScramCredential(record.salt, record.stored_key, record.server_key, record.iterations)


def _listener(**overrides: Any) -> ListenerSecurity:
    values: dict[str, Any] = {
        "name": "SASL_SSL",
        "protocol": SecurityProtocol.SASL_SSL,
        "mechanisms": ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
        "plain_users": {"carol": "carol-pw"},
    }
    return ListenerSecurity(**(values | overrides))


def _header(request: Any) -> wire.RequestHeader:
    return wire.RequestHeader(int(request.__api_key__), int(request.__version__), 1, "test")


def _metadata() -> tuple[wire.RequestHeader, object]:
    module: Any = request_module(METADATA_KEY, 12)
    request = make(module.MetadataRequest, {"topics": None})
    return _header(request), request


def _login(server: SaslServer, client: SaslClient, now_ms: int = 0) -> Outcome:
    """Run the client's exchange against the server; the last outcome."""
    request = client.handshake_request()
    outcome = server.receive(_header(request), request, now_ms)
    if outcome.verdict is not Verdict.ANSWER:
        return outcome
    client.check_handshake(outcome.response)
    next_request: object | None = client.first_request()
    while next_request is not None:
        outcome = server.receive(_header(next_request), next_request, now_ms)
        if outcome.verdict is not Verdict.ANSWER:
            return outcome
        next_request = client.next_request(outcome.response)
    return outcome


@pytest.mark.parametrize(
    ("mechanism", "user", "password"),
    [("SCRAM-SHA-512", "alice", "alice-pw"), ("SCRAM-SHA-256", "bob", "bob-pw")],
)
def test_scram_logs_in_and_the_client_checks_the_server(
    mechanism: str, user: str, password: str
) -> None:
    server = SaslServer(_listener(), _lookup)
    client = SaslClient(SaslCredentials(mechanism, user, password))
    outcome = _login(server, client)
    assert outcome.verdict is Verdict.ANSWER
    assert client.done
    assert server.session is not None
    assert server.session.principal == f"User:{user}"
    header, request = _metadata()
    assert server.receive(header, request, 1).verdict is Verdict.PASS


@pytest.mark.parametrize(
    ("mechanism", "user", "password"),
    [
        ("SCRAM-SHA-512", "alice", "wrong"),
        ("SCRAM-SHA-512", "mallory", "alice-pw"),
        ("SCRAM-SHA-256", "alice", "alice-pw"),  # alice has no SHA-256 credential
        ("PLAIN", "carol", "wrong"),
        ("PLAIN", "nobody", ""),
    ],
)
def test_a_failed_login_is_answered_with_the_error_and_then_closed(
    mechanism: str, user: str, password: str
) -> None:
    server = SaslServer(_listener(), _lookup)
    outcome = _login(server, SaslClient(SaslCredentials(mechanism, user, password)))
    assert outcome.verdict is Verdict.FAIL
    response: Any = outcome.response
    assert response.error_code == ErrorCode.sasl_authentication_failed
    assert response.error_message == (
        "Authentication failed during authentication due to invalid credentials with SASL "
        f"mechanism {mechanism}"
    )
    assert server.session is None
    header, request = _metadata()
    assert server.receive(header, request, 1).verdict is Verdict.CLOSE


def test_plain_logs_in_from_the_jaas_users() -> None:
    server = SaslServer(_listener(), _lookup)
    outcome = _login(server, SaslClient(SaslCredentials("PLAIN", "carol", "carol-pw")))
    assert outcome.verdict is Verdict.ANSWER
    assert server.session is not None and server.session.principal == "User:carol"


def test_plain_refuses_an_authorization_id_other_than_the_user() -> None:
    server = SaslServer(_listener(), _lookup)
    module: Any = request_module(SASL_HANDSHAKE_KEY, 1)
    handshake = make(module.SaslHandshakeRequest, {"mechanism": "PLAIN"})
    assert server.receive(_header(handshake), handshake, 0).verdict is Verdict.ANSWER
    module = request_module(SASL_AUTHENTICATE_KEY, 2)
    token = b"admin\x00carol\x00carol-pw"
    authenticate = make(module.SaslAuthenticateRequest, {"auth_bytes": token})
    outcome = server.receive(_header(authenticate), authenticate, 0)
    assert outcome.verdict is Verdict.FAIL
    assert "authorization id" in outcome.reason


def test_only_api_versions_and_sasl_before_authentication() -> None:
    server = SaslServer(_listener(), _lookup)
    header, request = _metadata()
    outcome = server.receive(header, request, 0)
    assert outcome.verdict is Verdict.CLOSE
    assert outcome.response is None
    module: Any = request_module(ApiKey.API_VERSIONS, 3)
    versions = make(module.ApiVersionsRequest, {})
    assert server.receive(_header(versions), versions, 0).verdict is Verdict.PASS


def test_an_unknown_mechanism_is_refused_with_the_enabled_ones() -> None:
    server = SaslServer(_listener(mechanisms=("SCRAM-SHA-512",)), _lookup)
    client = SaslClient(SaslCredentials("PLAIN", "carol", "carol-pw"))
    outcome = _login(server, client)
    assert outcome.verdict is Verdict.FAIL
    response: Any = outcome.response
    assert response.error_code == ErrorCode.unsupported_sasl_mechanism
    assert tuple(response.mechanisms) == ("SCRAM-SHA-512",)
    with pytest.raises(SaslError, match="SaslHandshake for PLAIN failed"):
        client.check_handshake(response)


def test_authenticate_before_handshake_is_an_illegal_state() -> None:
    server = SaslServer(_listener(), _lookup)
    module: Any = request_module(SASL_AUTHENTICATE_KEY, 2)
    request = make(module.SaslAuthenticateRequest, {"auth_bytes": b"\x00carol\x00carol-pw"})
    outcome = server.receive(_header(request), request, 0)
    assert outcome.verdict is Verdict.FAIL
    assert outcome.response.error_code == ErrorCode.illegal_sasl_state  # type: ignore[attr-defined]


def test_a_garbage_scram_message_fails_the_login() -> None:
    server = SaslServer(_listener(), _lookup)
    module: Any = request_module(SASL_HANDSHAKE_KEY, 1)
    handshake = make(module.SaslHandshakeRequest, {"mechanism": "SCRAM-SHA-512"})
    server.receive(_header(handshake), handshake, 0)
    module = request_module(SASL_AUTHENTICATE_KEY, 2)
    for token in (b"\xff\xfe", b"n,,x=1", b""):
        fresh = SaslServer(_listener(), _lookup)
        fresh.receive(_header(handshake), handshake, 0)
        request = make(module.SaslAuthenticateRequest, {"auth_bytes": token})
        assert fresh.receive(_header(request), request, 0).verdict is Verdict.FAIL, token


def test_a_session_expires_and_is_renewed_by_reauthentication() -> None:
    """KIP-368: the lifetime goes back in SaslAuthenticate; after it, requests close the
    connection unless the client logged in again (as the same principal)."""
    server = SaslServer(_listener(max_reauth_ms=1000), _lookup)
    outcome = _login(server, SaslClient(SaslCredentials("SCRAM-SHA-512", "alice", "alice-pw")))
    assert outcome.response.session_lifetime.total_seconds() == 1.0  # type: ignore[attr-defined]
    header, request = _metadata()
    assert server.receive(header, request, 999).verdict is Verdict.PASS
    assert server.receive(header, request, 1000).verdict is Verdict.CLOSE
    again = _login(server, SaslClient(SaslCredentials("SCRAM-SHA-512", "alice", "alice-pw")), 1500)
    assert again.verdict is Verdict.ANSWER
    assert server.receive(header, request, 2400).verdict is Verdict.PASS
    other = _login(server, SaslClient(SaslCredentials("PLAIN", "carol", "carol-pw")), 2500)
    assert other.verdict is Verdict.FAIL  # a re-authentication may not change mechanism


def test_reauthentication_as_another_user_is_refused() -> None:
    server = SaslServer(_listener(max_reauth_ms=1000), _lookup)
    _login(server, SaslClient(SaslCredentials("PLAIN", "carol", "carol-pw")))
    listener = _listener(max_reauth_ms=1000, plain_users={"carol": "c", "dave": "d"})
    server._listener = listener  # the same connection, now with dave known too
    outcome = _login(server, SaslClient(SaslCredentials("PLAIN", "dave", "d")), 10)
    assert outcome.verdict is Verdict.FAIL
    assert "re-authentication as User:dave" in outcome.reason


def test_the_client_refuses_a_server_that_cannot_prove_the_password() -> None:
    """SCRAM is mutual: a server answering with the wrong ServerSignature is not trusted."""
    forged = dict(USERS)
    real = USERS[("alice", "SCRAM-SHA-512")]
    salt = base64.b64encode(real.salt).decode()
    other = parse_add_scram(f"SCRAM-SHA-512=[name=alice,password=x,salt={salt}]")
    forged[("alice", "SCRAM-SHA-512")] = other

    def lookup(user: str, mechanism: str) -> ScramCredential | None:
        record = forged.get((user, mechanism))
        assert record is not None
        # The client's proof checks against StoredKey: give the real one, a wrong ServerKey.
        return ScramCredential(record.salt, real.stored_key, other.server_key, record.iterations)

    server = SaslServer(_listener(), lookup)
    client = SaslClient(SaslCredentials("SCRAM-SHA-512", "alice", "alice-pw"))
    with pytest.raises(SaslError, match="does not check out"):
        _login(server, client)


# What kcat 1.7.1 (librdkafka 2.0.2, Debian) sent to a broker, captured on the wire: ApiVersions
# v3, SaslHandshake v1, then SaslAuthenticate v0 carrying the SCRAM messages. Its client nonce
# is 32 characters of 0x2d-0x7e; its client-final ``r=`` is that nonce followed by the whole
# server-first nonce (librdkafka #4895, fixed in 2.6.1).
LIBRDKAFKA_2_0_2_NONCE = "6DeFGN{<Y@N8QgU65tT^-;qCkzbAKEmc"
SCRAM_USERS = [("SCRAM-SHA-512", "alice", "alice-pw"), ("SCRAM-SHA-256", "bob", "bob-pw")]


def _librdkafka_first(server: SaslServer, mechanism: str, user: str) -> str:
    """The exchange up to the server-first message, as librdkafka 2.0.2 runs it; that
    message."""
    module: Any = request_module(ApiKey.API_VERSIONS, 3)
    versions = make(
        module.ApiVersionsRequest,
        {"client_software_name": "librdkafka", "client_software_version": "2.0.2"},
    )
    assert server.receive(_header(versions), versions, 0).verdict is Verdict.PASS
    module = request_module(SASL_HANDSHAKE_KEY, 1)
    handshake = make(module.SaslHandshakeRequest, {"mechanism": mechanism})
    assert server.receive(_header(handshake), handshake, 0).verdict is Verdict.ANSWER
    first = _authenticate_v0(server, f"n,,n={user},r={LIBRDKAFKA_2_0_2_NONCE}".encode())
    assert first.verdict is Verdict.ANSWER
    return bytes(first.response.auth_bytes).decode()  # type: ignore[attr-defined]


def _authenticate_v0(server: SaslServer, token: bytes) -> Outcome:
    module: Any = request_module(SASL_AUTHENTICATE_KEY, 0)
    request = make(module.SaslAuthenticateRequest, {"auth_bytes": token})
    return server.receive(_header(request), request, 0)


def _client_final(
    mechanism: str, user: str, password: str, server_first: str, nonce: str
) -> tuple[str, bytes]:
    """librdkafka's client-final message with ``r=nonce``, signed over exactly what it
    sends (RFC 5802 section 3, as rdkafka_sasl_scram.c computes it); and the
    ServerSignature a genuine server answers with."""
    digest = "sha512" if mechanism == "SCRAM-SHA-512" else "sha256"
    fields = dict(item.split("=", 1) for item in server_first.split(","))
    salted = hashlib.pbkdf2_hmac(
        digest, password.encode(), base64.b64decode(fields["s"]), int(fields["i"])
    )
    client_key = hmac.digest(salted, b"Client Key", digest)
    stored_key = hashlib.new(digest, client_key).digest()
    without_proof = f"c=biws,r={nonce}"
    auth_message = f"n={user},r={LIBRDKAFKA_2_0_2_NONCE},{server_first},{without_proof}".encode()
    signature = hmac.digest(stored_key, auth_message, digest)
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    server_signature = hmac.digest(hmac.digest(salted, b"Server Key", digest), auth_message, digest)
    return f"{without_proof},p={base64.b64encode(proof).decode()}", server_signature


@pytest.mark.parametrize(("mechanism", "user", "password"), SCRAM_USERS)
@pytest.mark.parametrize("doubled", [True, False], ids=["librdkafka-2.0.2", "rfc5802"])
def test_librdkafka_2_0_2s_scram_exchange_logs_in(
    mechanism: str, user: str, password: str, doubled: bool
) -> None:
    """Its client-final nonce is the client nonce and then the server-first nonce; scramp
    alone refused that ("Server nonce doesn't match"), Kafka accepts it. The RFC's form
    (the server-first nonce alone) still logs in too."""
    server = SaslServer(_listener(), _lookup)
    server_first = _librdkafka_first(server, mechanism, user)
    server_nonce = server_first.split(",")[0].removeprefix("r=")
    assert server_nonce.startswith(LIBRDKAFKA_2_0_2_NONCE)
    assert len(server_nonce) > len(LIBRDKAFKA_2_0_2_NONCE)
    nonce = LIBRDKAFKA_2_0_2_NONCE + server_nonce if doubled else server_nonce
    final, server_signature = _client_final(mechanism, user, password, server_first, nonce)
    outcome = _authenticate_v0(server, final.encode())
    assert outcome.verdict is Verdict.ANSWER, outcome.reason
    response: Any = outcome.response
    assert response.error_code == ErrorCode.none
    assert bytes(response.auth_bytes) == b"v=" + base64.b64encode(server_signature)
    assert server.session is not None and server.session.principal == f"User:{user}"
    header, request = _metadata()
    assert server.receive(header, request, 1).verdict is Verdict.PASS


@pytest.mark.parametrize(("mechanism", "user", "password"), SCRAM_USERS)
@pytest.mark.parametrize(
    "nonce_of",
    [
        lambda c, s: "x" + s,  # Kafka's endsWith would take any prefix: not here
        lambda c, s: c + c + s,
        lambda c, s: c,
        lambda c, s: c + s[:-1],
        lambda c, s: c + s + "x",
        lambda c, s: s + c,
    ],
    ids=["other-prefix", "nonce-thrice", "client-nonce-only", "truncated", "suffix", "swapped"],
)
def test_a_client_final_nonce_other_than_the_two_forms_is_refused(
    mechanism: str, user: str, password: str, nonce_of: Any
) -> None:
    """Even correctly signed over what it sends, a client-final message whose nonce is not
    the server-first nonce (or librdkafka's client nonce + it) does not log in."""
    server = SaslServer(_listener(), _lookup)
    server_first = _librdkafka_first(server, mechanism, user)
    server_nonce = server_first.split(",")[0].removeprefix("r=")
    nonce = nonce_of(LIBRDKAFKA_2_0_2_NONCE, server_nonce)
    final, _ = _client_final(mechanism, user, password, server_first, nonce)
    outcome = _authenticate_v0(server, final.encode())
    assert outcome.verdict is Verdict.FAIL
    assert outcome.response.error_code == ErrorCode.sasl_authentication_failed  # type: ignore[attr-defined]
    assert "Server nonce doesn't match" in outcome.reason
    assert server.session is None


@pytest.mark.parametrize(("mechanism", "user", "password"), SCRAM_USERS)
def test_librdkafka_2_0_2s_form_with_a_wrong_password_or_unknown_user_is_refused(
    mechanism: str, user: str, password: str
) -> None:
    server = SaslServer(_listener(), _lookup)
    server_first = _librdkafka_first(server, mechanism, user)
    nonce = LIBRDKAFKA_2_0_2_NONCE + server_first.split(",")[0].removeprefix("r=")
    final, _ = _client_final(mechanism, user, "not-" + password, server_first, nonce)
    outcome = _authenticate_v0(server, final.encode())
    assert outcome.verdict is Verdict.FAIL
    assert outcome.response.error_code == ErrorCode.sasl_authentication_failed  # type: ignore[attr-defined]
    assert "The client keys don't match" in outcome.reason
    assert server.session is None
    stranger = SaslServer(_listener(), _lookup)
    module: Any = request_module(SASL_HANDSHAKE_KEY, 1)
    handshake = make(module.SaslHandshakeRequest, {"mechanism": mechanism})
    stranger.receive(_header(handshake), handshake, 0)
    first = _authenticate_v0(stranger, f"n,,n=mallory,r={LIBRDKAFKA_2_0_2_NONCE}".encode())
    assert first.verdict is Verdict.FAIL
    assert first.response.error_code == ErrorCode.sasl_authentication_failed  # type: ignore[attr-defined]


@pytest.mark.parametrize(("mechanism", "user", "password"), SCRAM_USERS)
def test_a_recorded_librdkafka_final_message_does_not_log_in_again(
    mechanism: str, user: str, password: str
) -> None:
    """Replay: the client-final message of one login, sent to a new exchange that starts
    with the same client-first message, answers the old server nonce and is refused."""
    first_server = SaslServer(_listener(), _lookup)
    server_first = _librdkafka_first(first_server, mechanism, user)
    nonce = LIBRDKAFKA_2_0_2_NONCE + server_first.split(",")[0].removeprefix("r=")
    final, _ = _client_final(mechanism, user, password, server_first, nonce)
    assert _authenticate_v0(first_server, final.encode()).verdict is Verdict.ANSWER
    second_server = SaslServer(_listener(), _lookup)
    assert _librdkafka_first(second_server, mechanism, user) != server_first
    outcome = _authenticate_v0(second_server, final.encode())
    assert outcome.verdict is Verdict.FAIL
    assert "Server nonce doesn't match" in outcome.reason
    assert second_server.session is None


def test_parse_add_scram_refuses_what_kafka_storage_refuses() -> None:
    for text in (
        "SCRAM-SHA-1=[name=a,password=b]",
        "SCRAM-SHA-512=[password=b]",
        "SCRAM-SHA-512=[name=a,password=b,iterations=10]",
        "SCRAM-SHA-512=[name=a,password=b,color=red]",
        "SCRAM-SHA-512 name=a",
    ):
        with pytest.raises(ScramArgumentError):
            parse_add_scram(text)


def test_jaas_values_keep_quotes_escapes_and_bare_words() -> None:
    jaas = parse_jaas(
        'org.apache.kafka.common.security.plain.PlainLoginModule required username="a b" '
        'password="p\\"q" user_x=plain;'
    )
    assert jaas.login_module == "org.apache.kafka.common.security.plain.PlainLoginModule"
    assert dict(jaas.options) == {"username": "a b", "password": 'p"q', "user_x": "plain"}


_HANDSHAKE: Any = request_module(SASL_HANDSHAKE_KEY, 1)
_AUTHENTICATE: Any = request_module(SASL_AUTHENTICATE_KEY, 2)
_steps = st.one_of(
    st.builds(
        lambda m: make(_HANDSHAKE.SaslHandshakeRequest, {"mechanism": m}),
        st.sampled_from(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI", ""]) | st.text(),
    ),
    st.builds(
        lambda t: make(_AUTHENTICATE.SaslAuthenticateRequest, {"auth_bytes": t}),
        st.binary(max_size=200)
        | st.sampled_from([b"n,,n=alice,r=abc", b"\x00carol\x00", b"c=biws,r=abc,p=AAAA"]),
    ),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_steps, max_size=8))
def test_hostile_exchanges_never_crash_and_never_log_in(steps: list[Any]) -> None:
    """Any sequence of handshakes and tokens from a client that knows no password: every
    step gets a verdict (no exception), nothing authenticates, and once a verdict closes
    the connection the state machine is not consulted again."""
    server = SaslServer(_listener(), _lookup)
    for request in steps:
        outcome = server.receive(_header(request), request, 0)
        assert outcome.verdict in (Verdict.ANSWER, Verdict.FAIL, Verdict.CLOSE)
        if outcome.verdict is not Verdict.ANSWER:
            break
    assert server.session is None
