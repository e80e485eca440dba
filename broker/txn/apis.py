"""The transaction APIs' request and response shapes around the TransactionCoordinator (the
transaction part of Kafka's KafkaApis): InitProducerId with a transactional id,
AddPartitionsToTxn (v0-v3, the client's; v4, a broker's batch, with verify-only for KIP-890
part 1), AddOffsetsToTxn, EndTxn, TxnOffsetCommit (to the
group coordinator), DescribeTransactions and ListTransactions.

WriteTxnMarkers is the partition side's (broker/txn_markers.py, KafkaApis' table entry): it
appends the marker to every partition, ``__consumer_offsets`` ones included, and hands
those to the group coordinator (``GroupCoordinator.complete_transaction``), which applies or
drops the producer's pending offsets.

As Kafka does, PRODUCER_FENCED goes to clients too old to know it (InitProducerId before v4,
the others before v2) as INVALID_PRODUCER_EPOCH. TxnOffsetCommit never answers
PRODUCER_FENCED: a fenced epoch there is INVALID_PRODUCER_EPOCH at every version, as in
Kafka, whose group coordinator learns it from the log or from transaction verification.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from broker.group.coordinator import OFFSETS_TOPIC, GroupCoordinator
from broker.group.shard import offset_commits
from broker.txn.coordinator import TransactionCoordinator
from broker.txn.state import TV1, TV2, TxnMetadata, TxnState
from log.clock import WallClock
from metadata.image import MetadataImage
from protocol.api_keys import ApiKey
from protocol.api_table import (
    BROKER,
    CLUSTER_ACTION,
    GROUP_READ,
    TOPIC_DESCRIBE,
    TOPIC_READ,
    TOPIC_WRITE,
    TRANSACTIONAL_ID_DESCRIBE,
    TRANSACTIONAL_ID_WRITE,
    Api,
    ApiRequest,
)
from protocol.entities import make, response_module
from protocol.turns import Turns

NO_THROTTLE = timedelta(0)
END_TXN_TV2_VERSION = 5  # KIP-890 part 2: a client of transaction version 2
TXN_OFFSET_COMMIT_TV2_VERSION = 5  # the group coordinator adds the offsets partition
ADD_PARTITIONS_TV2_VERSION = 5  # a leader adding for Produce v12 (transaction version 2)


def _fenced_for(error: ErrorCode, version: int, since: int) -> ErrorCode:
    if error is ErrorCode.producer_fenced and version < since:
        return ErrorCode.invalid_producer_epoch
    return error


# (transactional id, producer id, epoch, topic, partition) -> NONE once in the transaction.
AddToTransaction = Callable[[str, int, int, str, int], Awaitable[ErrorCode]]
# What a TxnOffsetCommit client is answered when the add could not be made now (Kafka's
# coordinator runtime normalises the produce-side errors the same way), or was refused: a
# fenced epoch is INVALID_PRODUCER_EPOCH, as Kafka's AddPartitionsToTxnManager answers it.
_ADD_ERRORS = {
    ErrorCode.not_enough_replicas: ErrorCode.coordinator_not_available,
    ErrorCode.not_leader_or_follower: ErrorCode.not_coordinator,
    ErrorCode.producer_fenced: ErrorCode.invalid_producer_epoch,
}


class TxnApis:
    """One broker's transaction request handlers; ``apis`` are their table entries."""

    def __init__(
        self,
        coordinator: TransactionCoordinator,
        groups: GroupCoordinator,
        image: Callable[[], MetadataImage],
        clock: WallClock,
        add_to_transaction: AddToTransaction | None = None,
    ) -> None:
        self.coordinator = coordinator
        self._groups = groups
        self._image = image
        self._clock = clock
        # TxnOffsetCommit v5 (TV2): the offsets partition is added for the client, through
        # the transactional id's coordinator wherever it is (broker/txn_verification.py).
        self._add_to_transaction = add_to_transaction

    def apis(self) -> list[Api]:
        """The transaction APIs' entries in a client listener's table (InitProducerId is
        KafkaApis', which hands a request with a transactional id to ``init_producer_id``)."""
        return [
            Api(
                ApiKey.ADD_PARTITIONS_TO_TXN,
                (0, 5),
                self._handler(self._add_partitions),
                BROKER,
                (TRANSACTIONAL_ID_WRITE, TOPIC_WRITE, CLUSTER_ACTION),
            ),
            Api(
                ApiKey.ADD_OFFSETS_TO_TXN,
                (0, 3),
                self._handler(self._add_offsets),
                BROKER,
                (TRANSACTIONAL_ID_WRITE, GROUP_READ),
            ),
            Api(ApiKey.END_TXN, (0, 5), self._end_txn, BROKER, (TRANSACTIONAL_ID_WRITE,)),
            Api(
                ApiKey.TXN_OFFSET_COMMIT,
                (0, 5),
                self._handler(self._txn_offset_commit),
                BROKER,
                (TRANSACTIONAL_ID_WRITE, GROUP_READ, TOPIC_READ),
            ),
            Api(
                ApiKey.DESCRIBE_TRANSACTIONS,
                (0, 0),
                self._describe_api,
                BROKER,
                (TRANSACTIONAL_ID_DESCRIBE, TOPIC_DESCRIBE),
            ),
            Api(
                ApiKey.LIST_TRANSACTIONS,
                (0, 1),
                self._list_api,
                BROKER,
                (TRANSACTIONAL_ID_DESCRIBE,),
            ),
        ]

    @staticmethod
    def _handler(
        handler: Callable[[Any, int, Any], Awaitable[object]],
    ) -> Callable[[ApiRequest], Awaitable[object]]:
        """A table handler around one taking (response module, version, body)."""

        async def handle(request: ApiRequest) -> object:
            module = response_module(request.header.api_key, request.api_version)
            return await handler(module, request.api_version, request.body)

        return handle

    async def init_producer_id(self, request: ApiRequest) -> object:
        """InitProducerId with a transactional id."""
        module = response_module(ApiKey.INIT_PRODUCER_ID, request.api_version)
        return await self._init_producer_id(module, request.api_version, request.body)

    async def _end_txn(self, request: ApiRequest) -> object:
        """EndTxn; v5 is transaction version 2 (the epoch bumped, the answer carrying the
        producer id and epoch to continue with; older versions lack those fields)."""
        body: Any = request.body
        version = request.api_version
        result = await self.coordinator.end_transaction(
            body.transactional_id,
            body.producer_id,
            body.producer_epoch,
            body.committed,
            TV2 if version >= END_TXN_TV2_VERSION else TV1,
        )
        return make(
            response_module(ApiKey.END_TXN, version).EndTxnResponse,
            {
                "throttle_time": NO_THROTTLE,
                "error_code": _fenced_for(result.error, version, 2),
                "producer_id": result.producer_id,
                "producer_epoch": result.producer_epoch,
            },
        )

    async def _describe_api(self, request: ApiRequest) -> object:
        module = response_module(ApiKey.DESCRIBE_TRANSACTIONS, request.api_version)
        return self._describe(module, request.body)

    async def _list_api(self, request: ApiRequest) -> object:
        module = response_module(ApiKey.LIST_TRANSACTIONS, request.api_version)
        return self._list(module, request.body)

    # ---- InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn -------------------------------
    async def _init_producer_id(self, module: Any, version: int, request: Any) -> object:
        result = await self.coordinator.init_producer_id(
            request.transactional_id,
            int(request.transaction_timeout.total_seconds() * 1000),
            getattr(request, "producer_id", -1),
            getattr(request, "producer_epoch", -1),
        )
        return make(
            module.InitProducerIdResponse,
            {
                "throttle_time": NO_THROTTLE,
                "error_code": _fenced_for(result.error, version, 4),
                "producer_id": result.producer_id,
                "producer_epoch": result.producer_epoch,
            },
        )

    async def _add_partitions(self, module: Any, version: int, request: Any) -> object:
        """v0-v3: one transaction, a client's. v4+ (KIP-890 part 1): a broker's batch of
        transactions, each added to, or with ``verify_only`` only checked against."""
        if version < 4:
            errors = await self._add_to_one(
                version,
                request.v3_and_below_transactional_id,
                request.v3_and_below_producer_id,
                request.v3_and_below_producer_epoch,
                request.v3_and_below_topics,
                verify_only=False,
            )
            return make(
                module.AddPartitionsToTxnResponse,
                {
                    "throttle_time": NO_THROTTLE,
                    "results_by_topic_v3_and_below": await _topic_results(module, errors, Turns()),
                },
            )
        results = []
        turns = Turns()
        for txn in request.transactions:
            await turns.tick()
            errors = await self._add_to_one(
                version,
                txn.transactional_id,
                txn.producer_id,
                txn.producer_epoch,
                txn.topics,
                verify_only=txn.verify_only,
            )
            results.append(
                make(
                    module.AddPartitionsToTxnResult,
                    {
                        "transactional_id": txn.transactional_id,
                        "topic_results": await _topic_results(module, errors, turns),
                    },
                )
            )
        return make(
            module.AddPartitionsToTxnResponse,
            {
                "throttle_time": NO_THROTTLE,
                "error_code": ErrorCode.none,
                "results_by_transaction": tuple(results),
            },
        )

    async def _add_to_one(
        self,
        version: int,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        topics: Any,
        *,
        verify_only: bool,
    ) -> dict[tuple[str, int], ErrorCode]:
        image = self._image()
        turns = Turns()
        wanted = []
        unknown = set()
        for topic in topics:
            for index in topic.partitions:
                wanted.append((topic.name, index))
                if not _exists(image, topic.name, index):
                    unknown.add((topic.name, index))
                await turns.tick()
        if unknown:
            # Kafka's answer: the unknown ones say why, the rest were not attempted.
            return {
                where: ErrorCode.unknown_topic_or_partition
                if where in unknown
                else ErrorCode.operation_not_attempted
                for where in wanted
            }
        if verify_only:
            verified = self.coordinator.verify_partitions(
                transactional_id, producer_id, producer_epoch, frozenset(wanted)
            )
            if isinstance(verified, dict):
                return {where: verified[where] for where in wanted}
            return dict.fromkeys(wanted, verified)
        # v5 from a partition leader, not verify-only: Produce v12's implicit add (TV2).
        tv = TV2 if version >= ADD_PARTITIONS_TV2_VERSION else TV1
        error = await self.coordinator.add_partitions(
            transactional_id, producer_id, producer_epoch, frozenset(wanted), tv
        )
        return dict.fromkeys(wanted, _fenced_for(error, version, 2))

    async def _add_offsets(self, module: Any, version: int, request: Any) -> object:
        """The group's ``__consumer_offsets`` partition joins the transaction, so the
        commit or abort marker reaches the group's pending TxnOffsetCommit offsets."""
        # As in Kafka, the partition follows the configured count if the topic does not
        # exist yet (the group's FindCoordinator creates it before TxnOffsetCommit).
        partition = self._groups.partition_of(request.group_id, self._image())
        error = await self.coordinator.add_partitions(
            request.transactional_id,
            request.producer_id,
            request.producer_epoch,
            frozenset({(OFFSETS_TOPIC, partition)}),
        )
        return make(
            module.AddOffsetsToTxnResponse,
            {"throttle_time": NO_THROTTLE, "error_code": _fenced_for(error, version, 2)},
        )

    # ---- TxnOffsetCommit, WriteTxnMarkers ----------------------------------------------------
    async def _txn_offset_commit(self, module: Any, version: int, request: Any) -> object:
        turns = Turns()
        commits = await offset_commits(request.topics, turns)
        added = ErrorCode.none
        if request.group_id and version >= TXN_OFFSET_COMMIT_TV2_VERSION:
            added = await self._add_offsets_partition(request)
        if not request.group_id:
            errors = [ErrorCode.invalid_group_id] * len(commits)
        elif added is not ErrorCode.none:
            errors = [_ADD_ERRORS.get(added, added)] * len(commits)
        else:
            image = self._image()
            errors = await self._groups.commit_txn_offsets(
                request.group_id,
                (request.producer_id, request.producer_epoch),
                getattr(request, "member_id", ""),
                getattr(request, "group_instance_id", None),
                getattr(request, "generation_id", -1),
                commits,
                lambda name, index: _exists(image, name, index),
            )
        by_topic: dict[str, list[object]] = {}
        for commit, error in zip(commits, errors, strict=True):
            by_topic.setdefault(commit.topic, []).append(
                make(
                    module.TxnOffsetCommitResponsePartition,
                    {"partition_index": commit.partition, "error_code": error},
                )
            )
            await turns.tick()
        topics = []
        for name, partitions in by_topic.items():
            topics.append(
                make(
                    module.TxnOffsetCommitResponseTopic,
                    {"name": name, "partitions": tuple(partitions)},
                )
            )
            await turns.tick()
        return make(
            module.TxnOffsetCommitResponse, {"throttle_time": NO_THROTTLE, "topics": tuple(topics)}
        )

    async def _add_offsets_partition(self, request: Any) -> ErrorCode:
        """TxnOffsetCommit v5 (KIP-890 part 2): a TV2 client sends no AddOffsetsToTxn; the
        group's offsets partition joins the transaction here, before the offsets are held,
        so its marker will reach them."""
        if self._add_to_transaction is None:
            return ErrorCode.coordinator_not_available
        partition = self._groups.partition_of(request.group_id, self._image())
        return await self._add_to_transaction(
            request.transactional_id,
            request.producer_id,
            request.producer_epoch,
            OFFSETS_TOPIC,
            partition,
        )

    # ---- DescribeTransactions, ListTransactions ----------------------------------------------
    def _describe(self, module: Any, request: Any) -> object:
        states = []
        for transactional_id in request.transactional_ids:
            found = self.coordinator.describe(transactional_id)
            meta = found if isinstance(found, TxnMetadata) else None
            states.append(
                make(
                    module.TransactionState,
                    {
                        "error_code": found if isinstance(found, ErrorCode) else ErrorCode.none,
                        "transactional_id": transactional_id,
                        "transaction_state": meta.state.value if meta else "",
                        "transaction_timeout": timedelta(
                            milliseconds=meta.timeout_ms if meta else 0
                        ),
                        "transaction_start_time": _datetime(meta.start_ms if meta else -1),
                        "producer_id": meta.producer_id if meta else -1,
                        "producer_epoch": meta.producer_epoch if meta else -1,
                        "topics": _topic_data(module, meta) if meta else (),
                    },
                )
            )
        return make(
            module.DescribeTransactionsResponse,
            {"throttle_time": NO_THROTTLE, "transaction_states": tuple(states)},
        )

    def _list(self, module: Any, request: Any) -> object:
        known = {state.value for state in TxnState}
        wanted = set(request.state_filters)
        producers = set(request.producer_id_filters)
        duration_ms = getattr(request, "duration_filter", -1)
        found = self.coordinator.transactions()
        fields: dict[str, object] = {
            "throttle_time": NO_THROTTLE,
            "error_code": ErrorCode.none,
            "unknown_state_filters": tuple(sorted(wanted - known)),
            "transaction_states": (),
        }
        if isinstance(found, ErrorCode):
            fields["error_code"] = found
        else:
            now_ms = self._clock.now_ms()
            fields["transaction_states"] = tuple(
                make(
                    module.TransactionState,
                    {
                        "transactional_id": meta.transactional_id,
                        "producer_id": meta.producer_id,
                        "transaction_state": meta.state.value,
                    },
                )
                for meta in found
                if (not wanted or meta.state.value in wanted)
                and (not producers or meta.producer_id in producers)
                # KIP-994: only transactions running longer than the duration.
                and (duration_ms < 0 or 0 <= meta.start_ms <= now_ms - duration_ms)
            )
        return make(module.ListTransactionsResponse, fields)


