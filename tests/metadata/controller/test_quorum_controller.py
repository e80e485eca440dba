"""The QuorumController end to end on a one-voter quorum with a real disk: activation after
its LeaderChange commits, answers only after commit, NOT_CONTROLLER when not active or when
leadership is lost, session fencing, idle NoOps, and a restart that rebuilds the same image."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from log.batch import decode_batch, iter_batches
from log.records import ControlRecordType, decode_control_key
from log.runtime import real_runtime
from metadata.controller.context import MAX_RECORDS_PER_USER_OP, ControllerConfig
from metadata.controller.quorum_controller import CONTROLLER_BUGS, QuorumController
from metadata.controller.refusals import refusal
from metadata.delta import BrokerState
from metadata.image import MetadataImage
from metadata.loader import MetadataLoader
from metadata.records import (
    METADATA_VERSION_FEATURE,
    FeatureLevel,
    RegisterBroker,
    decode_record,
)
from raft.core import RaftConfig
from raft.disk_log import DiskLog
from raft.driver import RaftNode, RaftNodeConfig
from tests.metadata.controller.support import (
    CLUSTER_ID,
    controller_versions,
    request_module,
    roundtrip,
)

DEADLINE_S = 10.0


async def eventually(predicate: Callable[[], bool], timeout_s: float = DEADLINE_S) -> None:
    """Wait until ``predicate`` holds (polling the running node), or fail."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not predicate():
        assert loop.time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.005)


class Controller:
    """A one-voter quorum running a QuorumController on ``directory``."""

    def __init__(self, directory: Path, bugs: frozenset[str] = frozenset(), **config: Any):
        self.directory = str(directory / "__cluster_metadata-0")
        self.bugs = bugs
        self.directory_id: uuid.UUID | None = None  # meta.properties directory.id
        self.config = ControllerConfig(
            node_id=1,
            cluster_id=CLUSTER_ID,
            bootstrap_records=(FeatureLevel(METADATA_VERSION_FEATURE, 1),),
            **config,
        )

    async def start(self, *, wait_active: bool = True) -> None:
        runtime = real_runtime(seed=3)
        self.log = await DiskLog.open(runtime, self.directory)
        self.raft = RaftNode(
            runtime,
            RaftNodeConfig(
                node_id=1,
                voters={1: ("127.0.0.1", 1)},
                cluster_id=CLUSTER_ID,
                metadata_dir=self.directory,
                raft=RaftConfig(election_timeout_ms=20, election_backoff_max_ms=20),
                directory_id=self.directory_id,
            ),
            self.log,
        )
        self.loader = MetadataLoader()
        self.raft.add_listener(self.loader)
        self.controller = QuorumController(runtime, self.raft, self.loader, self.config, self.bugs)
        await self.raft.start()
        if wait_active:
            await eventually(lambda: self.controller.active)

    @property
    def image(self) -> MetadataImage:
        return self.loader.image

    async def stop(self) -> None:
        await self.controller.close()
        await self.raft.close()
        await self.loader.close()
        await self.log.close()

    async def call(self, api_key: int, version: int, request: Any) -> Any:
        response = await self.controller.handle(api_key, version, request)
        return roundtrip(response)

    async def register(self, broker_id: int) -> int:
        module = request_module(62, 4)
        request = module.BrokerRegistrationRequest(
            broker_id=broker_id,
            cluster_id=CLUSTER_ID,
            incarnation_id=uuid.UUID(int=broker_id),
            listeners=(
                module.Listener(
                    name="PLAINTEXT", host="h", port=9090 + broker_id, security_protocol=0
                ),
            ),
            features=(),
            rack=None,
        )
        response = await self.call(62, 4, request)
        assert response.error_code == ErrorCode.none
        return response.broker_epoch

    async def heartbeat(self, broker_id: int, epoch: int, offset: int, **flags: bool) -> Any:
        module = request_module(63, 2)
        request = module.BrokerHeartbeatRequest(
            broker_id=broker_id,
            broker_epoch=epoch,
            current_metadata_offset=offset,
            want_fence=flags.get("want_fence", False),
            want_shut_down=flags.get("want_shut_down", False),
        )
        return await self.call(63, 2, request)

    async def create_topic(self, name: str, partitions: int = 1) -> Any:
        module = request_module(19, 7)
        request = module.CreateTopicsRequest(
            topics=(
                module.CreatableTopic(
                    name=name,
                    num_partitions=partitions,
                    replication_factor=1,
                    assignments=(),
                    configs=(),
                ),
            )
        )
        (result,) = (await self.call(19, 7, request)).topics
        return result


