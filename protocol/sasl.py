"""SASL authentication of a Kafka connection, sans I/O: SaslHandshake (17) and
SaslAuthenticate (36) with KIP-152 framing, PLAIN (RFC 4616) and SCRAM-SHA-256/512
(RFC 5802/7677, through ``scramp``).

``SaslServer`` is one connection's authentication state on a listener. It sees every decoded
request before the APIs do: before authentication only ApiVersions, SaslHandshake and
SaslAuthenticate are served (anything else closes the connection, as Kafka's
SaslServerAuthenticator does); a failed login is answered with SASL_AUTHENTICATION_FAILED
after ``connection.failed.authentication.delay.ms`` and the connection is closed. With
``connections.max.reauth.ms`` the session lifetime goes back in the SaslAuthenticate answer
(KIP-368); a client re-authenticates with a new SaslHandshake on the same connection, as the
same principal; once the session has expired, any other request closes the connection.

``SaslClient`` is the peer's side: the tokens a broker or controller sends to log in.
Nothing here reads a socket or a clock: the connection code feeds it and the caller passes
the time, so both run in unit tests and under the simulator.

Legacy SASL (handshake v0 followed by raw, unframed tokens) is not served: SaslHandshake is
offered from v1, which librdkafka, the Java client, kafka-python and aiokafka all use.
"""

from __future__ import annotations

import enum
import hmac
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from protocol import wire
from protocol.api_keys import ApiKey
from protocol.entities import make, request_module, response_module
from protocol.security import PLAIN, SCRAM_MECHANISMS, ListenerSecurity, SaslCredentials

