"""server.properties parsing and validation, and kraft-server format's refusals."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from kraft.bootstrap import BOOTSTRAP_FILE, METADATA_VERSION, read_bootstrap
from kraft.config import ConfigError, config_from_properties, load_config
from kraft.properties import parse_properties
from kraft.storage import StorageError, format_dirs, random_uuid
from log.fs import RealFileSystem
from metadata.records import METADATA_VERSION_FEATURE, FeatureLevel
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
        FeatureLevel(METADATA_VERSION_FEATURE, METADATA_VERSION)
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
