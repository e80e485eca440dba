"""LogManager: loading, the clean shutdown marker, recovery, checkpoints, placement across
log dirs, leftover cleanup, and the scheduled tasks (run in virtual time)."""

from __future__ import annotations

import asyncio
import errno
import logging
import random
import selectors
from collections.abc import Coroutine
from typing import Any

import pytest

from log.batch import encode_batch, iter_batches
from log.checkpoint import CheckpointError, OffsetCheckpointFile
from log.config import LogConfig, LogManagerConfig
from log.descriptors import OutOfDescriptorsError
from log.fs import read_all, write_atomic
from log.log import KafkaStorageError
from log.manager import CLEAN_SHUTDOWN_FILE, LogManager, parse_topic_partition
from log.records import Record
from log.runtime import Runtime
from sim.disk import SimDisk

NOW_MS = 1_700_000_000_000


class FakeClock:
    def __init__(self) -> None:
        self.now = NOW_MS

    def now_ms(self) -> int:
        return self.now


class _VirtualSelector(selectors.DefaultSelector):
    loop: VirtualTimeLoop

    def select(self, timeout: float | None = None):  # type: ignore[override]
        if timeout is None:
            raise RuntimeError("virtual loop would block forever")
        self.loop.virtual_now += max(0.0, timeout)
        return super().select(0)


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        self.virtual_now = 0.0
        selector = _VirtualSelector()
        selector.loop = self
        super().__init__(selector)

    def time(self) -> float:
        return self.virtual_now


def run_virtual(coro: Coroutine[Any, Any, Any]) -> Any:
    loop = VirtualTimeLoop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()


def batch(ts: int = NOW_MS) -> bytes:
    return encode_batch([Record(b"k", b"v" * 40, ts)])


class Node:
    """A disk plus the runtime of its current incarnation."""

    def __init__(self, dirs: list[str] | None = None, **config: Any) -> None:
        self.disk = SimDisk(random.Random(3))
        self.clock = FakeClock()
        self.dirs = dirs or ["/data"]
        self.config = LogConfig(**{"file_delete_delay_ms": 0, **config})

    def manager(self, **kwargs: Any) -> LogManager:
        runtime = Runtime(self.disk.fs(), self.clock, random.Random(5))
        return LogManager(runtime, self.dirs, self.config, **kwargs)


def test_partition_dir_names_parse_like_kafka() -> None:
    assert parse_topic_partition("orders-3") == ("orders", 3)
    assert parse_topic_partition("my-topic-12") == ("my-topic", 12)
    assert parse_topic_partition("__cluster_metadata-0") == ("__cluster_metadata", 0)
    assert parse_topic_partition("orders") is None
    assert parse_topic_partition("orders-0.abc-delete") is None


def test_no_partition_log_ever_shares_the_metadata_logs_directory() -> None:
    async def run() -> None:
        node = Node()
        fs = node.disk.fs()
        fs.mkdir("/data")
        for name in ("__cluster_metadata-0", "__cluster_metadata-1"):
            fs.mkdir(f"/data/{name}")
            fs.open(f"/data/{name}/00000000000000000000.log", create=True).close()
        manager = node.manager()
        await manager.startup()
        assert manager.all_logs() == []  # the quorum's, never loaded as partitions
        for partition in (0, 1):
            with pytest.raises(ValueError, match="metadata log"):
                await manager.get_or_create_log("__cluster_metadata", partition)
        assert manager.all_logs() == []
        assert fs.list_dir("/data/__cluster_metadata-0") == ["00000000000000000000.log"]
        await manager.shutdown()

    run_virtual(run())


