"""``kraft-server metadata-shell`` over a real node's metadata log and over its snapshot."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from tests.kraft.procs import KRAFT_SERVER, single_node, wait_until


@pytest.fixture(scope="module")
def metadata_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A stopped node's __cluster_metadata-0 holding two topics and a topic config, with
    snapshots taken every few records (so the directory has snapshots and a log after)."""
    root = tmp_path_factory.mktemp("shell")
    procs, bootstrap = single_node(
        root, {"metadata.log.max.record.bytes.between.snapshots": "2000"}
    )
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for future in admin.create_topics(
            [NewTopic("orders", 3, 1), NewTopic("audit", 1, 1, config={"retention.ms": "123456"})]
        ).values():
            future.result(30)
        compact = ConfigEntry(
            "cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET
        )
        resource = ConfigResource("topic", "orders", incremental_configs=[compact])
        admin.incremental_alter_configs([resource])[resource].result(30)
        directory = root / "data1" / "__cluster_metadata-0"
        wait_until(lambda: any(directory.glob("*.checkpoint")), "a metadata snapshot is written")
        procs.stop_all()  # no batch is half-written while the tests read the directory
        yield directory
    finally:
        procs.cleanup()


def shell(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [KRAFT_SERVER, "metadata-shell", *args], input=stdin, capture_output=True, text=True
    )


def test_the_shell_shows_topics_partitions_configs_and_brokers(metadata_dir: Path) -> None:
    done = shell("--directory", str(metadata_dir), "ls", "/image/topics/byName")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["audit", "orders"]
    done = shell("--directory", str(metadata_dir), "ls", "/image/topics/byName/orders/partitions")
    assert done.stdout.split() == ["0", "1", "2"]
    done = shell(
        "--directory",
        str(metadata_dir),
        "cat",
        "/image/configs/TOPIC/orders/cleanup.policy",
        "/image/configs/TOPIC/audit/retention.ms",
        "/image/topics/byName/orders/partitions/0/replicas",
        "/image/topics/byName/orders/partitions/0/leader",
        "/image/cluster/1/fenced",
    )
    assert done.returncode == 0, done.stderr
    # The node was stopped with a controlled shutdown: fenced, its partitions leaderless.
    assert done.stdout.split() == ["compact", "123456", "(1,)", "-1", "True"]


def test_commands_from_stdin_keep_the_working_directory(metadata_dir: Path) -> None:
    script = "cd /image/topics\npwd\ncd byName/orders\nls\ncat id\nexit\nls /\n"
    done = shell("--directory", str(metadata_dir), stdin=script)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:3] == ["/image/topics", "id", "partitions"]
    topic_id = lines[3]
    by_id = shell("--directory", str(metadata_dir), "cat", f"/image/topics/byId/{topic_id}")
    assert by_id.stdout.strip() == "orders"
    assert len(lines) == 4  # nothing after exit ran


def test_find_and_tree_walk_the_whole_subtree(metadata_dir: Path) -> None:
    found = shell("--directory", str(metadata_dir), "find", "/image/topics/byName/audit")
    assert "/image/topics/byName/audit/partitions/0/isr" in found.stdout.splitlines()
    tree = shell("--directory", str(metadata_dir), "tree", "/image/topics/byName/audit")
    assert "            replicas: (1,)" in tree.stdout.splitlines()


def test_a_snapshot_file_alone_is_an_image_too(metadata_dir: Path) -> None:
    newest = sorted(metadata_dir.glob("*.checkpoint"))[-1]
    done = shell("--snapshot", str(newest), "cat", "/image/provenance/offset")
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) == int(newest.name.split("-")[0])


def test_bad_paths_commands_and_sources_are_one_line_errors(
    metadata_dir: Path, tmp_path: Path
) -> None:
    done = shell("--directory", str(metadata_dir), stdin="cat /nope\nfly\nls /image\n")
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "/nope: no such file or directory",
        "fly: unknown command (try help)",
    ]
    assert "topics" in done.stdout.split()  # the shell carried on after the errors
    done = shell("--directory", str(tmp_path), "ls")
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"kraft-server metadata-shell: {tmp_path}: no snapshot and no log segment"
    )


def test_a_corrupt_batch_ends_the_replay_with_a_note(metadata_dir: Path, tmp_path: Path) -> None:
    """A batch failing its CRC is where a node's recovery would cut the log: the image stops
    before it, and the shell says so instead of showing what follows."""
    copy = tmp_path / "__cluster_metadata-0"
    shutil.copytree(metadata_dir, copy)
    # Without its snapshots the whole log (one segment from offset 0) is replayed, so the
    # corrupt batch is read whatever the newest snapshot covered.
    for snapshot in copy.glob("*.checkpoint"):
        snapshot.unlink()
    assert [p.name for p in copy.glob("*.log")] == [f"{0:020d}.log"]
    whole = shell("--directory", str(copy), "cat", "/image/provenance/offset")
    segment = sorted(copy.glob("*.log"))[-1]
    data = bytearray(segment.read_bytes())
    data[-1] ^= 0xFF  # the last record of the last batch
    segment.write_bytes(bytes(data))
    done = shell("--directory", str(copy), "cat", "/image/provenance/offset")
    assert done.returncode == 0, done.stderr
    assert done.stderr.startswith(f"note: {segment}: stopped at a bad batch")
    assert int(done.stdout) < int(whole.stdout)
