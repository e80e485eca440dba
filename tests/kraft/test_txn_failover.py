"""Transaction coordinator failover on the shipped 3-controller + 3-broker layout
(``__transaction_state`` and ``__consumer_offsets`` at their defaults: replication factor 3,
the transaction log's min ISR 2): a transactional producer commits an offset in every
transaction while the broker coordinating its transactional id, and its group, is SIGKILLed.
Both ids move to other brokers, which load their state; every acknowledged commit is kept,
no transaction is left open, and the markers reach an offsets partition led by another
broker over the inter-broker listener.

The client side follows librdkafka's rules: every call is bounded by a timeout, a retriable
error is retried, an abortable one aborts, and a fatal one (the producer was fenced, for
instance because its transaction timed out at the new coordinator) is answered by a new
instance, which fences whatever the old one left open.

librdkafka 2.16 keeps a group coordinator it has decommissioned (a broker its Metadata no
longer lists: Kafka, and this broker, leave fenced brokers out) in its coordinator cache,
and a TxnOffsetCommit waiting for that broker to come up is only woken by another
connection changing state (confluentinc/librdkafka#5511); send_offsets_to_transaction()
ignores its timeout meanwhile (#5456). Against Apache Kafka as here, the wait ends when the
broker closes an idle connection, after ``connections.max.idle.ms`` (10 minutes): CI's stall.
The producer here closes its own idle connections after a few seconds, which wakes it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from broker.group.records import partition_for
from tests.kraft.procs import Processes, wait_until
from tests.kraft.test_replication import BROKERS, bootstrap, running_cluster
from tests.kraft.test_txn_clients import describe

TXN_ID = "failover-tx"
TOPIC = "txn-failover-in"
PARTITIONS = 3
TRANSACTIONS = 40
KILL_AFTER = 10
STEP_S = 30  # librdkafka's timeout for each transactional call
ATTEMPTS = 10  # a retriable failure retried, or one transaction tried again, this often
GUARD_S = 3 * STEP_S  # a call still blocked after this ignored its own timeout
# Shorter than a transaction's timeout (20 s), longer than a healthy step: librdkafka#5511.
CLIENT_IDLE_MS = 3_000

T = TypeVar("T")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Processes, dict]]:
    props = {
        "offsets.topic.num.partitions": str(PARTITIONS),
        "transaction.state.log.num.partitions": str(PARTITIONS),
        "group.initial.rebalance.delay.ms": "0",
    }
    with running_cluster(tmp_path_factory.mktemp("txn-failover"), props) as running:
        yield running


def leaders(servers: str, topic_name: str) -> dict[int, int] | None:
    """Partition -> leader of a topic, once every partition has one."""
    admin = AdminClient({"bootstrap.servers": servers})
    topic = admin.list_topics(topic_name, timeout=5).topics.get(topic_name)
    if topic is None or topic.error is not None or len(topic.partitions) < PARTITIONS:
        return None
    found = {index: p.leader for index, p in topic.partitions.items()}
    return found if all(leader >= 0 for leader in found.values()) else None


def leader_of(servers: str, topic_name: str, key: str) -> int | None:
    found = leaders(servers, topic_name)
    return None if found is None else found[partition_for(key, PARTITIONS)]


def guarded(call: Callable[..., T], *args: object) -> T:
    """``call`` on a thread, failing the test if it outlives its own timeout by far: a
    send_offsets_to_transaction() blocked on librdkafka#5511 would otherwise hang the run."""
    outcome: list[T] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            outcome.append(call(*args))
        except BaseException as raised:  # handed to the caller's thread
            failure.append(raised)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(GUARD_S)
    if thread.is_alive():
        raise AssertionError(f"{call.__name__} still blocked {GUARD_S}s after it was called")
    if failure:
        raise failure[0]
    return outcome[0]


def retried(call: Callable[..., object], *args: object) -> None:
    """librdkafka's rule: a call failing with a retriable error (its timeout included) is
    called again, which resumes the same operation."""
    for attempt in range(ATTEMPTS):
        try:
            guarded(call, *args)
            return
        except KafkaException as raised:
            if not raised.args[0].retriable() or attempt == ATTEMPTS - 1:
                raise


def producer_for(servers: str) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": servers,
            "transactional.id": TXN_ID,
            "transaction.timeout.ms": 20_000,
            "connections.max.idle.ms": CLIENT_IDLE_MS,
        }
    )
    retried(producer.init_transactions, STEP_S)
    return producer