def test_another_nodes_formatted_dir_inside_a_log_dir_is_never_a_partition(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """config/cluster once put ./data/broker-4 inside the single node's ./data: that node
    loaded it as partition 4 of topic "broker" and renamed it a stray."""

    async def run() -> list[object]:
        node = Node()
        fs = node.disk.fs()
        fs.mkdir("/data")
        fs.mkdir("/data/broker-4")
        fs.open("/data/broker-4/meta.properties", create=True).close()
        fs.mkdir("/data/broker-4/orders-0")
        manager = node.manager()
        await manager.startup()
        logs = [tp for tp, _ in manager.all_logs()]
        await manager.shutdown()
        assert sorted(fs.list_dir("/data/broker-4")) == ["meta.properties", "orders-0"]
        return logs

    with caplog.at_level("WARNING", logger="log.manager"):
        assert run_virtual(run()) == []
    assert "/data/broker-4 is a formatted log dir (it has meta.properties)" in caplog.text


def test_a_fresh_log_dir_does_not_claim_to_recover(caplog: pytest.LogCaptureFixture) -> None:
    async def run() -> None:
        manager = Node().manager()
        await manager.startup()
        await manager.shutdown()

    with caplog.at_level("WARNING", logger="log.manager"):
        run_virtual(run())
    assert "no clean shutdown marker" not in caplog.text


def test_clean_shutdown_writes_marker_and_restart_skips_recovery() -> None:
    async def run() -> None:
        node = Node()
        manager = node.manager()
        await manager.startup()
        assert manager.recovered_from_unclean_shutdown  # fresh dir: no marker yet
        log = await manager.get_or_create_log("orders", 0)
        for _ in range(5):
            log.append_as_leader(batch(), 1)
        await manager.shutdown(broker_epoch=42)
        fs = node.disk.fs()
        assert fs.exists(f"/data/{CLEAN_SHUTDOWN_FILE}")
        assert OffsetCheckpointFile(fs, "/data/recovery-point-offset-checkpoint").read() == {
            ("orders", 0): 5
        }
        node.disk.crash()  # everything above was synced: a crash now changes nothing
        restarted = node.manager()
        await restarted.load_logs()
        assert not restarted.recovered_from_unclean_shutdown
        assert restarted.previous_broker_epoch == 42  # KIP-966: the registration names it
        assert not node.disk.fs().exists(f"/data/{CLEAN_SHUTDOWN_FILE}")
        reloaded = restarted.get_log("orders", 0)
        assert reloaded is not None and reloaded.log_end_offset == 5
        # The marker's removal is durable: a crash now means recovery next time.
        node.disk.crash()
        again = node.manager()
        await again.load_logs()
        assert again.recovered_from_unclean_shutdown
        assert again.previous_broker_epoch == -1

    asyncio.run(run())


def test_a_marker_without_a_readable_epoch_names_none() -> None:
    """An older (empty) or garbled marker still means a clean shutdown of the logs, but no
    broker epoch: the broker registers as after an unclean shutdown (KIP-966's safe side)."""

    async def run() -> None:
        node = Node()
        for content in (b"", b"not json", b'{"version":0,"brokerEpoch":"7"}'):
            manager = node.manager()
            await manager.load_logs()
            await manager.shutdown(broker_epoch=7)
            fs = node.disk.fs()
            await write_atomic(fs, f"/data/{CLEAN_SHUTDOWN_FILE}", content)
            restarted = node.manager()
            await restarted.load_logs()
            assert not restarted.recovered_from_unclean_shutdown
            assert restarted.previous_broker_epoch == -1
            await restarted.shutdown()

    asyncio.run(run())


def test_unclean_restart_recovers_torn_tail_from_the_recovery_point() -> None:
    async def run() -> None:
        node = Node(segment_bytes=300)
        manager = node.manager()
        await manager.load_logs()
        log = await manager.get_or_create_log("orders", 0)
        for _ in range(6):
            log.append_as_leader(batch(), 1)
        await log.flush()
        await manager.checkpoint_log_recovery_offsets()
        for _ in range(3):
            log.append_as_leader(batch(), 1)
        active = log.active_segment.log
        active.append(batch()[:50])  # a torn write in flight
        node.disk.crash()
        restarted = node.manager()
        await restarted.load_logs()
        assert restarted.recovered_from_unclean_shutdown
        recovered = restarted.get_log("orders", 0)
        assert recovered is not None
        assert 6 <= recovered.log_end_offset <= 9
        assert recovered.recovery_point == recovered.log_end_offset

    asyncio.run(run())


def test_logs_are_spread_over_log_dirs_and_found_again() -> None:
    async def run() -> None:
        node = Node(dirs=["/d1", "/d2"])
        manager = node.manager()
        await manager.load_logs()
        for partition in range(4):
            await manager.get_or_create_log("t", partition)
        assert [manager.log_dir_of("t", p) for p in range(4)] == ["/d1", "/d2", "/d1", "/d2"]
        await manager.shutdown()
        restarted = node.manager()
        await restarted.load_logs()
        assert [tp for tp, _ in restarted.all_logs()] == [("t", p) for p in range(4)]
        assert restarted.log_dir_of("t", 3) == "/d2"

    asyncio.run(run())


def test_high_watermark_checkpoint_round_trips_per_dir() -> None:
    async def run() -> None:
        node = Node(dirs=["/d1", "/d2"])
        manager = node.manager()
        await manager.load_logs()
        await manager.get_or_create_log("a", 0)
        await manager.get_or_create_log("a", 1)
        await manager.checkpoint_high_watermarks({("a", 0): 7, ("a", 1): 3})
        assert manager.read_high_watermarks() == {("a", 0): 7, ("a", 1): 3}
        assert read_all(node.disk.fs(), "/d2/replication-offset-checkpoint") == b"0\n1\na 1 3\n"
        with pytest.raises(ValueError):
            await manager.checkpoint_high_watermarks({("b", 0): 1})

    asyncio.run(run())


def test_corrupt_recovery_point_checkpoint_means_full_recovery() -> None:
    async def run() -> None:
        node = Node()
        manager = node.manager()
        await manager.load_logs()
        log = await manager.get_or_create_log("a", 0)
        log.append_as_leader(batch(), 0)
        await manager.shutdown()
        fs = node.disk.fs()
        fs.open("/data/recovery-point-offset-checkpoint").pwrite(0, b"0\n9\n")
        restarted = node.manager()
        await restarted.load_logs()
        assert restarted.had_clean_shutdown == {"/data": False}
        reloaded = restarted.get_log("a", 0)
        assert reloaded is not None and reloaded.log_end_offset == 1

    asyncio.run(run())


def test_corrupt_log_start_offset_checkpoint_refuses_to_guess() -> None:
    async def run() -> None:
        node = Node()
        manager = node.manager()
        await manager.load_logs()
        await manager.get_or_create_log("a", 0)
        await manager.shutdown()
        node.disk.fs().open("/data/log-start-offset-checkpoint").pwrite(0, b"0\n1\na zero 5\n")
        with pytest.raises(CheckpointError) as info:
            await node.manager().load_logs()
        assert info.value.path == "/data/log-start-offset-checkpoint"
        assert info.value.line_number == 3

    asyncio.run(run())


def test_load_removes_leftover_and_orphaned_files() -> None:
    async def run() -> None:
        node = Node()
        manager = node.manager()
        await manager.load_logs()
        log = await manager.get_or_create_log("a", 0)
        log.append_as_leader(batch(), 0)
        await manager.shutdown()
        fs = node.disk.fs()
        for name in [
            "00000000000000000007.log.deleted",
            "00000000000000000007.index.cleaned",
            "00000000000000000009.log.swap",
            "leader-epoch-checkpoint.tmp",
            "00000000000000000042.index",
        ]:
            fs.open(f"/data/a-0/{name}").close()
        restarted = node.manager()
        await restarted.load_logs()
        assert fs.list_dir("/data/a-0") == [
            "00000000000000000000.index",
            "00000000000000000000.log",
            "00000000000000000000.timeindex",
            "leader-epoch-checkpoint",
        ]

    asyncio.run(run())


def test_delete_records_and_truncation_checkpoint_the_dir_at_once() -> None:
    async def run() -> None:
        node = Node(segment_bytes=300)
        manager = node.manager()
        await manager.load_logs()
        log = await manager.get_or_create_log("a", 0)
        for _ in range(10):
            log.append_as_leader(batch(), 0)
        await log.delete_records(4)
        fs = node.disk.fs()
        assert OffsetCheckpointFile(fs, "/data/log-start-offset-checkpoint").read() == {("a", 0): 4}
        await log.flush()
        await log.truncate_to(6)
        assert OffsetCheckpointFile(fs, "/data/recovery-point-offset-checkpoint").read() == {
            ("a", 0): 6
        }

    asyncio.run(run())


def test_scheduled_tasks_run_retention_and_checkpoints_in_virtual_time() -> None:
    async def run() -> None:
        node = Node(segment_bytes=200, retention_ms=60_000)
        manager = node.manager(manager_config=LogManagerConfig(flush_scheduler_interval_ms=1000))
        await manager.startup()
        log = await manager.get_or_create_log("a", 0)
        log.update_config(LogConfig(segment_bytes=200, retention_ms=60_000, flush_ms=5_000))
        for _ in range(6):
            log.append_as_leader(batch(NOW_MS), 0)
        node.clock.now += 120_000
        fs = node.disk.fs()
        checkpoint = OffsetCheckpointFile(fs, "/data/recovery-point-offset-checkpoint")
        await asyncio.sleep(29)  # the initial task delay is 30 s
        assert len(log.segments) > 1
        assert checkpoint.read() == {}  # written at load, before the log existed
        await asyncio.sleep(2)  # the flusher (flush.ms elapsed) and retention have run
        assert log.recovery_point == log.log_end_offset == 6
        await asyncio.sleep(60)  # the next recovery-point checkpoint sees the flush
        assert checkpoint.read() == {("a", 0): 6}
        assert log.log_start_offset == 6  # retention removed every expired segment
        assert len(log.segments) == 1
        await manager.shutdown()

    run_virtual(run())


def test_delete_log_renames_its_directory_and_removes_it_after_the_delay() -> None:
    async def run() -> None:
        node = Node(file_delete_delay_ms=60_000)
        fs = node.disk.fs()
        manager = node.manager()
        await manager.load_logs()
        log = await manager.get_or_create_log("gone", 0)
        log.append_as_leader(batch(), 0)
        assert await manager.delete_log("gone", 0, "d1") == "/data/gone-0.d1-delete"
        assert manager.get_log("gone", 0) is None
        assert not fs.exists("/data/gone-0") and fs.is_dir("/data/gone-0.d1-delete")
        assert OffsetCheckpointFile(fs, "/data/recovery-point-offset-checkpoint").read() == {}
        await asyncio.sleep(59)
        assert fs.is_dir("/data/gone-0.d1-delete")  # a read holding its files may finish
        await asyncio.sleep(2)
        assert not fs.exists("/data/gone-0.d1-delete")
        # A shutdown before the delay leaves the dir to the next load, which removes it.
        log = await manager.get_or_create_log("gone", 0)
        await manager.delete_log("gone", 0, "d2")
        await manager.shutdown()
        assert fs.is_dir("/data/gone-0.d2-delete")
        again = node.manager()
        await again.load_logs()
        assert not fs.exists("/data/gone-0.d2-delete") and again.all_logs() == []
        await again.shutdown()

    run_virtual(run())


def test_a_disk_error_takes_its_log_dir_offline_and_the_other_dirs_keep_serving(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Kafka's LogDirFailureChannel: a failed fsync in /a takes every log of /a offline
    (KAFKA_STORAGE_ERROR), says so once, writes nothing more there (no clean shutdown
    marker), and /b keeps serving and gets the new logs; the next start recovers /a."""

    async def run() -> None:
        node = Node(dirs=["/a", "/b"])
        manager = node.manager()
        await manager.startup()
        logs = [await manager.get_or_create_log("orders", i) for i in range(3)]
        assert [manager.log_dir_of("orders", i) for i in range(3)] == ["/a", "/b", "/a"]
        for log in logs:
            log.append_as_leader(batch(), 1)
        node.disk.fail_fsyncs(1)
        with pytest.raises(OSError):
            await logs[0].flush()
        assert list(manager.offline_dirs) == ["/a"]
        with pytest.raises(KafkaStorageError):
            logs[2].append_as_leader(batch(), 1)  # the same dir, never itself failed
        logs[1].append_as_leader(batch(), 1)
        assert manager.log_dir_of("orders", 1) == "/b"
        await manager.get_or_create_log("orders", 3)
        assert manager.log_dir_of("orders", 3) == "/b"  # only live dirs get new logs
        assert not manager.all_dirs_offline.is_set()
        await manager.shutdown()
        fs = node.disk.fs()
        assert fs.exists(f"/b/{CLEAN_SHUTDOWN_FILE}")
        assert not fs.exists(f"/a/{CLEAN_SHUTDOWN_FILE}")
        restarted = node.manager()
        await restarted.load_logs()
        assert restarted.had_clean_shutdown == {"/a": False, "/b": True}
        assert restarted.get_log("orders", 1).log_end_offset == 2  # type: ignore[union-attr]

    with caplog.at_level(logging.ERROR):
        asyncio.run(run())
    offline = [r for r in caplog.records if "is offline after a disk error" in r.getMessage()]
    assert len(offline) == 1 and "/a" in offline[0].getMessage()


def test_a_checkpoint_write_that_fails_takes_its_dir_offline_in_one_line_and_spares_the_others(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The periodic recovery-point checkpoint hit a failing disk in a sweep and printed a
    traceback every period; now the failing dir goes offline with one line, the next dir's
    checkpoint is still written, and the task itself does not fail."""

    async def run() -> None:
        node = Node(dirs=["/a", "/b"])
        manager = node.manager()
        await manager.load_logs()
        for i in range(2):
            (await manager.get_or_create_log("orders", i)).append_as_leader(batch(), 1)
        node.disk.fail_fsyncs(1)  # the first checkpoint written, /a's, fails
        await manager.checkpoint_log_recovery_offsets()
        assert list(manager.offline_dirs) == ["/a"]
        fs = node.disk.fs()
        assert OffsetCheckpointFile(fs, "/b/recovery-point-offset-checkpoint").read() == {
            ("orders", 1): 0
        }
        await manager.checkpoint_log_start_offsets()  # the offline dir is skipped
        assert OffsetCheckpointFile(fs, "/b/log-start-offset-checkpoint").read() == {
            ("orders", 1): 0
        }

    with caplog.at_level(logging.WARNING):
        asyncio.run(run())
    assert not [r for r in caplog.records if r.exc_info]
    offline = [r for r in caplog.records if "is offline after a disk error" in r.getMessage()]
    assert len(offline) == 1 and "/a" in offline[0].getMessage()


def test_new_logs_stop_short_of_the_descriptor_reserve() -> None:
    """Issue 22: partitions were created until EMFILE. A new log now needs three
    descriptors plus half the reserve free; what the node must do itself still fits."""

    async def run() -> None:
        node = Node()
        manager = node.manager(manager_config=LogManagerConfig(open_files_reserve=10))
        await manager.startup()
        # Room for exactly two logs: 3 each, plus 5 (half the reserve), plus the reserve.
        node.disk.descriptor_limit = node.disk.open_handles + 2 * 3 + 5 + 10
        await manager.get_or_create_log("a", 0)
        await manager.get_or_create_log("a", 1)
        with pytest.raises(OutOfDescriptorsError) as refused:
            await manager.get_or_create_log("a", 2)
        assert refused.value.errno == errno.EMFILE
        assert "10 are kept in reserve (open.files.reserve" in str(refused.value)
        assert manager.get_log("a", 2) is None and not manager.offline_dirs
        await manager.checkpoint_log_recovery_offsets()  # the reserve pays for this
        await manager.delete_log("a", 0, "x")
        await manager.get_or_create_log("a", 2)  # freed descriptors make room again
        await manager.shutdown()

    run_virtual(run())


def test_out_of_descriptors_is_not_a_disk_failure(caplog: pytest.LogCaptureFixture) -> None:
    """Issue 22: EMFILE on a checkpoint write took the log dir offline and stopped the node
    ("every log dir has failed"). The write fails, the dir and its logs stay online, and the
    next attempt succeeds once descriptors are free."""

    async def run() -> None:
        node = Node(segment_bytes=200)
        manager = node.manager()
        await manager.startup()
        log = await manager.get_or_create_log("t", 0)
        log.append_as_leader(batch(), 1)
        node.disk.descriptor_limit = node.disk.open_handles  # not one more open succeeds
        await manager.checkpoint_log_recovery_offsets()  # reported once, nothing offline
        with pytest.raises(OSError) as rolled:  # a roll needs new files
            for _ in range(10):
                log.append_as_leader(batch(), 1)
        assert rolled.value.errno == errno.EMFILE
        with pytest.raises(OSError) as checkpointed:
            await manager.checkpoint_high_watermarks({("t", 0): 0})
        assert checkpointed.value.errno == errno.EMFILE
        assert not manager.offline_dirs and log.is_online
        node.disk.descriptor_limit = 1 << 20
        end = log.log_end_offset
        log.append_as_leader(batch(), 1)
        assert log.log_end_offset == end + 1
        await manager.checkpoint_log_recovery_offsets()
        await manager.shutdown()
        assert OffsetCheckpointFile(
            node.disk.fs(), "/data/recovery-point-offset-checkpoint"
        ).read() == {("t", 0): end + 1}

    with caplog.at_level(logging.WARNING):
        run_virtual(run())
    assert "Out of file descriptors in log dir /data" in caplog.text
    assert "offline" not in caplog.text.replace("stays online", "")


def test_more_segment_files_than_descriptors_are_served_by_closing_idle_ones() -> None:
    """Issue 22: every segment file held a descriptor from load to close, so a node with
    more segment files than its open-files limit could not start. Idle files are now closed
    when the node runs into its reserve and reopened on use: reads, writes, a crash and a
    restart under a limit below the number of files all work."""
    values_per_log = 30

    async def read_back(manager: LogManager, partitions: int) -> list[int]:
        counts = []
        for partition in range(partitions):
            log = manager.get_log("t", partition)
            assert log is not None
            records, offset = 0, 0
            while offset < log.log_end_offset:
                data = bytes(log.read(offset, 1 << 20).records)
                for _position, header in iter_batches(data):
                    records += header.last_offset_delta + 1
                    offset = header.next_offset
            counts.append(records)
        return counts

    async def run() -> None:
        node = Node(segment_bytes=300)  # two batches a segment
        config = LogManagerConfig(open_files_reserve=8)
        manager = node.manager(manager_config=config)
        await manager.startup()
        for partition in range(4):
            log = await manager.get_or_create_log("t", partition)
            for _ in range(values_per_log):
                log.append_as_leader(batch(), 1)
            await log.flush(log.log_end_offset)
        files = manager.files.open_files
        assert files > 4 * 3 * 10  # at least ten segments a log, three files a segment
        await manager.shutdown()
        node.disk.crash()  # everything was flushed: nothing is lost
        limit = node.disk.open_handles + files // 2  # room for half of the files at once
        node.disk.descriptor_limit = limit
        restarted = node.manager(manager_config=config)
        await restarted.load_logs()  # more files than the limit allows at once
        assert restarted.files.evictions > 0 and node.disk.open_handles <= limit
        assert await read_back(restarted, 4) == [values_per_log] * 4
        for partition in range(4):  # writes go on, to the active segments
            log = restarted.get_log("t", partition)
            assert log is not None
            log.append_as_leader(batch(), 1)
            await log.flush(log.log_end_offset)
        assert await read_back(restarted, 4) == [values_per_log + 1] * 4
        assert node.disk.open_handles <= limit
        await restarted.shutdown()

    run_virtual(run())
