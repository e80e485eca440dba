"""What a follower does with each kind of answer from its leader (broker/fetcher.py), on a
real log: records are appended with the leader's offsets and epochs, a diverging epoch cuts
the log where the two agree, and a fetch below the leader's log start restarts the log
there. No network: answers are handed to the fetcher as its connection would."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from kio.schema.errors import ErrorCode

from broker.fetcher import FetcherConfig, ReplicaFetcher, _Fetching
from broker.partition import Partition
from broker.producer_state import ProducerState
from log.batch import encode_batch, iter_batches
from log.config import LogConfig
from log.log import Log
from log.records import Record
from log.runtime import real_runtime
from metadata.image import PartitionRegistration

ME, LEADER = 2, 1


def leader_batch(base_offset: int, epoch: int, *values: bytes) -> bytes:
    records = [Record(None, value, 0) for value in values]
    return encode_batch(records, base_offset=base_offset, partition_leader_epoch=epoch)


def answer(**fields: Any) -> Any:
    data = {
        "error_code": ErrorCode.none,
        "diverging_epoch": SimpleNamespace(epoch=-1, end_offset=-1),
        "records": b"",
        "high_watermark": 0,
        "log_start_offset": 0,
    }
    return SimpleNamespace(**(data | fields))


async def follower(root: Path) -> tuple[ReplicaFetcher, _Fetching, Log]:
    runtime = real_runtime(seed=1)
    log = await Log.open(runtime, str(root / "t-0"), LogConfig())
    partition = Partition("t", 0, uuid.UUID(int=1), log, ProducerState(), ME)
    partition.apply(PartitionRegistration((1, 2), (1, 2), LEADER, 3, 3), now_ms=0)
    fetcher = ReplicaFetcher(ME, LEADER, lambda _b: None, runtime.clock, FetcherConfig())
    return fetcher, _Fetching(partition, 3), log


def offsets_and_epochs(log: Log) -> list[tuple[int, int]]:
    data = bytes(log.read(log.log_start_offset, 1 << 20).records)
    return [(h.base_offset, h.partition_leader_epoch) for _, h in iter_batches(data)]


def test_records_keep_the_leader_s_offsets_and_epochs_and_the_hw_stops_at_the_log_end(
    tmp_path: Path,
) -> None:
    async def main() -> tuple[list[tuple[int, int]], int, list[tuple[int, int]]]:
        fetcher, fetching, log = await follower(tmp_path)
        try:
            records = leader_batch(0, 1, b"a", b"b") + leader_batch(2, 3, b"c")
            await fetcher._apply_partition(fetching, answer(records=records, high_watermark=9), 0)
            epochs = [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.entries()]
            return offsets_and_epochs(log), fetching.partition.high_watermark, epochs
        finally:
            await fetcher.close()
            await log.close()

    batches, hw, epochs = asyncio.run(main())
    assert batches == [(0, 1), (2, 3)]
    assert hw == 3  # the leader's is 9, but this log ends at 3
    assert epochs == [(1, 0), (3, 2)]


def test_a_diverging_epoch_cuts_the_log_where_leader_and_follower_agree(
    tmp_path: Path,
) -> None:
    async def main() -> list[tuple[int, int]]:
        fetcher, fetching, log = await follower(tmp_path)
        try:
            # Ours: epoch 1 at 0..1, epoch 2 at 2..3 (a leader of epoch 2 nobody followed).
            log.append_as_follower(leader_batch(0, 1, b"a", b"b") + leader_batch(2, 2, b"x", b"y"))
            # The leader never had epoch 2: its epoch 1 ends at 2.
            diverging = SimpleNamespace(epoch=1, end_offset=2)
            await fetcher._apply_partition(fetching, answer(diverging_epoch=diverging), 4)
            return offsets_and_epochs(log)
        finally:
            await fetcher.close()
            await log.close()

    assert asyncio.run(main()) == [(0, 1)]


def test_a_fetch_below_the_leader_s_log_start_restarts_the_log_there(tmp_path: Path) -> None:
    async def main() -> tuple[int, int]:
        fetcher, fetching, log = await follower(tmp_path)
        try:
            log.append_as_follower(leader_batch(0, 1, b"a"))
            out_of_range = answer(error_code=ErrorCode.offset_out_of_range, log_start_offset=50)
            await fetcher._apply_partition(fetching, out_of_range, 1)
            return log.log_start_offset, log.log_end_offset
        finally:
            await fetcher.close()
            await log.close()

    assert asyncio.run(main()) == (50, 50)


def test_a_session_error_means_a_full_fetch_next_and_a_mismatched_answer_backs_off(
    tmp_path: Path,
) -> None:
    async def main() -> tuple[object, ...]:
        fetcher, fetching, log = await follower(tmp_path)
        try:
            fetcher._partitions[fetching.partition.key] = fetching
            ready = {fetching.partition.key: fetching}
            first, sent = fetcher._build(ready)
            session = fetcher._session
            full = (first.session_id, first.session_epoch, len(first.topics))  # type: ignore[attr-defined]
            opened = SimpleNamespace(
                error_code=ErrorCode.none,
                session_id=9,
                responses=(SimpleNamespace(topic="t", partitions=(answer(partition_index=0),)),),
            )
            await fetcher._apply(opened, sent)
            second, sent = fetcher._build(ready)
            incremental = (second.session_id, second.session_epoch, len(second.topics))  # type: ignore[attr-defined]
            lost = SimpleNamespace(
                error_code=ErrorCode.fetch_session_id_not_found, session_id=0, responses=()
            )
            await fetcher._apply(lost, sent)  # no exception: no back-off
            after_error = (session.session_id, session.epoch)
            _, sent = fetcher._build(ready)  # full again
            stranger = SimpleNamespace(
                error_code=ErrorCode.none,
                session_id=10,
                responses=(SimpleNamespace(topic="u", partitions=(answer(partition_index=0),)),),
            )
            try:
                await fetcher._apply(stranger, sent)
                mismatch = None
            except ConnectionError as error:
                mismatch = str(error)
            return full, incremental, after_error, mismatch
        finally:
            await fetcher.close()
            await log.close()

    full, incremental, after_error, mismatch = asyncio.run(main())
    assert full == (0, 0, 1)  # a full fetch naming the partition
    assert incremental == (9, 1, 0)  # nothing changed: no partition named
    assert after_error == (0, 0)  # the next fetch is full, asking for a new session
    assert mismatch == "the fetch answer does not match the fetch session"


def test_a_replica_whose_log_went_offline_stops_fetching(tmp_path: Path) -> None:
    """Its log dir failed (KIP-858): were it still fetching, the leader would count it
    caught up on offsets it can no longer write and put it back into the ISR."""

    async def main() -> tuple[bool, bool, int]:
        fetcher, fetching, log = await follower(tmp_path)
        try:
            fetcher._partitions[fetching.partition.key] = fetching
            fetcher._drop_offline()
            kept_while_online = fetching.partition.key in fetcher._partitions
            log.take_offline(OSError(5, "I/O error"))
            fetcher._drop_offline()
            return kept_while_online, fetching.partition.key in fetcher._partitions, len(fetcher)
        finally:
            await fetcher.close()
            await log.close()

    assert asyncio.run(main()) == (True, False, 0)
