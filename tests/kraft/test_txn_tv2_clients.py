"""librdkafka (confluent-kafka 2.16.1, librdkafka 2.16.0) on a transaction version 2 cluster.

librdkafka has no client side of KIP-890 part 2: it sends EndTxn v1, Produce v10 and
AddPartitionsToTxn itself whatever ``transaction.version`` the cluster finalized. So it is
the "client without TV2" of a TV2 cluster: its transactions keep TV1 semantics (one epoch
for the producer's life, no bump per transaction) and commit and abort exactly as before,
beside the Java client's TV2 ones (tests/kraft/test_txn_java.py).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.kraft.procs import single_node
from tests.kraft.test_txn_clients import DEADLINE_S, PROPS, settled
from tests.kraft.test_txn_java import read_committed

TOPIC = "tv2-librdkafka"


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    procs, address = single_node(tmp_path_factory.mktemp("data"), PROPS)
    try:
        admin = AdminClient({"bootstrap.servers": address})
        for future in admin.create_topics([NewTopic(TOPIC, 1, 1)]).values():
            future.result(DEADLINE_S)
        yield address
    finally:
        procs.cleanup()


def test_librdkafka_keeps_tv1_semantics_on_a_tv2_cluster(bootstrap: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "rd-tv1"})
    producer.init_transactions(DEADLINE_S)
    first = settled(bootstrap, "rd-tv1", "Empty")
    assert first.producer_epoch == 0
    for value, commit in (("one", True), ("two", False), ("three", True)):
        producer.begin_transaction()
        producer.produce(TOPIC, value.encode(), partition=0)
        assert producer.flush(DEADLINE_S) == 0
        if commit:
            producer.commit_transaction(DEADLINE_S)
        else:
            producer.abort_transaction(DEADLINE_S)
        done = settled(bootstrap, "rd-tv1", "CompleteCommit" if commit else "CompleteAbort")
        # TV1: the epoch InitProducerId gave stays; a TV2 EndTxn would have bumped it.
        assert (done.producer_id, done.producer_epoch) == (first.producer_id, 0)
    assert read_committed(bootstrap, TOPIC, 0) == ["one", "three"]
