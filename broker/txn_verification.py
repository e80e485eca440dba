"""KIP-890 part 1: before a producer's first transactional batch on a partition, the leader
asks the producer's transaction coordinator whether the partition is in its open
transaction (Kafka's AddPartitionsToTxnManager, with AddPartitionsToTxn v4 ``verify_only``).

Without it a late or stray transactional write (a zombie's retry, a produce that raced an
abort, a client bug that skipped AddPartitionsToTxn) opens a transaction the coordinator
knows nothing of: no marker will ever close it, and the partition's last stable offset
stops there for good (a hanging transaction). With it the batch is refused:

- the coordinator says the partition is not in the transaction: INVALID_TXN_STATE (Kafka's
  answer to Produce v9, "Partition was not added to the transaction");
- the coordinator cannot say now (COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR,
  COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS, no leader, no connection):
  NOT_ENOUGH_REPLICAS, which the producer retries, as Kafka maps them;
- the coordinator fences the producer: INVALID_PRODUCER_EPOCH for its PRODUCER_FENCED
  (Kafka's AddPartitionsToTxnManager: the answer the log gives an older epoch's batch),
  INVALID_PRODUCER_EPOCH and INVALID_PRODUCER_ID_MAPPING as they are.

The coordinator of a transactional id is the leader of partition
``abs(String.hashCode(id)) % partitions`` of ``__transaction_state`` (Kafka's
``Utils.abs``: MIN_VALUE maps to 0). One connection per coordinator broker, opened when
first needed; one request per verification (Kafka batches them per broker: fewer requests,
the same answers). ``transaction.partition.verification.enable`` (default true) turns it
off. KIP-890 part 2: for a Produce v12 (a transaction version 2 client, which sends no
AddPartitionsToTxn) the leader asks the coordinator to add the partition (v5,
``verify_only`` false) instead, always: the same answers and errors.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from broker.client import KafkaConnection
from metadata.image import MetadataImage
from metadata.records import NO_LEADER
from protocol.api_keys import ApiKey
from protocol.connect import Connector
from protocol.entities import make, request_module

logger = logging.getLogger("broker.txn_verification")

ADD_PARTITIONS_TO_TXN_VERSION = 4
ADD_PARTITIONS_TO_TXN_TV2_VERSION = 5  # KIP-890 part 2: add for the client (Produce v12)
TRANSACTION_STATE_TOPIC = "__transaction_state"
CONNECT_TIMEOUT_S = 5.0
REQUEST_TIMEOUT_S = 30.0  # Kafka's request.timeout.ms
_INT32_MIN = -(1 << 31)
# What the producer may retry: the coordinator could not answer now (Kafka maps these to
# NOT_ENOUGH_REPLICAS for the Produce answer).
_UNAVAILABLE = frozenset(
    {
        ErrorCode.coordinator_not_available,
        ErrorCode.not_coordinator,
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.concurrent_transactions,
        ErrorCode.request_timed_out,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.operation_not_attempted,
    }
)

Endpoint = Callable[[int], tuple[str, int] | None]


def java_string_hash(text: str) -> int:
    """Java's String.hashCode: over UTF-16 code units, as a signed 32-bit int."""
    data = text.encode("utf-16-be")
    value = 0
    for index in range(0, len(data), 2):  # bounded by the id's length
        value = (31 * value + int.from_bytes(data[index : index + 2], "big")) & 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def coordinator_partition(transactional_id: str, partitions: int) -> int:
    """The ``__transaction_state`` partition of ``transactional_id`` (Kafka's partitionFor)."""
    value = java_string_hash(transactional_id)
    return (0 if value == _INT32_MIN else abs(value)) % partitions