SASL_HANDSHAKE_KEY = ApiKey.SASL_HANDSHAKE
SASL_AUTHENTICATE_KEY = ApiKey.SASL_AUTHENTICATE
# The versions advertised: handshake v0-v1 and authenticate v0-v2, as Kafka. Only KIP-152's
# framing is served: a v0 handshake (the legacy flow, raw tokens after it) is refused with
# UNSUPPORTED_VERSION. v0 is advertised all the same because librdkafka derives its SASL
# feature from it (Debian's kcat refused to log in to a broker without it: "SASL Handshake
# not supported by broker"), and then sends v1.
SASL_APIS: dict[int, tuple[int, int]] = {SASL_HANDSHAKE_KEY: (0, 1), SASL_AUTHENTICATE_KEY: (0, 2)}
LEGACY_HANDSHAKE_VERSION = 0


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """One user's stored SCRAM credential (Kafka's UserScramCredentialRecord)."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


ScramLookup = Callable[[str, str], ScramCredential | None]  # (user, mechanism) -> credential


class _State(enum.Enum):
    HANDSHAKE = "handshake"
    AUTHENTICATE = "authenticate"
    AUTHENTICATED = "authenticated"


class Verdict(enum.Enum):
    """What the connection does with a request: let the APIs answer it, send this module's
    answer, send it and close after the failed-login delay, or close without answering."""

    PASS = "pass"
    ANSWER = "answer"
    FAIL = "fail"
    CLOSE = "close"


@dataclass(frozen=True, slots=True)
class Outcome:
    verdict: Verdict
    response: object | None = None
    reason: str = ""  # why a login failed or the connection closes (for the log)


@dataclass(frozen=True, slots=True)
class Session:
    principal: str  # "User:alice"
    mechanism: str
    expires_ms: int | None  # loop time (ms) the session ends; None: never


class SaslServer:
    """One connection's SASL state on a SASL listener."""

    def __init__(self, listener: ListenerSecurity, scram: ScramLookup) -> None:
        self._listener = listener
        self._scram_lookup = scram
        self._state = _State.HANDSHAKE
        self._mechanism: str | None = None
        self._scram: Any = None  # scramp.ScramServer mid-exchange
        self._username: str | None = None
        self.session: Session | None = None
        self.attempted_user: str | None = None  # the name a failed login gave (for the log)

    @property
    def authenticated(self) -> bool:
        return self.session is not None

    def receive(self, header: wire.RequestHeader, request: object, now_ms: int) -> Outcome:
        """The verdict on one decoded request arriving at ``now_ms`` (loop time)."""
        key = header.api_key
        if key == SASL_HANDSHAKE_KEY:
            return self._handshake(header, request)
        if key == SASL_AUTHENTICATE_KEY:
            return self._authenticate(header, request, now_ms)
        if key == ApiKey.API_VERSIONS:
            return Outcome(Verdict.PASS)
        session = self.session
        if session is None:
            return Outcome(Verdict.CLOSE, reason=f"api {key} before SASL authentication")
        if session.expires_ms is not None and now_ms >= session.expires_ms:
            return Outcome(Verdict.CLOSE, reason="the SASL session expired (re-authenticate)")
        if self._state is not _State.AUTHENTICATED:
            return Outcome(Verdict.CLOSE, reason=f"api {key} during SASL re-authentication")
        return Outcome(Verdict.PASS)

    def _handshake(self, header: wire.RequestHeader, request: object) -> Outcome:
        module: Any = response_module(SASL_HANDSHAKE_KEY, header.api_version)
        enabled = tuple(self._listener.mechanisms)
        if header.api_version == LEGACY_HANDSHAKE_VERSION:
            response = make(
                module.SaslHandshakeResponse,
                {"error_code": ErrorCode.unsupported_version, "mechanisms": enabled},
            )
            return Outcome(Verdict.FAIL, response, "SaslHandshake v0 (raw tokens) is not served")
        if self._state is _State.AUTHENTICATE:
            response = make(
                module.SaslHandshakeResponse,
                {"error_code": ErrorCode.illegal_sasl_state, "mechanisms": enabled},
            )
            return Outcome(Verdict.FAIL, response, "a second SaslHandshake mid-exchange")
        mechanism = str(getattr(request, "mechanism", ""))
        # KIP-368: a re-authentication keeps the mechanism it started with.
        session = self.session
        if mechanism not in enabled or (session is not None and mechanism != session.mechanism):
            response = make(
                module.SaslHandshakeResponse,
                {"error_code": ErrorCode.unsupported_sasl_mechanism, "mechanisms": enabled},
            )
            return Outcome(Verdict.FAIL, response, f"mechanism {mechanism!r} is not enabled")
        self._mechanism = mechanism
        self._state = _State.AUTHENTICATE
        self._scram = None
        response = make(
            module.SaslHandshakeResponse, {"error_code": ErrorCode.none, "mechanisms": enabled}
        )
        return Outcome(Verdict.ANSWER, response)

    def _authenticate(self, header: wire.RequestHeader, request: object, now_ms: int) -> Outcome:
        module: Any = response_module(SASL_AUTHENTICATE_KEY, header.api_version)
        if self._state is not _State.AUTHENTICATE:
            response = make(
                module.SaslAuthenticateResponse,
                {
                    "error_code": ErrorCode.illegal_sasl_state,
                    "error_message": "SaslAuthenticate before SaslHandshake",
                },
            )
            return Outcome(Verdict.FAIL, response, "SaslAuthenticate before SaslHandshake")
        token = bytes(getattr(request, "auth_bytes", b""))
        mechanism = self._mechanism
        assert mechanism is not None
        if mechanism == PLAIN:
            user = _check_plain(token, self._listener.plain_users)
            if isinstance(user, _Failure):
                return self._failed(module, user.user, user.reason)
            return self._succeeded(module, user, b"", now_ms)
        return self._scram_step(module, mechanism, token, now_ms)

    def _scram_step(self, module: Any, mechanism: str, token: bytes, now_ms: int) -> Outcome:
        from scramp import ScramException, ScramMechanism

        try:
            text = token.decode()
        except UnicodeDecodeError:
            return self._failed(module, self._username, "a SCRAM message that is not UTF-8")
        try:
            if self._scram is None:
                server = ScramMechanism(mechanism).make_server(self._scram_auth(mechanism))
                self._scram = server
                server.set_client_first(text)
                answer = server.get_server_first()
                response = make(
                    module.SaslAuthenticateResponse,
                    {"error_code": ErrorCode.none, "auth_bytes": answer.encode()},
                )
                return Outcome(Verdict.ANSWER, response)
            _accept_librdkafka_nonce(self._scram, text)
            self._scram.set_client_final(text)
            final = self._scram.get_server_final()
        except (ScramException, _UnknownUser) as error:
            return self._failed(module, self._username, f"SCRAM: {error}")
        assert self._username is not None
        return self._succeeded(module, self._username, final.encode(), now_ms)

    def _scram_auth(self, mechanism: str) -> Callable[[str], tuple[bytes, bytes, bytes, int]]:
        def lookup(username: str) -> tuple[bytes, bytes, bytes, int]:
            self._username = username
            credential = self._scram_lookup(username, mechanism)
            if credential is None:
                raise _UnknownUser(f"no {mechanism} credential for user {username!r}")
            return (
                credential.salt,
                credential.stored_key,
                credential.server_key,
                credential.iterations,
            )

        return lookup

    def _succeeded(self, module: Any, user: str, token: bytes, now_ms: int) -> Outcome:
        principal = f"User:{user}"
        mechanism = self._mechanism
        assert mechanism is not None
        if self.session is not None and self.session.principal != principal:
            # KIP-368: a re-authentication may not change who the connection is.
            return self._failed(module, user, f"re-authentication as {principal}")
        lifetime_ms = self._listener.max_reauth_ms
        expires_ms = now_ms + lifetime_ms if lifetime_ms > 0 else None
        self.session = Session(principal, mechanism, expires_ms)
        self._state = _State.AUTHENTICATED
        self._scram = None
        response = make(
            module.SaslAuthenticateResponse,
            {
                "error_code": ErrorCode.none,
                "auth_bytes": token,
                "session_lifetime": timedelta(milliseconds=lifetime_ms),
            },
        )
        return Outcome(Verdict.ANSWER, response)

    def _failed(self, module: Any, user: str | None, reason: str) -> Outcome:
        self.attempted_user = user
        response = make(
            module.SaslAuthenticateResponse,
            {
                "error_code": ErrorCode.sasl_authentication_failed,
                # Kafka's words; the reason stays in the server log.
                "error_message": (
                    "Authentication failed during authentication due to invalid credentials "
                    f"with SASL mechanism {self._mechanism}"
                ),
            },
        )
        return Outcome(Verdict.FAIL, response, reason)


