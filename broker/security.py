"""Authentication on a listener: who a connection is, and nothing served before it is known.

``authenticating`` wraps a listener's request handler for one connection. On a TLS listener
the principal is the client certificate's subject mapped by ``ssl.principal.mapping.rules``
(``User:ANONYMOUS`` without one); on a SASL listener a ``protocol.sasl.SaslServer`` sees
every request first, and only ApiVersions, SaslHandshake and SaslAuthenticate reach anything
before the login succeeds. A failed login is answered after
``connection.failed.authentication.delay.ms`` and the connection is closed; it is logged at
most once a minute per listener with the user name and the address, never the password.

The principal of the request being handled is in ``PRINCIPAL`` (a context variable, as
``CLIENT_HOST``: each connection runs in its own task), for the authorizer to come.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from log.rate_limited_log import RateLimitedLog
from protocol import wire
from protocol.api_keys import ApiKey
from protocol.api_table import BROKER, CLUSTER_ALTER, CLUSTER_DESCRIBE, Api, ApiRequest
from protocol.entities import make, response_module
from protocol.sasl import SASL_APIS, SaslServer, ScramLookup, Verdict
from protocol.security import ListenerSecurity
from protocol.server import CLIENT_HOST, CloseAfter, Handler
from protocol.tls import peer_principal

ANONYMOUS = "User:ANONYMOUS"
PRINCIPAL: contextvars.ContextVar[str] = contextvars.ContextVar("principal", default=ANONYMOUS)

logger = logging.getLogger("broker.security")
_limited = RateLimitedLog(logger)


def served_apis(
    listener: ListenerSecurity, supported: Mapping[int, tuple[int, int]]
) -> dict[int, tuple[int, int]]:
    """The API versions a listener decodes: its APIs, plus SASL's on a SASL listener."""
    versions = dict(supported)
    if listener.protocol.uses_sasl:
        versions.update(SASL_APIS)
    return versions


@dataclass(frozen=True, slots=True)
class Authenticated:
    """A connection's handler behind its authentication, and the largest frame it takes
    now (None: socket.request.max.bytes)."""

    handle: Handler
    frame_limit: Callable[[], int] | None = None


def authenticating(
    handle: Handler,
    listener: ListenerSecurity,
    writer: asyncio.StreamWriter,
    scram: ScramLookup,
    max_request_bytes: int,
) -> Authenticated | None:
    """``handle`` behind this connection's authentication; None when the connection must be
    closed before any request (a client certificate no mapping rule accepts). Before a SASL
    login, frames above ``listener.sasl_max_receive_bytes`` (Kafka's
    sasl.server.max.receive.size) close the connection unread, so a stranger cannot make the
    broker buffer socket.request.max.bytes."""
    loop = asyncio.get_running_loop()
    if listener.protocol.uses_tls:
        assert listener.tls is not None
        try:
            principal = peer_principal(
                writer.get_extra_info("ssl_object"), listener.tls.principal_rules
            )
        except ValueError as error:
            _limited.log(
                f"principal/{listener.name}",
                logging.INFO,
                "[SocketServer listener=%s] Closing connection from %s: %s",
                listener.name,
                writer.get_extra_info("peername"),
                error,
            )
            return None
        PRINCIPAL.set(principal)
    if not listener.protocol.uses_sasl:
        return Authenticated(handle)
    server = SaslServer(listener, scram)

    def frame_limit() -> int:
        if server.authenticated:
            return max_request_bytes
        return min(listener.sasl_max_receive_bytes, max_request_bytes)

    async def handle_authenticated(header: wire.RequestHeader, request: object) -> object | None:
        outcome = server.receive(header, request, int(loop.time() * 1000))
        if outcome.verdict is Verdict.PASS:
            response = await handle(header, request)
            if header.api_key == ApiKey.API_VERSIONS and response is not None:
                return _with_sasl_apis(response, header.api_version)
            return response
        if outcome.verdict is Verdict.ANSWER:
            if server.session is not None:
                PRINCIPAL.set(server.session.principal)
            return outcome.response
        _limited.log(
            f"sasl/{listener.name}",
            logging.INFO,
            "[SocketServer listener=%s] Failed authentication with %s (user %s): %s",
            listener.name,
            CLIENT_HOST.get(),
            server.attempted_user or "unknown",
            outcome.reason,
        )
        if outcome.verdict is Verdict.CLOSE or outcome.response is None:
            return None
        await asyncio.sleep(listener.failed_authentication_delay_ms / 1000)
        return CloseAfter(outcome.response)

    return Authenticated(handle_authenticated, frame_limit)


def _with_sasl_apis(response: Any, version: int) -> object:
    """An ApiVersions answer that also lists SaslHandshake and SaslAuthenticate (clients
    look there before they log in)."""
    keys = getattr(response, "api_keys", None)
    if keys is None:
        return response
    module: Any = response_module(ApiKey.API_VERSIONS, version)
    present = {int(item.api_key) for item in keys}
    extra = tuple(
        make(module.ApiVersion, {"api_key": key, "min_version": low, "max_version": high})
        for key, (low, high) in sorted(SASL_APIS.items())
        if key not in present
    )
    merged = tuple(sorted((*keys, *extra), key=lambda item: int(item.api_key)))
    return dataclasses.replace(response, api_keys=merged)


NO_AUTHORIZER = "No Authorizer is configured."


def security_disabled_response(api_key: int, version: int, request: Any) -> object:
    """Kafka's answer to the ACL APIs on a broker without an authorizer: SECURITY_DISABLED
    (54) for the request, each creation or each filter, with Kafka's message, so kafka-acls
    says what is missing instead of meeting a closed connection. (No authorizer is built
    yet: ``authorizer.class.name`` stops start-up.)"""
    module: Any = response_module(api_key, version)
    error = {"error_code": ErrorCode.security_disabled, "error_message": NO_AUTHORIZER}
    throttle = {"throttle_time": timedelta(0)}
    if api_key == ApiKey.DESCRIBE_ACLS:
        return make(module.DescribeAclsResponse, throttle | error | {"resources": ()})
    if api_key == ApiKey.CREATE_ACLS:
        results = tuple(make(module.AclCreationResult, error) for _ in request.creations)
        return make(module.CreateAclsResponse, throttle | {"results": results})
    assert api_key == ApiKey.DELETE_ACLS, api_key
    results = tuple(
        make(module.DeleteAclsFilterResult, error | {"matching_acls": ()}) for _ in request.filters
    )
    return make(module.DeleteAclsResponse, throttle | {"filter_results": results})


async def _security_disabled(request: ApiRequest) -> object:
    return security_disabled_response(request.header.api_key, request.api_version, request.body)


# The ACL APIs' entries on the client listeners, with Kafka's authorization for them.
ACL_APIS = (
    Api(ApiKey.DESCRIBE_ACLS, (1, 3), _security_disabled, BROKER, (CLUSTER_DESCRIBE,)),
    Api(ApiKey.CREATE_ACLS, (1, 3), _security_disabled, BROKER, (CLUSTER_ALTER,)),
    Api(ApiKey.DELETE_ACLS, (1, 3), _security_disabled, BROKER, (CLUSTER_ALTER,)),
)
