"""A transaction's markers to its partitions' leaders (Kafka's TransactionMarkerChannelManager).

Once a transaction is PrepareCommit or PrepareAbort in ``__transaction_state``, the
coordinator asks the leader of every partition in it to append the COMMIT or ABORT marker,
with WriteTxnMarkers (v1) over the brokers' inter-broker listener, itself included. A
partition whose answer is retriable (its leader moved, its ISR is short, a connection
failed) is asked again after a backoff, at whatever leader the latest metadata names: a
marker is idempotent at the partition (one transaction per producer id and epoch can be open
there), so asking twice is safe. A partition whose topic was deleted needs no marker, nor
does one whose log cannot hold markers (UNSUPPORTED_FOR_MESSAGE_FORMAT, as Kafka). An
answer saying this coordinator is stale (TRANSACTION_COORDINATOR_FENCED,
INVALID_PRODUCER_EPOCH) stops the sending: the coordinator that fenced it finishes the work.

One request per leader and transaction; Kafka batches several transactions' markers into
one request per broker, which changes nothing a client can see.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from broker.client import KafkaConnection
from broker.txn.state import TopicPartition, TxnMetadata, TxnState
from log.rate_limited_log import RateLimitedLog
from metadata.image import MetadataImage
from protocol.api_keys import ApiKey
from protocol.connect import Connector
from protocol.entities import make, request_module

logger = logging.getLogger("broker.txn.markers")


WRITE_TXN_MARKERS_VERSION = 1
CONNECT_TIMEOUT_S = 5.0
REQUEST_TIMEOUT_S = 30.0  # Kafka's request.timeout.ms
RETRIABLE = frozenset(
    {
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.not_leader_or_follower,
        ErrorCode.not_enough_replicas,
        ErrorCode.not_enough_replicas_after_append,
        ErrorCode.request_timed_out,
        ErrorCode.kafka_storage_error,
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.coordinator_not_available,
        ErrorCode.not_coordinator,
    }
)
FENCED = frozenset({ErrorCode.transaction_coordinator_fenced, ErrorCode.invalid_producer_epoch})

Endpoint = Callable[[int], tuple[str, int] | None]


class MarkerSender:
    """One broker's marker requests, over one connection per destination broker."""

    def __init__(
        self,
        node_id: int,
        image: Callable[[], MetadataImage | None],
        endpoint: Endpoint,
        backoff_s: float,
        *,
        connector: Connector | None = None,
    ) -> None:
        self.node_id = node_id
        # How the leaders' inter-broker listener is secured (TLS, SASL); None: plaintext.
        self._connector = connector
        self._image = image
        self._endpoint = endpoint
        self._backoff_s = backoff_s
        self._connections: dict[int, KafkaConnection] = {}
        self._connecting: dict[int, asyncio.Lock] = {}
        self._failures = RateLimitedLog(logger)

    async def close(self) -> None:
        for connection in self._connections.values():
            await connection.close()
        self._connections.clear()

    async def send(
        self, meta: TxnMetadata, coordinator_epoch: int, current: Callable[[], bool]
    ) -> bool:
        """Until every partition of the prepared transaction has its marker: True; False
        when ``current`` says this coordinator no longer holds the transaction, or a
        partition answers that it is fenced."""
        assert meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT), meta.state
        committed = meta.state is TxnState.PREPARE_COMMIT
        remaining = set(meta.partitions)
        while remaining:
            if not current():
                return False
            image = self._image()
            by_leader: dict[int, list[TopicPartition]] = {}
            for where in sorted(remaining):
                topic = image.topics.get(where[0]) if image is not None else None
                if image is not None and (topic is None or where[1] not in topic.partitions):
                    remaining.discard(where)  # deleted: nothing left to mark
                    continue
                leader = topic.partitions[where[1]].leader if topic is not None else -1
                if leader >= 0:
                    by_leader.setdefault(leader, []).append(where)
            answers = await asyncio.gather(
                *(
                    self._send_to(leader, meta, committed, coordinator_epoch, partitions)
                    for leader, partitions in by_leader.items()
                )
            )
            for answer in answers:
                for where, error in answer.items():
                    if error is ErrorCode.none:
                        remaining.discard(where)
                    elif error is ErrorCode.unsupported_for_message_format:
                        logger.warning(
                            "[TransactionMarkerChannelManager id=%d] %s-%d cannot hold the "
                            "marker of transactional id %s: skipped",
                            self.node_id,
                            *where,
                            meta.transactional_id,
                        )
                        remaining.discard(where)
                    elif error in FENCED:
                        logger.info(
                            "[TransactionMarkerChannelManager id=%d] Markers of %s stopped: "
                            "%s-%d answered %s",
                            self.node_id,
                            meta.transactional_id,
                            *where,
                            error.name,
                        )
                        return False
                    elif error not in RETRIABLE:
                        self._failures.log(
                            error.name,
                            logging.WARNING,
                            "Marker of %s for %s-%d: %s, retrying",
                            meta.transactional_id,
                            *where,
                            error.name,
                        )
            if remaining:
                await asyncio.sleep(self._backoff_s)
        return True

    async def _send_to(
        self,
        leader: int,
        meta: TxnMetadata,
        committed: bool,
        coordinator_epoch: int,
        partitions: list[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        """One leader's answer per partition; a failed request is REQUEST_TIMED_OUT for all."""
        module: Any = request_module(ApiKey.WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION)
        by_topic: dict[str, list[int]] = {}
        for topic, index in partitions:
            by_topic.setdefault(topic, []).append(index)
        marker = make(
            module.WritableTxnMarker,
            {
                "producer_id": meta.producer_id,
                "producer_epoch": meta.producer_epoch,
                "transaction_result": committed,
                "topics": tuple(
                    make(
                        module.WritableTxnMarkerTopic,
                        {"name": name, "partition_indexes": tuple(indexes)},
                    )
                    for name, indexes in by_topic.items()
                ),
                "coordinator_epoch": coordinator_epoch,
            },
        )
        request = make(module.WriteTxnMarkersRequest, {"markers": (marker,)})
        failed = dict.fromkeys(partitions, ErrorCode.request_timed_out)
        try:
            connection = await self._connection(leader)
            response: Any = await connection.request(request, REQUEST_TIMEOUT_S)
        except OSError as error:  # ConnectionError and TimeoutError included
            self._failures.log(
                f"broker-{leader}",
                logging.WARNING,
                "WriteTxnMarkers to broker %d failed: %r",
                leader,
                error,
            )
            self._connections.pop(leader, None)
            return failed
        answer: dict[TopicPartition, ErrorCode] = {}
        for result in response.markers:
            if result.producer_id != meta.producer_id:
                continue
            for topic in result.topics:
                for partition in topic.partitions:
                    answer[(topic.name, partition.partition_index)] = ErrorCode(
                        partition.error_code
                    )
        return {where: answer.get(where, ErrorCode.request_timed_out) for where in partitions}

    async def _connection(self, broker_id: int) -> KafkaConnection:
        lock = self._connecting.setdefault(broker_id, asyncio.Lock())
        async with lock:
            connection = self._connections.get(broker_id)
            if connection is not None and not connection.closed:
                return connection
            address = self._endpoint(broker_id)
            if address is None:
                raise ConnectionError(f"broker {broker_id} has no endpoint in the image")
            connection = KafkaConnection(
                f"broker-{self.node_id}-txn-markers", connector=self._connector
            )
            await connection.connect(*address, CONNECT_TIMEOUT_S)
            self._connections[broker_id] = connection
            return connection