class _UnknownUser(Exception):
    pass


def _accept_librdkafka_nonce(server: Any, client_final: str) -> None:
    """Let ``server`` (a scramp.ScramServer past its server-first message) take the nonce
    librdkafka before 2.6.1 sends in its client-final message.

    RFC 5802 has the client echo the server-first nonce (client nonce + server nonce) in
    ``r=``. librdkafka up to 2.6.0 (Debian's kcat links 2.0.2) puts its client nonce in
    front of that once more: ``r=<c-nonce><c-nonce><s-nonce>``, and signs the message so
    (librdkafka #4895). Kafka served it by not checking the nonce before 3.8.1, then with
    ``endsWith`` (CVE-2024-56128); scramp insists on equality, so such a client was refused
    with "Server nonce doesn't match".

    Exactly that one form is taken, never a looser match: the full server nonce of this
    exchange must be in it, preceded by this exchange's client nonce and nothing else, so
    the message still answers a fresh challenge (no replay), and the client proof is
    checked by scramp over the message as the client signed it (a wrong password still
    fails). Any other ``r=`` is left for scramp to refuse."""
    nonce = str(server.nonce)
    client_nonce = nonce.removesuffix(str(server.s_nonce))
    # client-final-message-without-proof = channel-binding "," nonce ["," extensions]
    fields = client_final.split(",", 2)
    if len(fields) >= 2 and fields[1] == f"r={client_nonce}{nonce}":
        server.nonce = type(server.nonce)(client_nonce + nonce)