def recovered(producer: Producer, error: KafkaError, servers: str) -> Producer:
    """After a failed step: abort and go on; a fatal error, at the step or in the abort
    (the coordinator fenced this epoch), needs a new instance, which fences what is left."""
    if not error.fatal():
        try:
            retried(producer.abort_transaction, STEP_S)
            return producer
        except KafkaException as raised:
            if not raised.args[0].fatal():
                raise
    return producer_for(servers)


def coordinated_group(servers: str, coordinator: int) -> str:
    """A group id whose ``__consumer_offsets`` partition the transaction coordinator leads,
    so that the kill takes both coordinators, as in CI's failure."""
    admin = AdminClient({"bootstrap.servers": servers})
    for future in admin.describe_consumer_groups(["txn-failover-probe"]).values():
        future.exception(STEP_S)  # its FindCoordinator creates the topic; any answer will do
    led = wait_until(lambda: leaders(servers, "__consumer_offsets"), "offsets partitions")
    found = next(
        (
            group
            for group in (f"txn-failover-{n}" for n in range(1000))
            if led[partition_for(group, PARTITIONS)] == coordinator
        ),
        None,
    )
    assert found is not None, f"broker {coordinator} leads no offsets partition: {led}"
    return found


def kill_coordinator(procs: Processes, ports: dict, producer: Producer) -> int:
    """SIGKILL the transactional id's coordinator (the group's too) and wait until the id
    has moved; then the client's Metadata leaves the killed broker out and the client
    decommissions it while its coordinator cache still names it: CI's path, every run."""
    killed = wait_until(
        lambda: leader_of(bootstrap(ports), "__transaction_state", TXN_ID), "the coordinator"
    )
    procs.kill(killed)
    alive = bootstrap(ports, tuple(b for b in BROKERS if b != killed))
    wait_until(
        lambda: leader_of(alive, "__transaction_state", TXN_ID) not in (None, killed),
        "the transactional id moves",
    )
    producer.list_topics(timeout=STEP_S)
    return killed


def test_a_killed_transaction_coordinator_loses_no_committed_transaction(
    cluster: tuple[Processes, dict],
) -> None:
    procs, ports = cluster
    servers = bootstrap(ports)
    admin = AdminClient({"bootstrap.servers": servers})
    for future in admin.create_topics([NewTopic(TOPIC, 1, 3)]).values():
        future.result(STEP_S)
    producer = producer_for(servers)
    coordinator = wait_until(
        lambda: leader_of(servers, "__transaction_state", TXN_ID), "a coordinator"
    )
    group_id = coordinated_group(servers, coordinator)
    metadata = Consumer({"bootstrap.servers": servers, "group.id": group_id})
    group = metadata.consumer_group_metadata()
    metadata.close()
    acknowledged: list[int] = []
    killed = None
    for offset in range(1, TRANSACTIONS + 1):
        for _ in range(ATTEMPTS):
            try:
                producer.begin_transaction()
                producer.produce(TOPIC, str(offset).encode())
                retried(
                    producer.send_offsets_to_transaction,
                    [TopicPartition(TOPIC, 0, offset)],
                    group,
                    STEP_S,
                )
                retried(producer.commit_transaction, STEP_S)
                break
            except KafkaException as raised:  # not acknowledged: this offset is tried again
                producer = recovered(producer, raised.args[0], servers)
        else:
            raise AssertionError(f"transaction {offset} failed {ATTEMPTS} times")
        acknowledged.append(offset)
        if offset == KILL_AFTER:
            killed = kill_coordinator(procs, ports, producer)
    assert killed is not None and acknowledged == list(range(1, TRANSACTIONS + 1))
    alive = tuple(b for b in BROKERS if b != killed)
    servers = bootstrap(ports, alive)
    moved = wait_until(lambda: leader_of(servers, "__transaction_state", TXN_ID), "it moves")
    assert moved != killed
    host, port = ports[moved]
    state = wait_until(
        lambda: (
            (found := describe(f"{host}:{port}", TXN_ID)).transaction_state == "CompleteCommit"
            and found
        ),
        "the last transaction completes",
    )
    assert state.partitions == frozenset()
    reader = Consumer({"bootstrap.servers": servers, "group.id": group_id})
    committed = reader.committed([TopicPartition(TOPIC, 0)], timeout=STEP_S)[0].offset
    reader.close()
    assert committed == TRANSACTIONS  # the last acknowledged transaction's offset
