"""The group APIs' request and response shapes around the GroupCoordinator (the group part
of Kafka's KafkaApis): FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
OffsetCommit, OffsetFetch, ListGroups, DescribeGroups, DeleteGroups, OffsetDelete, and
KIP-848's ConsumerGroupHeartbeat and ConsumerGroupDescribe.

Each handler reads the fields its version has (``getattr`` with Kafka's default for fields
older versions lack) and answers with ``make`` at the request's version. FindCoordinator
finds group coordinators and (key type 1) transaction coordinators, creating
``__consumer_offsets`` or ``__transaction_state`` on first use, as Kafka's
AutoTopicCreationManager does, answering COORDINATOR_NOT_AVAILABLE until its partition has a
leader.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Iterable, Iterator
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.group.classic import GroupState, JoinRequest
from broker.group.consumer_group import ConsumerGroup, Heartbeat
from broker.group.consumer_records import Partitions
from broker.group.coordinator import OFFSETS_TOPIC, GroupCoordinator
from broker.group.records import OffsetValue
from broker.group.shard import offset_commits
from broker.txn.config import TXN_TOPIC
from log.rate_limited_log import RateLimitedLog
from metadata.image import MetadataImage
from protocol.api_keys import ApiKey
from protocol.api_table import (
    BROKER,
    CLUSTER_DESCRIBE,
    GROUP_DELETE,
    GROUP_DESCRIBE,
    GROUP_READ,
    TOPIC_DESCRIBE,
    TOPIC_READ,
    TRANSACTIONAL_ID_DESCRIBE,
    Api,
    ApiRequest,
)
from protocol.entities import make, request_module, response_module
from protocol.principal import CLIENT_HOST
from protocol.turns import Turns

if TYPE_CHECKING:
    from broker.txn.coordinator import TransactionCoordinator

logger = logging.getLogger("broker.group.apis")

CREATE_TOPICS_VERSION = 7

GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1
CLASSIC = "classic"
CONSUMER = "consumer"
NO_THROTTLE = timedelta(0)

Forward = Callable[[object], Awaitable[object]]


class GroupApis:
    """One broker's group request handlers; ``apis`` are their entries in a client
    listener's table. FindCoordinator also finds transaction coordinators when given
    ``transactions``."""

    def __init__(
        self,
        coordinator: GroupCoordinator,
        image: Callable[[], MetadataImage],
        forward: Forward,
        transactions: TransactionCoordinator | None = None,
    ) -> None:
        self.coordinator = coordinator
        self.transactions = transactions
        self._image = image
        self._forward = forward
        self._creating: dict[str, asyncio.Task[None]] = {}
        self._failures = RateLimitedLog(logger)

    def apis(self, listener: str) -> list[Api]:
        """The group APIs' entries in one client listener's table (FindCoordinator answers
        with that listener's endpoints)."""
        find = functools.partial(self._find_coordinator_api, listener)
        return [
            Api(
                ApiKey.OFFSET_COMMIT,
                (2, 9),
                self._offset_commit_api,
                BROKER,
                (GROUP_READ, TOPIC_READ),
            ),
            Api(
                ApiKey.OFFSET_FETCH,
                (1, 9),
                self._offset_fetch_api,
                BROKER,
                (GROUP_DESCRIBE, TOPIC_DESCRIBE),
            ),
            Api(
                ApiKey.FIND_COORDINATOR,
                (0, 6),
                find,
                BROKER,
                (GROUP_DESCRIBE, TRANSACTIONAL_ID_DESCRIBE),
            ),
            Api(ApiKey.JOIN_GROUP, (0, 9), self._join_api, BROKER, (GROUP_READ,)),
            Api(ApiKey.HEARTBEAT, (0, 4), self._heartbeat_api, BROKER, (GROUP_READ,)),
            Api(ApiKey.LEAVE_GROUP, (0, 5), self._leave_api, BROKER, (GROUP_READ,)),
            Api(ApiKey.SYNC_GROUP, (0, 5), self._sync_api, BROKER, (GROUP_READ,)),
            Api(
                ApiKey.DESCRIBE_GROUPS, (0, 5), self._describe_groups_api, BROKER, (GROUP_DESCRIBE,)
            ),
            Api(
                ApiKey.LIST_GROUPS,
                (0, 5),
                self._list_groups_api,
                BROKER,
                (CLUSTER_DESCRIBE, GROUP_DESCRIBE),
            ),
            Api(ApiKey.DELETE_GROUPS, (0, 2), self._delete_groups_api, BROKER, (GROUP_DELETE,)),
            Api(
                ApiKey.OFFSET_DELETE,
                (0, 0),
                self._offset_delete_api,
                BROKER,
                (GROUP_DELETE, TOPIC_READ),
            ),
            Api(
                ApiKey.CONSUMER_GROUP_HEARTBEAT,
                (0, 1),
                self._consumer_heartbeat_api,
                BROKER,
                (GROUP_READ, TOPIC_DESCRIBE),
            ),
            Api(
                ApiKey.CONSUMER_GROUP_DESCRIBE,
                (0, 1),
                self._consumer_describe_api,
                BROKER,
                (GROUP_DESCRIBE, TOPIC_DESCRIBE),
            ),
        ]

    # ---- the entries' handlers: the request's response module, then the API's own method
    async def _find_coordinator_api(self, listener: str, request: ApiRequest) -> object:
        module, version = _response(request), request.api_version
        return self._find_coordinator(module, version, request.body, listener)

    async def _join_api(self, request: ApiRequest) -> object:
        module, version = _response(request), request.api_version
        return await self._join(module, version, request.body, request.client_id)

    async def _sync_api(self, request: ApiRequest) -> object:
        return await self._sync(_response(request), request.body)

    async def _heartbeat_api(self, request: ApiRequest) -> object:
        body: Any = request.body
        error = self.coordinator.heartbeat(
            body.group_id,
            body.member_id,
            getattr(body, "group_instance_id", None),
            body.generation_id,
        )
        return make(
            _response(request).HeartbeatResponse,
            {"throttle_time": NO_THROTTLE, "error_code": error},
        )

    async def _leave_api(self, request: ApiRequest) -> object:
        return self._leave(_response(request), request.api_version, request.body)

    async def _offset_commit_api(self, request: ApiRequest) -> object:
        return await self._offset_commit(_response(request), request.body)

    async def _offset_fetch_api(self, request: ApiRequest) -> object:
        return await self._offset_fetch(_response(request), request.api_version, request.body)

    async def _list_groups_api(self, request: ApiRequest) -> object:
        return self._list_groups(_response(request), request.body)

    async def _describe_groups_api(self, request: ApiRequest) -> object:
        return self._describe_groups(_response(request), request.body)

    async def _delete_groups_api(self, request: ApiRequest) -> object:
        return await self._delete_groups(_response(request), request.body)

    async def _consumer_heartbeat_api(self, request: ApiRequest) -> object:
        module, version = _response(request), request.api_version
        return await self._consumer_heartbeat(module, version, request.body, request.client_id)

    async def _consumer_describe_api(self, request: ApiRequest) -> object:
        return self._consumer_describe(_response(request), request.body)

    async def _offset_delete_api(self, request: ApiRequest) -> object:
        return await self._offset_delete(_response(request), request.body)

    # ---- FindCoordinator -----------------------------------------------------------------
    def _find_coordinator(self, module: Any, version: int, request: Any, listener: str) -> object:
        key_type = getattr(request, "key_type", GROUP_KEY_TYPE)
        keys = request.coordinator_keys if version >= 4 else (request.key,)
        image = self._image()
        found = [self._coordinator(image, key, key_type, listener) for key in keys]
        if version < 4:
            error, message, node, host, port = found[0]
            return make(
                module.FindCoordinatorResponse,
                {
                    "throttle_time": NO_THROTTLE,
                    "error_code": error,
                    "error_message": message,
                    "node_id": node,
                    "host": host,
                    "port": port,
                },
            )
        return make(
            module.FindCoordinatorResponse,
            {
                "throttle_time": NO_THROTTLE,
                "coordinators": tuple(
                    make(
                        module.Coordinator,
                        {
                            "key": key,
                            "node_id": node,
                            "host": host,
                            "port": port,
                            "error_code": error,
                            "error_message": message,
                        },
                    )
                    for key, (error, message, node, host, port) in zip(keys, found, strict=True)
                ),
            },
        )

    def _coordinator(
        self, image: MetadataImage, key: str, key_type: int, listener: str
    ) -> tuple[ErrorCode, str | None, int, str, int]:
        partition_of: Callable[[str, MetadataImage], int]
        if key_type == GROUP_KEY_TYPE:
            name, partition_of = OFFSETS_TOPIC, self.coordinator.partition_of
        elif key_type == TRANSACTION_KEY_TYPE and self.transactions is not None:
            name, partition_of = TXN_TOPIC, self.transactions.partition_of
        else:
            message = "Only group and transaction coordinators are served"
            return ErrorCode.invalid_request, message, -1, "", -1
        topic = image.topics.get(name)
        if topic is None:
            self._create_internal_topic(name)
            return ErrorCode.coordinator_not_available, f"{name} is being created", -1, "", -1
        registration = topic.partitions.get(partition_of(key, image))
        broker = image.cluster.brokers.get(registration.leader) if registration else None
        endpoint = broker.listener(listener) if broker is not None and not broker.fenced else None
        if registration is None or broker is None or endpoint is None:
            return ErrorCode.coordinator_not_available, None, -1, "", -1
        return ErrorCode.none, None, broker.broker_id, endpoint.host, endpoint.port

    def _create_internal_topic(self, name: str) -> None:
        creating = self._creating.get(name)
        if creating is not None and not creating.done():
            return
        self._creating[name] = asyncio.get_running_loop().create_task(self._create(name))

    def _internal_topic(self, name: str) -> tuple[int, int, dict[str, str]]:
        """Partitions, replication factor and configs of an internal topic, as Kafka's
        AutoTopicCreationManager creates it. Compaction (log/cleaner.py) keeps the latest
        record of every key, so a topic of offsets or transaction states does not grow with
        each commit."""
        if name == TXN_TOPIC:
            assert self.transactions is not None
            txn = self.transactions.config
            return (
                txn.transaction_state_log_num_partitions,
                txn.transaction_state_log_replication_factor,
                {
                    "cleanup.policy": "compact",
                    "compression.type": "uncompressed",
                    "min.insync.replicas": str(txn.transaction_state_log_min_isr),
                    "segment.bytes": str(txn.transaction_state_log_segment_bytes),
                    "unclean.leader.election.enable": "false",
                },
            )
        config = self.coordinator.config
        return (
            config.offsets_topic_num_partitions,
            config.offsets_topic_replication_factor,
            {
                "cleanup.policy": "compact",
                "compression.type": "producer",
                "segment.bytes": str(config.offsets_topic_segment_bytes),
            },
        )

    async def _create(self, name: str) -> None:
        module: Any = request_module(ApiKey.CREATE_TOPICS, CREATE_TOPICS_VERSION)
        num_partitions, replication_factor, configs = self._internal_topic(name)
        topic = make(
            module.CreatableTopic,
            {
                "name": name,
                "num_partitions": num_partitions,
                "replication_factor": replication_factor,
                "configs": tuple(
                    make(module.CreatableTopicConfig, {"name": k, "value": v})
                    for k, v in configs.items()
                ),
            },
        )
        request = make(
            module.CreateTopicsRequest, {"topics": (topic,), "timeout": timedelta(seconds=30)}
        )
        try:
            response: Any = await self._forward(request)
        except OSError as error:
            self._failures.log(
                "no-controller",
                logging.WARNING,
                "Creating %s: no controller answered: %r",
                name,
                error,
            )
            return
        for created in response.topics:
            if created.error_code not in (ErrorCode.none, ErrorCode.topic_already_exists):
                # Every FindCoordinator retries it (clients ask every second or so): once a
                # minute is enough to tell the operator why groups do not work.
                self._failures.log(
                    created.error_code.name,
                    logging.WARNING,
                    "Creating %s (%d partitions, replication factor %d) failed: %s %s",
                    name,
                    num_partitions,
                    replication_factor,
                    created.error_code.name,
                    created.error_message,
                )

    async def close(self) -> None:
        for creating in self._creating.values():
            creating.cancel()
        await asyncio.gather(*self._creating.values(), return_exceptions=True)

    # ---- JoinGroup, SyncGroup, LeaveGroup ------------------------------------------------
    async def _join(self, module: Any, version: int, request: Any, client_id: str) -> object:
        session_ms = int(request.session_timeout.total_seconds() * 1000)
        rebalance = getattr(request, "rebalance_timeout", None)
        rebalance_ms = int(rebalance.total_seconds() * 1000) if rebalance is not None else -1
        protocols = []
        turns = Turns()  # a JoinGroup may name 200,000 protocols: a slice of them a turn
        for p in request.protocols:
            protocols.append((p.name, bytes(p.metadata)))
            await turns.tick()
        join = JoinRequest(
            member_id=request.member_id,
            group_instance_id=getattr(request, "group_instance_id", None),
            client_id=client_id,
            client_host=CLIENT_HOST.get(),
            session_timeout_ms=session_ms,
            rebalance_timeout_ms=rebalance_ms if rebalance_ms > 0 else session_ms,
            protocol_type=request.protocol_type,
            protocols=tuple(protocols),
            require_known_member_id=version >= 4,
            supports_skip_assignment=version >= 9,
        )
        if not request.group_id:
            reply_error, reply = ErrorCode.invalid_group_id, None
        else:
            reply = await self.coordinator.join(request.group_id, join)
            reply_error = reply.error
        fields: dict[str, object] = {
            "throttle_time": NO_THROTTLE,
            "error_code": reply_error,
            "generation_id": -1,
            "protocol_name": "" if version < 7 else None,
            "leader": "",
            "member_id": request.member_id,
            "members": (),
        }
        if reply is not None:
            fields |= {"member_id": reply.member_id, "skip_assignment": reply.skip_assignment}
        if reply is not None and reply.error is ErrorCode.none:
            fields |= {
                "generation_id": reply.generation,
                "protocol_type": reply.protocol_type,
                "protocol_name": reply.protocol_name or ("" if version < 7 else None),
                "leader": reply.leader,
                "members": tuple(
                    make(
                        module.JoinGroupResponseMember,
                        {
                            "member_id": m.member_id,
                            "group_instance_id": m.group_instance_id,
                            "metadata": m.metadata,
                        },
                    )
                    for m in reply.members
                ),
            }
        return make(module.JoinGroupResponse, fields)

    async def _sync(self, module: Any, request: Any) -> object:
        reply = await self.coordinator.sync(
            request.group_id,
            request.member_id,
            getattr(request, "group_instance_id", None),
            request.generation_id,
            getattr(request, "protocol_type", None),
            getattr(request, "protocol_name", None),
            {a.member_id: bytes(a.assignment) for a in request.assignments},
        )
        return make(
            module.SyncGroupResponse,
            {
                "throttle_time": NO_THROTTLE,
                "error_code": reply.error,
                "protocol_type": reply.protocol_type,
                "protocol_name": reply.protocol_name,
                "assignment": reply.assignment,
            },
        )

    def _leave(self, module: Any, version: int, request: Any) -> object:
        members: list[tuple[str, str | None]]
        if version < 3:
            members = [(request.member_id, None)]
        else:
            members = [(m.member_id, m.group_instance_id) for m in request.members]
        result = self.coordinator.leave(request.group_id, members)
        if isinstance(result, ErrorCode):
            return make(
                module.LeaveGroupResponse, {"throttle_time": NO_THROTTLE, "error_code": result}
            )
        if version < 3:
            return make(
                module.LeaveGroupResponse, {"throttle_time": NO_THROTTLE, "error_code": result[0]}
            )
        return make(
            module.LeaveGroupResponse,
            {
                "throttle_time": NO_THROTTLE,
                "error_code": ErrorCode.none,
                "members": tuple(
                    make(
                        module.MemberResponse,
                        {"member_id": m, "group_instance_id": i, "error_code": e},
                    )
                    for (m, i), e in zip(members, result, strict=True)
                ),
            },
        )

    # ---- offsets -------------------------------------------------------------------------
    async def _offset_commit(self, module: Any, request: Any) -> object:
        turns = Turns()
        commits = await offset_commits(request.topics, turns)
        if not request.group_id:
            errors = [ErrorCode.invalid_group_id] * len(commits)
        else:
            image = self._image()

            def known(name: str, partition: int) -> bool:
                found = image.topics.get(name)
                return found is not None and partition in found.partitions

            errors = await self.coordinator.commit_offsets(
                request.group_id,
                request.member_id,
                getattr(request, "group_instance_id", None),
                request.generation_id_or_member_epoch,
                commits,
                known,
            )
        answers = iter(errors)
        topics = []
        for topic in request.topics:
            partitions = []
            for p in topic.partitions:
                partitions.append(
                    make(
                        module.OffsetCommitResponsePartition,
                        {"partition_index": p.partition_index, "error_code": next(answers)},
                    )
                )
                await turns.tick()
            topics.append(
                make(
                    module.OffsetCommitResponseTopic,
                    {"name": topic.name, "partitions": tuple(partitions)},
                )
            )
            await turns.tick()
        return make(
            module.OffsetCommitResponse, {"throttle_time": NO_THROTTLE, "topics": tuple(topics)}
        )

    async def _offset_fetch(self, module: Any, version: int, request: Any) -> object:
        stable = getattr(request, "require_stable", False)
        turns = Turns()
        if version < 8:
            error, topics = await self._fetch_group(
                module, request.group_id, request.topics, "", None, stable, turns
            )
            return make(
                module.OffsetFetchResponse,
                {"throttle_time": NO_THROTTLE, "topics": topics, "error_code": error},
            )
        groups = []
        for group in request.groups:
            error, topics = await self._fetch_group(
                module, group.group_id, group.topics, "s", group, stable, turns
            )
            groups.append(
                make(
                    module.OffsetFetchResponseGroup,
                    {"group_id": group.group_id, "topics": topics, "error_code": error},
                )
            )
            await turns.tick()
        return make(
            module.OffsetFetchResponse, {"throttle_time": NO_THROTTLE, "groups": tuple(groups)}
        )

    async def _fetch_group(
        self,
        module: Any,
        group_id: str,
        topics: Any,
        plural: str,
        group: Any,
        require_stable: bool,
        turns: Turns,
    ) -> tuple[ErrorCode, tuple[object, ...]]:
        """One group's OffsetFetch answer: (group error, topics). v8+ names its types
        ``OffsetFetchResponseTopics``/``Partitions`` (``plural``); v9 names the member.
        With ``require_stable`` (KIP-447, v7+), a partition whose offset an open transaction
        holds answers UNSTABLE_OFFSET_COMMIT and no offset, and the consumer retries. The
        partitions named are looked up and answered a slice a turn of the loop (``turns``,
        the request's): each reads the group's offsets as they are at its turn."""
        member_id = getattr(group, "member_id", None)
        member_epoch = getattr(group, "member_epoch", -1)
        topic_type = getattr(module, f"OffsetFetchResponseTopic{plural}")
        partition_type = getattr(module, f"OffsetFetchResponsePartition{plural}")
        result_topics: Iterable[tuple[str, Iterable[tuple[int, OffsetValue | None]]]]
        if topics is None:  # every committed offset of the group
            result = self.coordinator.fetch_offsets(group_id, None, member_id, member_epoch)
            error = result if isinstance(result, ErrorCode) else ErrorCode.none
            result_topics = () if isinstance(result, ErrorCode) else result
        else:
            offsets = self.coordinator.committed_offsets(group_id, member_id, member_epoch)
            # Kafka puts the group error on every requested partition as well (v0-v1 have
            # no group-level error field).
            error = offsets if isinstance(offsets, ErrorCode) else ErrorCode.none
            found = {} if isinstance(offsets, ErrorCode) else offsets

            def values(names: Iterable[int], topic: str) -> Iterator[tuple[int, Any]]:
                for index in names:
                    committed = found.get((topic, index))
                    yield index, None if committed is None else committed.value

            result_topics = ((t.name, values(t.partition_indexes, t.name)) for t in topics)
        unstable = self.coordinator.unstable_offsets(group_id) if require_stable else frozenset()

        def partition(name: str, index: int, value: OffsetValue | None) -> object:
            partition_error = error
            if (name, index) in unstable:
                partition_error, value = ErrorCode.unstable_offset_commit, None
            return make(
                partition_type,
                {
                    "partition_index": index,
                    "committed_offset": value.offset if value else -1,
                    "committed_leader_epoch": value.leader_epoch if value else -1,
                    "metadata": value.metadata if value else "",
                    "error_code": partition_error,
                },
            )

        answer = []
        for name, partitions in result_topics:
            answered = []
            for index, value in partitions:
                answered.append(partition(name, index, value))
                await turns.tick()
            answer.append(make(topic_type, {"name": name, "partitions": tuple(answered)}))
            await turns.tick()
        return error, tuple(answer)

    async def _offset_delete(self, module: Any, request: Any) -> object:
        turns = Turns()
        wanted = []
        for t in request.topics:
            wanted.append((t.name, [p.partition_index for p in t.partitions]))
            await turns.tick(1 + len(t.partitions))
        result = await self.coordinator.delete_offsets(request.group_id, wanted)
        if isinstance(result, ErrorCode):
            return make(
                module.OffsetDeleteResponse,
                {"error_code": result, "throttle_time": NO_THROTTLE, "topics": ()},
            )
        topics = []
        for name, errors in result:
            partitions = []
            for p, e in errors:
                partitions.append(
                    make(
                        module.OffsetDeleteResponsePartition,
                        {"partition_index": p, "error_code": e},
                    )
                )
                await turns.tick()
            topics.append(
                make(
                    module.OffsetDeleteResponseTopic,
                    {"name": name, "partitions": tuple(partitions)},
                )
            )
            await turns.tick()
        return make(
            module.OffsetDeleteResponse,
            {"error_code": ErrorCode.none, "throttle_time": NO_THROTTLE, "topics": tuple(topics)},
        )

    # ---- listing, describing, deleting groups ----------------------------------------------
    def _list_groups(self, module: Any, request: Any) -> object:
        result = self.coordinator.groups()
        if isinstance(result, ErrorCode):
            return make(
                module.ListGroupsResponse,
                {"throttle_time": NO_THROTTLE, "error_code": result, "groups": ()},
            )
        states = {s.lower() for s in getattr(request, "states_filter", ())}
        types = {t.lower() for t in getattr(request, "types_filter", ())}
        listed = [
            (g, CONSUMER if isinstance(g, ConsumerGroup) else CLASSIC)
            for g in result
            if not states or g.state.value.lower() in states
        ]
        return make(
            module.ListGroupsResponse,
            {
                "throttle_time": NO_THROTTLE,
                "error_code": ErrorCode.none,
                "groups": tuple(
                    make(
                        module.ListedGroup,
                        {
                            "group_id": g.group_id,
                            "protocol_type": CONSUMER
                            if isinstance(g, ConsumerGroup)
                            else g.protocol_type or "",
                            "group_state": g.state.value,
                            "group_type": kind,
                        },
                    )
                    for g, kind in listed
                    if not types or kind in types
                ),
            },
        )

    def _describe_groups(self, module: Any, request: Any) -> object:
        described = []
        for group_id in request.groups:
            found = self.coordinator.describe(group_id)
            fields: dict[str, object] = {
                "error_code": ErrorCode.none,
                "group_id": group_id,
                "group_state": GroupState.DEAD.value,
                "protocol_type": "",
                "protocol_data": "",
                "members": (),
                "authorized_operations": -(2**31),
            }
            if isinstance(found, ErrorCode):
                fields["error_code"] = found
            elif found is not None:
                stable = found.state is GroupState.STABLE
                fields |= {
                    "group_state": found.state.value,
                    "protocol_type": found.protocol_type or "",
                    "protocol_data": found.protocol_name or "",
                    "members": tuple(
                        make(
                            module.DescribedGroupMember,
                            {
                                "member_id": m.member_id,
                                "group_instance_id": m.group_instance_id,
                                "client_id": m.client_id,
                                "client_host": m.client_host,
                                # Kafka shows subscriptions and assignments only when Stable.
                                "member_metadata": m.metadata(found.protocol_name)
                                if stable
                                else b"",
                                "member_assignment": m.assignment if stable else b"",
                            },
                        )
                        for m in found.members.values()
                    ),
                }
            described.append(make(module.DescribedGroup, fields))
        return make(
            module.DescribeGroupsResponse,
            {"throttle_time": NO_THROTTLE, "groups": tuple(described)},
        )

    async def _delete_groups(self, module: Any, request: Any) -> object:
        results = []
        for group_id in request.groups_names:
            error = await self.coordinator.delete_group(group_id)
            results.append(
                make(module.DeletableGroupResult, {"group_id": group_id, "error_code": error})
            )
        return make(
            module.DeleteGroupsResponse, {"throttle_time": NO_THROTTLE, "results": tuple(results)}
        )

    # ---- KIP-848: ConsumerGroupHeartbeat, ConsumerGroupDescribe ---------------------------
    async def _consumer_heartbeat(
        self, module: Any, version: int, request: Any, client_id: str
    ) -> object:
        member_id = request.member_id
        if version == 0 and not member_id and request.member_epoch == 0:
            member_id = self.coordinator.new_member_id()  # v1+: the client makes its own
        owned = request.topic_partitions
        heartbeat = Heartbeat(
            member_id=member_id,
            member_epoch=request.member_epoch,
            client_id=client_id,
            client_host=CLIENT_HOST.get(),
            instance_id=request.instance_id,
            rack_id=request.rack_id,
            rebalance_timeout_ms=int(request.rebalance_timeout.total_seconds() * 1000),
            subscribed_topic_names=request.subscribed_topic_names,
            subscribed_topic_regex=getattr(request, "subscribed_topic_regex", None),
            server_assignor=request.server_assignor,
            owned=None
            if owned is None
            else frozenset((t.topic_id, p) for t in owned for p in t.partitions),
        )
        invalid = _invalid_heartbeat(request, member_id)
        message: str | None
        if invalid is not None:
            error, message = ErrorCode.invalid_request, invalid
            result = None
        else:
            result = await self.coordinator.consumer.heartbeat(request.group_id, heartbeat)
            error, message = result.error, result.message
        fields: dict[str, object] = {
            "throttle_time": NO_THROTTLE,
            "error_code": error,
            "error_message": message,
            "member_id": member_id,
            "member_epoch": request.member_epoch if result is None else result.member_epoch,
            "heartbeat_interval": timedelta(
                milliseconds=self.coordinator.config.group_consumer_heartbeat_interval_ms
            ),
        }
        if result is not None and error is ErrorCode.none and result.assignment is not None:
            fields["assignment"] = make(
                module.Assignment,
                {"topic_partitions": _topic_partitions(module, result.assignment, None)},
            )
        return make(module.ConsumerGroupHeartbeatResponse, fields)

    def _consumer_describe(self, module: Any, request: Any) -> object:
        image = self._image()
        names = {topic_id: name for name, topic_id in image.topics.by_name.items()}
        described = []
        for group_id in request.group_ids:
            found = self.coordinator.describe_consumer(group_id)
            fields: dict[str, object] = {
                "error_code": ErrorCode.none,
                "group_id": group_id,
                "group_state": "",
                "group_epoch": -1,
                "assignment_epoch": -1,
                "assignor_name": "",
                "members": (),
                "authorized_operations": -(2**31),
            }
            if isinstance(found, ErrorCode):
                fields["error_code"] = found
            elif found is None:
                # Kafka's answer for an unknown or classic group; the admin client then
                # falls back to DescribeGroups.
                fields |= {
                    "error_code": ErrorCode.group_id_not_found,
                    "error_message": f"Group {group_id} not found.",
                }
            else:
                fields |= {
                    "group_state": found.state.value,
                    "group_epoch": found.group_epoch,
                    "assignment_epoch": found.assignment_epoch,
                    "assignor_name": found.assignor_for(found.members),
                    "members": tuple(
                        make(
                            module.Member,
                            {
                                "member_id": m.member_id,
                                "instance_id": m.metadata.instance_id,
                                "rack_id": m.metadata.rack_id,
                                "member_epoch": m.member_epoch,
                                "client_id": m.metadata.client_id,
                                "client_host": m.metadata.client_host,
                                "subscribed_topic_names": m.metadata.subscribed_topic_names,
                                "subscribed_topic_regex": m.metadata.subscribed_topic_regex,
                                "assignment": make(
                                    module.Assignment,
                                    {
                                        "topic_partitions": _topic_partitions(
                                            module, m.assigned, names
                                        )
                                    },
                                ),
                                "target_assignment": make(
                                    module.Assignment,
                                    {
                                        "topic_partitions": _topic_partitions(
                                            module,
                                            found.target.get(m.member_id, frozenset()),
                                            names,
                                        )
                                    },
                                ),
                                "member_type": 1,
                            },
                        )
                        for m in sorted(found.members.values(), key=lambda m: m.member_id)
                    ),
                }
            described.append(make(module.DescribedGroup, fields))
        return make(
            module.ConsumerGroupDescribeResponse,
            {"throttle_time": NO_THROTTLE, "groups": tuple(described)},
        )


def _invalid_heartbeat(request: Any, member_id: str) -> str | None:
    """Kafka's request checks that need no group: INVALID_REQUEST with this message."""
    if not request.group_id:
        return "GroupId can't be empty."
    if not member_id:
        return "MemberId can't be empty."
    if request.instance_id is not None and not request.instance_id:
        return "InstanceId can't be empty."
    if request.member_epoch == 0 and request.rebalance_timeout.total_seconds() < 0:
        return "RebalanceTimeoutMs must be provided in first request."
    if request.member_epoch < -2:
        return f"MemberEpoch {request.member_epoch} is invalid."
    return None


def _topic_partitions(
    module: Any, partitions: Partitions, names: dict[Any, str] | None
) -> tuple[object, ...]:
    """Partitions grouped by topic id (ConsumerGroupDescribe also names the topic)."""
    by_topic: dict[Any, list[int]] = {}
    for topic_id, index in sorted(partitions):
        by_topic.setdefault(topic_id, []).append(index)
    return tuple(
        make(
            module.TopicPartitions,
            {"topic_id": topic_id, "partitions": tuple(indexes)}
            | ({} if names is None else {"topic_name": names.get(topic_id, "")}),
        )
        for topic_id, indexes in by_topic.items()
    )


def _response(request: ApiRequest) -> Any:
    """The kio module of the response to ``request``'s API and version."""
    return response_module(request.header.api_key, request.api_version)