@dataclass(frozen=True, slots=True)
class _Failure:
    user: str | None
    reason: str


def _check_plain(token: bytes, users: Mapping[str, str]) -> str | _Failure:
    """RFC 4616: ``[authzid] NUL authcid NUL passwd``; the authzid may only repeat the
    authcid (Kafka's PlainSaslServer)."""
    parts = token.split(b"\x00")
    if len(parts) != 3:
        return _Failure(None, "a PLAIN token that is not authzid NUL authcid NUL passwd")
    try:
        authzid, user, password = (part.decode() for part in parts)
    except UnicodeDecodeError:
        return _Failure(None, "a PLAIN token that is not UTF-8")
    if not user:
        return _Failure(None, "a PLAIN token without a user name")
    if authzid and authzid != user:
        return _Failure(user, f"authorization id {authzid!r} is not the user")
    expected = users.get(user)
    # Compared in constant time, and against something even for an unknown user.
    if not hmac.compare_digest((expected or "\x00").encode(), password.encode()) or (
        expected is None
    ):
        return _Failure(user, "wrong password or unknown user")
    return user


class SaslClient:
    """A peer logging in: the SaslHandshake request, then each SaslAuthenticate request
    answering the server's last token, until ``done``."""

    def __init__(self, credentials: SaslCredentials) -> None:
        self.credentials = credentials
        self.done = False
        self.session_lifetime_ms = 0  # the server's KIP-368 lifetime; 0: no expiry
        self._scram: Any = None
        if credentials.mechanism in SCRAM_MECHANISMS:
            from scramp import ScramClient

            self._scram = ScramClient(
                [credentials.mechanism], credentials.username, credentials.password
            )

    def handshake_request(self) -> object:
        module: Any = request_module(SASL_HANDSHAKE_KEY, 1)
        return make(module.SaslHandshakeRequest, {"mechanism": self.credentials.mechanism})

    def check_handshake(self, response: object) -> None:
        code = int(getattr(response, "error_code", 0))
        if code != 0:
            mechanisms = ",".join(getattr(response, "mechanisms", ()))
            raise SaslError(
                f"SaslHandshake for {self.credentials.mechanism} failed (error {code}; the "
                f"server offers {mechanisms or 'nothing'})"
            )

    def first_request(self) -> object:
        """The first SaslAuthenticate request."""
        if self._scram is None:
            creds = self.credentials
            token = b"\x00" + creds.username.encode() + b"\x00" + creds.password.encode()
        else:
            token = self._scram.get_client_first().encode()
        return self._authenticate(token)

    def next_request(self, response: object) -> object | None:
        """The next SaslAuthenticate request after ``response``; None once logged in.
        SaslError when the server refused."""
        code = int(getattr(response, "error_code", 0))
        if code != 0:
            message = getattr(response, "error_message", None) or ""
            raise SaslError(f"SASL authentication failed (error {code}): {message}")
        token = bytes(getattr(response, "auth_bytes", b""))
        lifetime = getattr(response, "session_lifetime", None)
        if isinstance(lifetime, timedelta):
            self.session_lifetime_ms = int(lifetime.total_seconds() * 1000)
        if self._scram is None:
            self.done = True
            return None
        from scramp import ScramException

        try:
            if self._scram.stage is not None and self._scram.stage.name == "get_client_first":
                self._scram.set_server_first(token.decode())
                return self._authenticate(self._scram.get_client_final().encode())
            self._scram.set_server_final(token.decode())
        except (ScramException, UnicodeDecodeError) as error:
            raise SaslError(f"SCRAM: the server's answer does not check out: {error}") from None
        self.done = True
        return None

    @staticmethod
    def _authenticate(token: bytes) -> object:
        module: Any = request_module(SASL_AUTHENTICATE_KEY, 2)
        return make(module.SaslAuthenticateRequest, {"auth_bytes": token})


class SaslError(ConnectionError):
    """This node could not log in to a peer (wrong credentials, mechanism not offered)."""