class TxnVerifier:
    """Asks transaction coordinators whether partitions are in producers' transactions."""

    def __init__(
        self,
        node_id: int,
        image: Callable[[], MetadataImage | None],
        endpoint: Endpoint,
        *,
        request_timeout_s: float = REQUEST_TIMEOUT_S,
        connector: Connector | None = None,
    ) -> None:
        self._node_id = node_id
        # How brokers reach each other (TLS and SASL on a secured inter-broker listener), as
        # the replica fetchers and the marker sender connect.
        self._connector = connector
        self._image = image
        self._endpoint = endpoint
        self._request_timeout_s = request_timeout_s
        self._connections: dict[int, KafkaConnection] = {}
        self._connecting: dict[int, asyncio.Lock] = {}

    async def verify(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        topic: str,
        partition: int,
        *,
        add: bool = False,
    ) -> ErrorCode:
        """NONE when the coordinator says ``topic``-``partition`` is in the producer's open
        transaction (``add``: once it added it, AddPartitionsToTxn v5 not verify-only, for a
        Produce v12); otherwise the error to answer the Produce with (module docstring)."""
        coordinator = self._coordinator(transactional_id)
        if coordinator is None:
            return ErrorCode.not_enough_replicas
        version = ADD_PARTITIONS_TO_TXN_TV2_VERSION if add else ADD_PARTITIONS_TO_TXN_VERSION
        module: Any = request_module(ApiKey.ADD_PARTITIONS_TO_TXN, version)
        request = make(
            module.AddPartitionsToTxnRequest,
            {
                "transactions": (
                    make(
                        module.AddPartitionsToTxnTransaction,
                        {
                            "transactional_id": transactional_id,
                            "producer_id": producer_id,
                            "producer_epoch": producer_epoch,
                            "verify_only": not add,
                            "topics": (
                                make(
                                    module.AddPartitionsToTxnTopic,
                                    {"name": topic, "partitions": (partition,)},
                                ),
                            ),
                        },
                    ),
                ),
            },
        )
        try:
            connection = await self._connection(coordinator)
            response: Any = await connection.request(request, self._request_timeout_s)
        except OSError as error:  # ConnectionClosed and TimeoutError are OSErrors
            logger.info(
                "[TxnVerifier id=%d] no answer from coordinator %d for %r: %r",
                self._node_id,
                coordinator,
                transactional_id,
                error,
            )
            return ErrorCode.not_enough_replicas
        return _answer(response, topic, partition)

    def _coordinator(self, transactional_id: str) -> int | None:
        image = self._image()
        found = image.topics.get(TRANSACTION_STATE_TOPIC) if image is not None else None
        if found is None or not found.partitions:
            return None
        registration = found.partitions.get(
            coordinator_partition(transactional_id, len(found.partitions))
        )
        if registration is None or registration.leader == NO_LEADER:
            return None
        return registration.leader

    async def _connection(self, broker_id: int) -> KafkaConnection:
        lock = self._connecting.setdefault(broker_id, asyncio.Lock())
        async with lock:  # one connection per broker, however many produces ask at once
            connection = self._connections.get(broker_id)
            if connection is not None and not connection.closed:
                return connection
            address = self._endpoint(broker_id)
            if address is None:
                raise ConnectionError(f"broker {broker_id} has no listener in the metadata")
            connection = KafkaConnection(
                f"broker-{self._node_id}-txn-verification", connector=self._connector
            )
            await connection.connect(*address, CONNECT_TIMEOUT_S)
            self._connections[broker_id] = connection
            return connection

    async def close(self) -> None:
        connections, self._connections = self._connections, {}
        for connection in connections.values():
            await connection.close()


def _answer(response: Any, topic: str, partition: int) -> ErrorCode:
    code = ErrorCode(response.error_code)
    if code == ErrorCode.none:
        code = ErrorCode.unknown_server_error  # unless the answer names the partition
        for txn in response.results_by_transaction:
            for result in txn.topic_results:
                for answer in result.results_by_partition:
                    if result.name == topic and answer.partition_index == partition:
                        code = ErrorCode(answer.partition_error_code)
    if code == ErrorCode.none:
        return code
    if code in _UNAVAILABLE:
        return ErrorCode.not_enough_replicas
    if code == ErrorCode.producer_fenced:
        return ErrorCode.invalid_producer_epoch
    return code
