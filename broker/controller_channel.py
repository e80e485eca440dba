"""The broker's path to the active controller (Kafka's NodeToControllerChannelManager).

Any voter may be the active controller, and which one changes with elections. The channel
sends to the last voter that answered, and moves on to the next voter when a connection
fails or the answer says NOT_CONTROLLER, backing off a little between attempts so an
election in progress is not hammered, until the request's deadline. Callers see one answer:
the controller's, or the last NOT_CONTROLLER when no controller could be reached in time
(Kafka's clients retry that), or TimeoutError when no voter answered at all.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
from collections.abc import Iterator
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from broker.client import ConnectionClosed, KafkaConnection
from protocol.connect import Connector

logger = logging.getLogger("broker.controller_channel")

# Kafka's socket.connection.setup.timeout.ms is 10 s; a controller channel fails over
# faster, since another voter may be the one to answer.
CONNECT_TIMEOUT_S = 2.0
BACKOFF_MIN_S = 0.05
BACKOFF_MAX_S = 1.0
_NOT_CONTROLLER = ErrorCode.not_controller


class ControllerSender(Protocol):
    """What request handlers and the lifecycle manager need of a controller channel."""

    async def send(self, request: object, timeout_s: float) -> object:
        """The active controller's answer; OSError (TimeoutError included) when none."""
        ...


def _item_error_codes(entity: object) -> Iterator[int]:
    """The error codes of every nested item of a response (not its top-level code), lazily:
    an answer of 200,000 topics is looked at only as far as its first code that tells."""
    for field in dataclasses.fields(entity):  # type: ignore[arg-type]
        value = getattr(entity, field.name)
        if isinstance(value, tuple):
            for item in value:
                if dataclasses.is_dataclass(item):
                    yield from _entity_error_codes(item)
        elif dataclasses.is_dataclass(value):
            yield from _entity_error_codes(value)


def _entity_error_codes(entity: object) -> Iterator[int]:
    own = getattr(entity, "error_code", None)
    if own is not None:
        yield int(own)
    yield from _item_error_codes(entity)


def is_not_controller(response: object) -> bool:
    """Whether a response of any API says "not the active controller": its top-level error
    code does, or every per-item error code does (CreateTopics and the like have no
    top-level code and answer per topic)."""
    if getattr(response, "error_code", None) == _NOT_CONTROLLER:
        return True
    seen = False
    for code in _item_error_codes(response):
        if code != _NOT_CONTROLLER:
            return False
        seen = True
    return seen


class ControllerChannel:
    """Requests to whichever voter is the active controller."""

    def __init__(
        self,
        voters: dict[int, tuple[str, int]],
        client_id: str,
        rng: random.Random,
        *,
        connector: Connector | None = None,
    ) -> None:
        assert voters, "a controller channel needs at least one voter"
        self._connector = connector  # the controller listener's TLS/SASL (None: plaintext)
        self._voters = dict(sorted(voters.items()))
        self._client_id = client_id
        self._rng = rng
        # No controller is known yet: start at a random voter so brokers spread their first
        # attempts instead of all knocking on the lowest id.
        self._controller_id = rng.choice(list(self._voters))
        self._connections: dict[int, KafkaConnection] = {}
        self._connecting: dict[int, asyncio.Lock] = {voter: asyncio.Lock() for voter in voters}
        self._closed = False

    @property
    def controller_id(self) -> int:
        """The voter the next request goes to first: the last one that answered."""
        return self._controller_id

    async def send(self, request: object, timeout_s: float) -> object:
        """The active controller's answer to ``request`` (a kio request entity).

        Retries other voters on connection errors and NOT_CONTROLLER until ``timeout_s``;
        then returns the last NOT_CONTROLLER answer if there was one, else raises
        TimeoutError.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        backoff_s = BACKOFF_MIN_S
        not_controller: object | None = None
        body: Any = request
        while not self._closed:
            voter = self._controller_id
            remaining_s = deadline - loop.time()
            if remaining_s <= 0:
                break
            try:
                connection = await self._connection(voter, remaining_s)
                response = await connection.request(request, deadline - loop.time())
            except OSError as error:
                logger.debug(
                    "controller %d unreachable for api %d: %r", voter, body.__api_key__, error
                )
            else:
                if not is_not_controller(response):
                    return response
                not_controller = response
            self._advance(voter)
            pause_s = min(backoff_s * (0.8 + 0.4 * self._rng.random()), deadline - loop.time())
            if pause_s > 0:
                await asyncio.sleep(pause_s)
            backoff_s = min(backoff_s * 2, BACKOFF_MAX_S)
        if self._closed:
            raise ConnectionClosed("controller channel closed")
        if not_controller is not None:
            return not_controller
        raise TimeoutError(f"no controller answered api {body.__api_key__} in {timeout_s}s")

    def _advance(self, failed: int) -> None:
        """Try the voter after ``failed`` next, unless another request already moved on."""
        if self._controller_id != failed:
            return
        ids = list(self._voters)
        self._controller_id = ids[(ids.index(failed) + 1) % len(ids)]

    async def _connection(self, voter: int, timeout_s: float) -> KafkaConnection:
        """An open connection to ``voter``, reusing the last one while it works.

        Bounded by CONNECT_TIMEOUT_S as well as by the caller's deadline, waiting for the
        voter's lock included: a connect hanging into a partition must not hold a heartbeat
        (4.5 s) behind a forwarded request's 30 s deadline until the broker is fenced."""
        async with asyncio.timeout(min(timeout_s, CONNECT_TIMEOUT_S)):
            return await self._open(voter)

    async def _open(self, voter: int) -> KafkaConnection:
        async with self._connecting[voter]:
            connection = self._connections.get(voter)
            if connection is not None and not connection.closed:
                return connection
            connection = KafkaConnection(self._client_id, connector=self._connector)
            host, port = self._voters[voter]
            await connection.connect(host, port, CONNECT_TIMEOUT_S)
            if self._closed:
                await connection.close()
                raise ConnectionClosed("controller channel closed")
            self._connections[voter] = connection
            return connection

    async def close(self) -> None:
        """Close every connection; requests in flight fail."""
        self._closed = True
        connections, self._connections = self._connections, {}
        for connection in connections.values():
            await connection.close()
