"""Kafka's own group coordinator serde (kafka-group-coordinator 4.1.0) reads the KIP-848
records kraft-py writes: every kind, and tombstones, decode to the values we stored."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import kafka_tools as tools
from tests.broker.test_group_consumer import T1, Client, Harness
from tests.kafka_tools import kafka_tools  # noqa: F401  (pytest fixture: installs once)

pytestmark = pytest.mark.usefixtures("kafka_tools")
DECODER = Path(__file__).resolve().parent.parent / "java" / "DecodeGroupRecords.java"


def test_kafkas_serde_reads_every_consumer_group_record_we_write() -> None:
    h = Harness({"t1": (T1, 3)})
    a, b = Client(h, "a", instance_id="i-a"), Client(h, "b")
    for _ in range(3):
        a.heartbeat()
        b.heartbeat()
    b.leave()
    assert {key[:2] for key, _ in h.log.entries} == {bytes([0, kind]) for kind in range(3, 9)}
    args = [f"{key.hex()}:{'' if value is None else value.hex()}" for key, value in h.log.entries]
    lines = tools.run(str(DECODER), *args).stdout.splitlines()
    assert len(lines) == len(args)
    text = "\n".join(lines)
    assert "ConsumerGroupMemberMetadataValue(instanceId='i-a'" in text
    assert "subscribedTopicNames=[t1]" in text and "rebalanceTimeoutMs=30000" in text
    assert "ConsumerGroupMetadataValue(epoch=" in text
    assert "ConsumerGroupPartitionMetadataValue(topics=[TopicMetadata(" in text
    assert "topicName='t1', numPartitions=3" in text
    assert "ConsumerGroupTargetAssignmentMetadataValue(assignmentEpoch=" in text
    assert "ConsumerGroupCurrentMemberAssignmentValue(memberEpoch=" in text
    assert "partitions=[0, 1, 2]" in text  # T1 is printed as Kafka's base64 Uuid:
    assert "state=1, assignedPartitions=[TopicPartitions(topicId=AAAAAAAAAAAAAAAAAAAAAQ, " in text
    assert "ConsumerGroupMemberMetadataKey(groupId='g', memberId='b'), value=null" in text
