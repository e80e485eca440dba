"""Forwarding in an Envelope (KIP-590), both ends: the broker's (Kafka's ForwardingManager)
and the controller's (ControllerApis.handleEnvelopeRequest).

The broker wraps a client's admin request (broker/forwarding.py lists them) with the
client's principal and address (protocol/envelope.py) and sends it to the active controller
over its forwarding channel. The controller authorizes the envelope as a CLUSTER_ACTION of
the broker's principal (its table entry's check, broker/authorization.py), opens it and
hands the inner request to its own table as the client: the same authorization a client
of the controller listener gets, and the client's ``controller_mutation_rate``
(broker/quotas.py ``charging_mutations``), so a client's admin requests share one budget
whichever broker they reach. The inner response, throttle time included, goes back inside
the EnvelopeResponse; the broker mutes the client's connection for that throttle time.

Envelope-level errors reach the client as Kafka's ForwardingManager passes them: an
envelope NOT_CONTROLLER is retried by the channel on the next voter and, if no controller
takes it in time, answered NOT_CONTROLLER for every item (the client retries); any other
(CLUSTER_AUTHORIZATION_FAILED for a broker whose principal lacks CLUSTER_ACTION, a request
the controller could not open) is a misconfiguration of the cluster, not the client's
doing, and is answered UNKNOWN_SERVER_ERROR for every item, never success.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Generator
from typing import Any, TypeVar

from kio.schema.envelope.v0.response import EnvelopeResponse
from kio.schema.errors import ErrorCode

from broker.client import encoded_in_slices
from broker.controller_channel import ControllerSender, is_not_controller
from broker.forwarding import FORWARDED_APIS, forwarded_error_response
from protocol import wire
from protocol.api_keys import ApiKey
from protocol.api_table import CLUSTER_ACTION, CONTROLLER, Api, ApiRequest, ServedApis
from protocol.envelope import (
    ENVELOPE_VERSION,
    EnvelopeError,
    envelope_request,
    envelope_response,
    inner_response_steps,
    open_envelope_steps,
    response_data_parts,
)
from protocol.principal import CLIENT_HOST, FORWARDED, PRINCIPAL
from protocol.server import NO_RESPONSE
from protocol.turns import ENCODE_SLICE_ENTITIES

logger = logging.getLogger("broker.envelope")
_T = TypeVar("_T")


async def _stepped(steps: Generator[int, None, _T]) -> _T:
    """Run a decoding generator, giving the loop a turn between its steps (issue 22)."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            result: _T = done.value
            return result
        await asyncio.sleep(0)


# ---- the broker's end ------------------------------------------------------------------
async def forward_in_envelope(
    channel: ControllerSender, request: ApiRequest, timeout_s: float
) -> object:
    """The controller's answer to the client's ``request``, forwarded in an Envelope as the
    client's principal and address; OSError (TimeoutError included) when no controller
    answered, as ``channel.send``."""
    body: Any = request.body
    header = request.header
    assert header.api_key in FORWARDED_APIS, f"api {header.api_key} is not forwarded"
    envelope = envelope_request(
        header, body, request.principal, request.client_host, await encoded_in_slices(body)
    )
    answer: Any = await channel.send(envelope, timeout_s)
    assert isinstance(answer, EnvelopeResponse)
    code = int(answer.error_code)
    if code == ErrorCode.none:
        try:
            return await _stepped(inner_response_steps(answer, header))
        except (wire.FrameError, ValueError) as error:
            logger.warning(
                "The controller's answer to api %d unreadable: %s", header.api_key, error
            )
            return forwarded_error_response(
                body, ErrorCode.unknown_server_error, "The controller's answer was unreadable"
            )
    name = ErrorCode(code).name.upper()
    if code == ErrorCode.not_controller:
        return forwarded_error_response(body, code, "No active controller took the request")
    logger.warning(
        "The controller refused the envelope of api %d from %s: %s",
        header.api_key,
        request.principal,
        name,
    )
    message = f"The controller refused the forwarded request ({name})"
    return forwarded_error_response(body, ErrorCode.unknown_server_error, message)


# ---- the controller's end --------------------------------------------------------------
def envelope_api(table: Callable[[], ServedApis]) -> Api:
    """The controller listener's Envelope entry: CLUSTER_ACTION on the cluster (refused
    CLUSTER_AUTHORIZATION_FAILED by the table's guard), the inner request handled by
    ``table()`` (the controller listener's, guarded and charged) as the forwarded client."""

    async def handle(request: ApiRequest) -> object:
        served = table()
        try:
            forwarded = await _stepped(
                open_envelope_steps(request.body, FORWARDED_APIS, served.versions)
            )
        except EnvelopeError as error:
            logger.info(
                "[ControllerApis] Refused an envelope from %s: %s", request.principal, error
            )
            return envelope_response(None, error.error_code)
        tokens = (
            PRINCIPAL.set(forwarded.principal),
            CLIENT_HOST.set(f"/{forwarded.client_host}"),
            FORWARDED.set(True),
        )
        try:
            response = await served.handle(forwarded.header, forwarded.body)
        finally:
            FORWARDED.reset(tokens[2])
            CLIENT_HOST.reset(tokens[1])
            PRINCIPAL.reset(tokens[0])
        if response is None or response is NO_RESPONSE:
            # Every forwarded API answers in its own shape; nothing to wrap is a bug here.
            logger.error("[ControllerApis] No answer to forwarded api %d", forwarded.header.api_key)
            return envelope_response(None, ErrorCode.unknown_server_error)
        chunks: list[bytes] = []
        for chunk in response_data_parts(forwarded.header, response, ENCODE_SLICE_ENTITIES):
            if chunks:
                await asyncio.sleep(0)  # a turn between slices; a small answer takes none
            chunks.append(chunk)
        # A controller that is not the active one answers every item NOT_CONTROLLER; said on
        # the envelope too, the broker's channel moves on to the next voter, as it does for
        # a request forwarded bare.
        code = ErrorCode.not_controller if is_not_controller(response) else ErrorCode.none
        return envelope_response(b"".join(chunks), code)

    versions = (ENVELOPE_VERSION, ENVELOPE_VERSION)
    return Api(ApiKey.ENVELOPE, versions, handle, CONTROLLER, (CLUSTER_ACTION,))