async def _topic_results(
    module: Any, errors: dict[tuple[str, int], ErrorCode], turns: Turns
) -> tuple[object, ...]:
    """AddPartitionsToTxn's answer of one transaction, a partition a unit of ``turns``."""
    by_topic: dict[str, list[object]] = {}
    for (name, index), error in errors.items():
        by_topic.setdefault(name, []).append(
            make(
                module.AddPartitionsToTxnPartitionResult,
                {"partition_index": index, "partition_error_code": error},
            )
        )
        await turns.tick()
    topics = []
    for name, results in by_topic.items():
        topics.append(
            make(
                module.AddPartitionsToTxnTopicResult,
                {"name": name, "results_by_partition": tuple(results)},
            )
        )
        await turns.tick()
    return tuple(topics)


def _exists(image: MetadataImage, name: str, index: int) -> bool:
    topic = image.topics.get(name)
    return topic is not None and index in topic.partitions


def _datetime(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def _topic_data(module: Any, meta: TxnMetadata) -> tuple[object, ...]:
    by_topic: dict[str, list[int]] = {}
    for topic, index in sorted(meta.partitions):
        by_topic.setdefault(topic, []).append(index)
    return tuple(
        make(module.TopicData, {"topic": topic, "partitions": tuple(indexes)})
        for topic, indexes in by_topic.items()
    )