def run(coroutine: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coroutine, 30))


def test_a_broker_registers_is_unfenced_when_caught_up_and_topics_get_created(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        node = Controller(tmp_path)
        await node.start()
        # Activation proposes the bootstrap records; they are in the image once committed.
        await eventually(lambda: METADATA_VERSION_FEATURE in node.image.features)
        assert node.image.features[METADATA_VERSION_FEATURE] == 1
        offset = node.raft.log.end_offset()
        epoch = await node.register(1)
        assert epoch == offset  # the broker epoch is the offset of its registration record
        assert node.image.cluster.brokers[1].fenced  # answered after commit: in the image
        behind = await node.heartbeat(1, epoch, offset=epoch - 1)
        assert (behind.is_caught_up, behind.is_fenced) == (False, True)
        caught_up = await node.heartbeat(1, epoch, offset=node.image.offset)
        assert (caught_up.is_caught_up, caught_up.is_fenced) == (True, False)
        assert not node.image.cluster.brokers[1].fenced
        created = await node.create_topic("orders", 3)
        assert created.error_code == ErrorCode.none
        topic = node.image.topics.get("orders")
        assert topic is not None and topic.topic_id == created.topic_id
        assert all(p.leader == 1 for p in topic.partitions.values())
        again = await node.create_topic("orders")
        assert again.error_code == ErrorCode.topic_already_exists
        stale = await node.heartbeat(1, epoch + 1, offset=node.image.offset)
        assert stale.error_code == ErrorCode.stale_broker_epoch
        await node.stop()

    run(scenario())


def test_every_api_answers_not_controller_when_inactive(tmp_path: Path) -> None:
    async def scenario() -> None:
        node = Controller(tmp_path)
        await node.start(wait_active=False)
        assert not node.controller.active  # the election has not even started yet
        response = await node.create_topic("t")
        assert response.error_code == ErrorCode.not_controller
        module = request_module(63, 2)
        heartbeat = module.BrokerHeartbeatRequest(
            broker_id=1,
            broker_epoch=1,
            current_metadata_offset=0,
            want_fence=False,
            want_shut_down=False,
        )
        assert (await node.call(63, 2, heartbeat)).error_code == ErrorCode.not_controller
        await node.stop()

    run(scenario())


@pytest.mark.parametrize(
    ("api_key", "version"),
    [(k, v) for k, (low, high) in controller_versions().items() for v in range(low, high + 1)],
)
def test_refusals_encode_for_every_served_version(api_key: int, version: int) -> None:
    from tests.metadata.controller.support import request_module as module_of

    module = module_of(api_key, version)
    request = _empty_request(module, api_key)
    response = roundtrip(refusal(api_key, version, request, ErrorCode.not_controller))
    codes = _error_codes(response)
    assert codes and set(codes) == {ErrorCode.not_controller}


def _empty_request(module: Any, api_key: int) -> Any:
    """A request with one resource (where the API has resources) to refuse."""
    from protocol.entities import make

    request_type = next(
        getattr(module, name)
        for name in dir(module)
        if name.endswith("Request") and name[0].isupper()
    )
    values: dict[str, Any] = {}
    if api_key == 19:
        values["topics"] = (make(module.CreatableTopic, {"name": "t", "num_partitions": 1}),)
    elif api_key == 20:
        if hasattr(module, "DeleteTopicState"):
            values["topics"] = (
                make(module.DeleteTopicState, {"name": "t", "topic_id": uuid.UUID(int=0)}),
            )
        else:
            values["topic_names"] = ("t",)
    elif api_key == 37:
        values["topics"] = (make(module.CreatePartitionsTopic, {"name": "t", "count": 2}),)
    elif api_key in (33, 44):
        values["resources"] = (
            make(module.AlterConfigsResource, {"resource_type": 2, "resource_name": "t"}),
        )
    elif api_key == 43:
        values["topic_partitions"] = (
            make(module.TopicPartitions, {"topic": "t", "partitions": (0,)}),
        )
    elif api_key == 30:
        values["creations"] = (make(module.AclCreation, {"resource_name": "t"}),)
    elif api_key == 31:
        values["filters"] = (make(module.DeleteAclsFilter, {"resource_name_filter": "t"}),)
    elif api_key == 51:
        values["deletions"] = (make(module.ScramCredentialDeletion, {"name": "u", "mechanism": 2}),)
    elif api_key == 49:
        entity = make(module.EntityData, {"entity_type": "user", "entity_name": "u"})
        values["entries"] = (make(module.EntryData, {"entity": (entity,), "ops": ()}),)
    return make(request_type, values)


def _error_codes(entity: Any) -> list[ErrorCode]:
    """Every error_code anywhere in a response."""
    found = []
    for name in getattr(entity, "__dataclass_fields__", {}):
        value = getattr(entity, name)
        if name == "error_code":
            found.append(value)
        elif isinstance(value, tuple):
            for item in value:
                found.extend(_error_codes(item))
    return found


def test_a_broker_that_stops_heartbeating_is_fenced_after_its_session(tmp_path: Path) -> None:
    async def scenario() -> None:
        node = Controller(tmp_path, session_timeout_ms=300)
        await node.start()
        epoch = await node.register(1)
        loop = asyncio.get_running_loop()
        last_heartbeat = loop.time()  # the session runs from when the controller hears it
        await node.heartbeat(1, epoch, offset=node.image.offset)
        assert not node.image.cluster.brokers[1].fenced
        await node.create_topic("t")
        await eventually(lambda: node.image.cluster.brokers[1].fenced)
        assert loop.time() - last_heartbeat >= 0.3
        partition = node.image.topics.get("t").partitions[0]  # type: ignore[union-attr]
        assert (partition.leader, partition.isr) == (-1, (1,))  # last ISR member: offline
        # The broker comes back: unfenced, and its partition has a leader again.
        await node.heartbeat(1, epoch, offset=node.image.offset)
        partition = node.image.topics.get("t").partitions[0]  # type: ignore[union-attr]
        assert partition.leader == 1
        await node.stop()

    run(scenario())


def test_an_idle_controller_writes_noops(tmp_path: Path) -> None:
    async def scenario() -> None:
        node = Controller(tmp_path, max_idle_interval_ms=20)
        await node.start()
        start = node.image.offset
        await eventually(lambda: node.image.offset >= start + 3)
        await node.stop()

    run(scenario())


def test_losing_leadership_fails_pending_requests_with_not_controller(tmp_path: Path) -> None:
    async def scenario() -> None:
        node = Controller(tmp_path)
        await node.start()
        await node.heartbeat(1, await node.register(1), offset=node.image.offset)
        pending = asyncio.get_running_loop().create_task(node.create_topic("t"))
        await asyncio.sleep(0)  # the request is proposed and waits for its commit
        assert node.controller.active and not pending.done()
        await node.raft.resign()
        assert not node.controller.active
        assert (await pending).error_code == ErrorCode.not_controller
        # The one voter is elected again; the next controller serves, and the outcome of
        # the refused request was unknown: its record was in the log and committed.
        await eventually(lambda: node.controller.active)
        assert node.image.topics.get("t") is not None
        assert (await node.create_topic("u")).error_code == ErrorCode.none
        await node.stop()

    run(scenario())


def test_planted_bug_answers_before_commit(tmp_path: Path) -> None:
    async def scenario() -> None:
        node = Controller(tmp_path, bugs=frozenset({"answer-before-commit"}))
        await node.start()
        await node.register(1)
        assert 1 not in node.image.cluster.brokers  # answered, not yet committed
        await eventually(lambda: 1 in node.image.cluster.brokers)
        await node.stop()

    run(scenario())


def test_bug_names_are_checked() -> None:
    assert set(CONTROLLER_BUGS) == {
        "answer-before-commit",
        "config-answer-before-commit",
        "unfence-before-caught-up",
        "leader-outside-isr",
        "shutdown-keeps-leaders",
    }
    with pytest.raises(AssertionError, match="unknown planted bugs"):
        QuorumController(None, None, None, None, frozenset({"nope"}))  # type: ignore[arg-type]


def test_a_restarted_controller_rebuilds_the_same_image_from_the_log(tmp_path: Path) -> None:
    async def scenario() -> None:
        first = Controller(tmp_path)
        await first.start()
        epoch = await first.register(1)
        await first.heartbeat(1, epoch, offset=first.image.offset)
        epoch2 = await first.register(2)
        await first.heartbeat(2, epoch2, offset=first.image.offset)
        for name in ("a", "b", "c"):
            assert (await first.create_topic(name, 2)).error_code == ErrorCode.none
        module = request_module(44, 1)
        alter = module.IncrementalAlterConfigsRequest(
            resources=(
                module.AlterConfigsResource(
                    resource_type=2,
                    resource_name="b",
                    configs=(
                        module.AlterableConfig(name="retention.ms", config_operation=0, value="9"),
                    ),
                ),
            ),
            validate_only=False,
        )
        assert (await first.call(44, 1, alter)).responses[0].error_code == ErrorCode.none
        delete = request_module(20, 6)
        request = delete.DeleteTopicsRequest(
            topics=(delete.DeleteTopicState(name="a", topic_id=uuid.UUID(int=0)),), timeout=0
        )
        assert (await first.call(20, 6, request)).responses[0].error_code == ErrorCode.none
        producer = request_module(67, 0).AllocateProducerIdsRequest(broker_id=1, broker_epoch=epoch)
        assert (await first.call(67, 0, producer)).producer_id_start == 0
        before = first.image
        await first.stop()

        second = Controller(tmp_path)
        await second.start()
        after = second.image
        assert after.epoch > before.epoch  # a new term, and a new LeaderChange record
        assert after.features == before.features
        assert after.topics == before.topics
        assert after.configs == before.configs
        assert after.next_producer_id == before.next_producer_id
        assert {b: (r.epoch, r.fenced) for b, r in after.cluster.brokers.items()} == {
            b: (r.epoch, r.fenced) for b, r in before.cluster.brokers.items()
        }
        assert BrokerState.of(after.cluster.brokers[1]) is BrokerState.ACTIVE
        await second.stop()

    run(scenario())


def test_an_answer_read_from_uncommitted_state_waits_for_that_state_to_commit(
    tmp_path: Path,
) -> None:
    """A second create of a topic whose first create is still uncommitted must not be told
    TOPIC_ALREADY_EXISTS before the first commits (it might never)."""

    async def scenario() -> None:
        node = Controller(tmp_path)
        await node.start()
        epoch = await node.register(1)
        await node.heartbeat(1, epoch, offset=node.image.offset)
        finished: list[str] = []

        async def create(label: str) -> Any:
            result = await node.create_topic("twice")
            finished.append(label)
            return result

        first, second = await asyncio.gather(create("first"), create("second"))
        assert first.error_code == ErrorCode.none
        assert second.error_code == ErrorCode.topic_already_exists
        assert finished == ["first", "second"]
        assert node.image.topics.get("twice") is not None
        await node.stop()

    run(scenario())


def test_a_topic_too_big_for_one_batch_is_created_in_several(tmp_path: Path) -> None:
    """7,000 partitions encode to more than max.message.bytes: once refused by the log with
    RecordTooLargeError (the client timed out), now committed in several batches."""

    async def scenario() -> None:
        node = Controller(tmp_path)
        await node.start()
        await node.heartbeat(1, await node.register(1), offset=node.image.offset)
        before = node.raft.log.end_offset()
        created = await node.create_topic("big", 7000)
        assert created.error_code == ErrorCode.none
        topic = node.image.topics.get("big")
        assert topic is not None and len(topic.partitions) == 7000
        data = node.raft.log.read(before, 64 * 1024 * 1024)
        sizes = [header.batch_length + 12 for _, header in iter_batches(data)]
        assert len(sizes) > 1
        assert max(sizes) <= node.raft.log.storage.config.max_message_bytes
        await node.stop()

    run(scenario())


def test_one_request_may_not_generate_more_than_the_user_op_limit(tmp_path: Path) -> None:
    async def scenario() -> None:
        node = Controller(tmp_path)
        await node.start()
        await node.heartbeat(1, await node.register(1), offset=node.image.offset)
        refused = await node.create_topic("huge", MAX_RECORDS_PER_USER_OP)
        assert refused.error_code == ErrorCode.policy_violation
        assert node.image.topics.get("huge") is None
        await node.stop()

    run(scenario())


@pytest.mark.parametrize("acls_enabled", [False, True])
def test_acls_are_committed_by_the_controller_only_with_an_authorizer(
    tmp_path: Path, acls_enabled: bool
) -> None:
    """CreateAcls and DeleteAcls through the running controller: records committed into
    the image with an authorizer configured; SECURITY_DISABLED without one."""

    async def scenario() -> None:
        node = Controller(tmp_path, acls_enabled=acls_enabled)
        await node.start()
        create = request_module(30, 3)
        creation = create.AclCreation(
            resource_type=2,
            resource_name="orders",
            resource_pattern_type=3,
            principal="User:alice",
            host="*",
            operation=3,
            permission_type=3,
        )
        created = await node.call(30, 3, create.CreateAclsRequest(creations=(creation,)))
        (result,) = created.results
        if not acls_enabled:
            assert result.error_code == ErrorCode.security_disabled
            assert node.image.acls == {}
            await node.stop()
            return
        assert result.error_code == ErrorCode.none
        (acl,) = node.image.acls.values()  # committed before the answer
        assert (acl.resource_name, acl.principal) == ("orders", "User:alice")
        delete = request_module(31, 3)
        wanted = delete.DeleteAclsFilter(
            resource_type_filter=1,
            resource_name_filter=None,
            pattern_type_filter=1,
            principal_filter="User:alice",
            host_filter=None,
            operation=1,
            permission_type=1,
        )
        deleted = await node.call(31, 3, delete.DeleteAclsRequest(filters=(wanted,)))
        assert [len(r.matching_acls) for r in deleted.filter_results] == [1]
        assert node.image.acls == {}
        await node.stop()

    run(scenario())


def test_kraft_version_upgrade_takes_offsets_the_next_registration_does_not_reuse(
    tmp_path: Path,
) -> None:
    """UpdateFeatures kraft.version=1 has the quorum append its own control batch (two
    records the controller did not propose). A broker registering in the same turn must
    still get the offset of its RegisterBroker record as its epoch."""

    async def scenario() -> None:
        node = Controller(tmp_path)
        node.directory_id = uuid.UUID(int=77)
        await node.start()
        await eventually(lambda: METADATA_VERSION_FEATURE in node.image.features)
        module = request_module(57, 1)
        update = module.FeatureUpdateKey(
            feature="kraft.version", max_version_level=1, upgrade_type=1
        )
        request = module.UpdateFeaturesRequest(feature_updates=(update,), validate_only=False)
        control_at = node.raft.log.end_offset()
        # gather runs the upgrade's handler first, then the registration's, in one turn.
        upgraded, epoch = await asyncio.gather(node.call(57, 1, request), node.register(1))
        assert upgraded.error_code == ErrorCode.none
        assert node.raft.kraft_version() == 1
        assert epoch == control_at + 2  # after KRaftVersionRecord and VotersRecord
        data = node.raft.log.read(0, 1 << 20)
        placed = {}
        for position, header in iter_batches(data):
            header, records = decode_batch(data, position)
            for index, record in enumerate(records):
                if not header.is_control:
                    decoded = decode_record(record.value or b"", header.base_offset + index)
                    placed[header.base_offset + index] = decoded
                elif header.base_offset + index == control_at:
                    assert decode_control_key(record.key) is ControlRecordType.KRAFT_VERSION
        registration = placed[epoch]
        assert isinstance(registration, RegisterBroker) and registration.broker_epoch == epoch
        assert node.image.cluster.brokers[1].epoch == epoch
        await node.stop()

    run(scenario())
