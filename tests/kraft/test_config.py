"""server.properties parsing and validation, and kraft-server format's refusals."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kraft.bootstrap import BOOTSTRAP_FILE, METADATA_VERSION, read_bootstrap
from kraft.config import ConfigError, config_from_properties, load_config, unknown_key_warnings
from kraft.properties import parse_properties
from kraft.storage import StorageError, check_and_lock, format_dirs, random_uuid
from log.fs import RealFileSystem
from metadata.records import ELR_FEATURE, METADATA_VERSION_FEATURE, FeatureLevel
from raft.snapshot import SnapshotError

BIN = Path(sys.executable).parent
BASE = {
    "process.roles": "broker,controller",
    "node.id": "1",
    "controller.quorum.voters": "1@localhost:9093",
    "listeners": "PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093",
    "controller.listener.names": "CONTROLLER",
    "log.dirs": "./data",
}


def test_properties_syntax_comments_continuations_and_separators() -> None:
    text = "# comment\n! also\n\na=1\nb : two\nc three\nlong=x,\\\n   y\n a = spaced \n"
    assert parse_properties(text) == {
        "a": "spaced",
        "b": "two",
        "c": "three",
        "long": "x,y",
    }


def test_shipped_default_config_is_the_single_node_combined_server() -> None:
    config = load_config(str(Path(__file__).parents[2] / "config" / "server.properties"))
    assert config.process_roles == {"broker", "controller"}
    assert config.controller_quorum_voters == {1: ("localhost", 9093)}
    assert [e.port for e in config.listeners] == [9092, 9093]
    assert config.metadata_dir == "./data"


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("node.id", "one", "node.id: Input should be a valid integer"),
        ("process.roles", "zookeeper", "process.roles"),
        ("controller.quorum.voters", "1-localhost", "controller.quorum.voters"),
        ("listeners", "localhost:9092", "listeners"),
        ("controller.quorum.voters", "2@localhost:9093", "node.id 1 is a controller but not"),
        ("controller.listener.names", "NOPE", "controller.listener.names: none of NOPE"),
        ("broker.session.timeout.ms", "0", "broker.session.timeout.ms: Input should be greater"),
        ("num.partitions", "-1", "num.partitions: Input should be greater than 0"),
        ("unclean.leader.election.enable", "maybe", "unclean.leader.election.enable"),
        ("inter.broker.listener.name", "EXTERNAL", "inter.broker.listener.name: EXTERNAL"),
        ("listeners", "CONTROLLER://localhost:9093", "a broker needs a non-controller listener"),
        ("offsets.topic.num.partitions", "0", "offsets.topic.num.partitions: must be at least"),
        ("group.max.size", "many", "group.max.size: not an integer"),
        ("log.dirs", "", "log.dirs: Value error, must name at least one directory"),
        ("log.dirs", " , ", "log.dirs: Value error, must name at least one directory"),
    ],
)
def test_bad_values_fail_with_one_line_naming_the_key(key: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        config_from_properties({**BASE, key: value})
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_missing_key_is_named() -> None:
    props = dict(BASE)
    del props["log.dirs"]
    with pytest.raises(ConfigError, match=r"log\.dirs: Field required"):
        config_from_properties(props)


def test_format_refuses_formatted_dirs_foreign_clusters_and_bad_ids(tmp_path: Path) -> None:
    config = config_from_properties({**BASE, "log.dirs": str(tmp_path / "d")})
    fs = RealFileSystem()
    cluster = random_uuid()
    assert asyncio.run(format_dirs(fs, config, cluster, ignore_formatted=False)) == [
        str(tmp_path / "d")
    ]
    before = (tmp_path / "d" / "meta.properties").read_text()
    with pytest.raises(StorageError, match="already formatted"):
        asyncio.run(format_dirs(fs, config, cluster, ignore_formatted=False))
    assert asyncio.run(format_dirs(fs, config, cluster, ignore_formatted=True)) == []
    with pytest.raises(StorageError, match="formatted for cluster"):
        asyncio.run(format_dirs(fs, config, random_uuid(), ignore_formatted=True))
    with pytest.raises(StorageError, match="not a valid UUID"):
        asyncio.run(format_dirs(fs, config, "not-a-uuid", ignore_formatted=True))
    assert (tmp_path / "d" / "meta.properties").read_text() == before
    assert f"cluster.id={cluster}" in before and "node.id=1" in before
    # The bootstrap metadata sits beside meta.properties in the metadata dir.
    assert read_bootstrap(fs, str(tmp_path / "d")) == [
        FeatureLevel(METADATA_VERSION_FEATURE, METADATA_VERSION),
        FeatureLevel(ELR_FEATURE, 1),  # KIP-966 on, as Kafka 4.1 starts a new cluster
    ]


def test_a_corrupt_bootstrap_file_is_refused(tmp_path: Path) -> None:
    config = config_from_properties({**BASE, "log.dirs": str(tmp_path / "d")})
    fs = RealFileSystem()
    asyncio.run(format_dirs(fs, config, random_uuid(), ignore_formatted=False))
    path = tmp_path / "d" / BOOTSTRAP_FILE
    data = bytearray(path.read_bytes())
    data[-10] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(SnapshotError):
        read_bootstrap(fs, str(tmp_path / "d"))


def test_cli_reports_config_errors_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.properties"
    path.write_text("process.roles=controller\nnode.id=x\n")
    result = subprocess.run(
        [str(BIN / "kraft-server"), "start", str(path)], capture_output=True, text=True
    )
    assert result.returncode == 1
    assert result.stderr.strip().count("\n") == 0
    assert "node.id" in result.stderr


def test_unknown_keys_warn_naming_the_closest_known_key() -> None:
    config = config_from_properties(
        {**BASE, "log.retention.hourz": "5", "auto.create.topic.enable": "false", "zz": "1"}
    )
    assert unknown_key_warnings(config) == [
        "The configuration 'auto.create.topic.enable' was supplied but isn't a known config; "
        "did you mean 'auto.create.topics.enable'?",
        "The configuration 'log.retention.hourz' was supplied but isn't a known config; "
        "did you mean 'log.retention.hours'?",
        "The configuration 'zz' was supplied but isn't a known config",
    ]


def test_the_replication_keys_the_broker_reads_raise_no_warning() -> None:
    """ReplicationConfig and its fetcher read these; they were warned about as unknown."""
    keys = {
        "replica.lag.time.max.ms": "10000",
        "replica.fetch.max.bytes": "1048576",
        "replica.fetch.wait.max.ms": "500",
        "transaction.partition.verification.enable": "false",
    }
    assert unknown_key_warnings(config_from_properties({**BASE, **keys})) == []


def test_the_shipped_configs_and_kafkas_usual_keys_raise_no_warning() -> None:
    root = Path(__file__).parents[2] / "config"
    for path in [root / "server.properties", *sorted((root / "cluster").iterdir())]:
        assert unknown_key_warnings(load_config(str(path))) == [], path
    usual = {
        "log.retention.check.interval.ms": "1000",
        "compression.type": "zstd",
        "log.cleaner.enable": "false",
        "log.cleaner.threads": "2",
        "log.cleaner.backoff.ms": "100",
        "log.cleaner.min.cleanable.ratio": "0.1",
    }
    assert unknown_key_warnings(config_from_properties({**BASE, **usual})) == []


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("listeners", "PLAINTEXT://localhost:99999,CONTROLLER://localhost:9093"),
        ("controller.quorum.voters", "1@localhost:0"),
    ],
)
def test_ports_out_of_range_are_refused(key: str, value: str) -> None:
    with pytest.raises(ConfigError, match=f"{key}: .* is not in "):
        config_from_properties({**BASE, key: value})


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("log.segment.bytes", "1"),
        ("log.retention.hours", "soon"),
        ("log.retention.check.interval.ms", "x"),
        ("log.cleaner.enable", "sometimes"),
        ("log.cleaner.dedupe.buffer.size", "0"),
    ],
)
def test_a_bad_log_key_is_refused_at_load_naming_it(key: str, value: str) -> None:
    with pytest.raises(ConfigError, match=f"configuration {re.escape(key)}: "):
        config_from_properties({**BASE, key: value})


def test_a_binary_server_properties_is_one_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_bytes(b"node.id=1\n\x91\xff\x00binary")
    with pytest.raises(ConfigError, match="not a properties file"):
        load_config(str(path))
    path.write_bytes(b"node.id=1\n\x00\x01")
    with pytest.raises(ConfigError, match="NUL bytes"):
        load_config(str(path))


def test_a_log_dir_that_cannot_be_locked_is_one_clear_error(tmp_path: Path) -> None:
    class ReadOnly(RealFileSystem):
        def lock(self, path: str) -> None:
            raise PermissionError(13, "Permission denied", path)

    config = config_from_properties({**BASE, "log.dirs": str(tmp_path / "d")})
    asyncio.run(format_dirs(RealFileSystem(), config, random_uuid(), ignore_formatted=False))
    with pytest.raises(StorageError, match=r"cannot lock log dir .*/d: Permission denied"):
        check_and_lock(ReadOnly(), config)


def test_the_shipped_cluster_keeps_its_data_out_of_the_single_nodes_tree() -> None:
    root = Path(__file__).parents[2] / "config"
    single = [Path(d).resolve() for d in load_config(str(root / "server.properties")).all_dirs]
    for path in sorted((root / "cluster").iterdir()):
        for directory in load_config(str(path)).all_dirs:
            resolved = Path(directory).resolve()
            assert not any(resolved.is_relative_to(d) for d in single), (path, directory)


@pytest.mark.parametrize(
    "dirs",
    [
        {"log.dirs": "/d,/d/orders-0"},
        {"log.dirs": "/d", "metadata.log.dir": "/d/meta-0"},
    ],
)
def test_a_log_dir_inside_another_is_refused(dirs: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match=r"log\.dirs: /d/.* is inside /d"):
        config_from_properties({**BASE, **dirs})
