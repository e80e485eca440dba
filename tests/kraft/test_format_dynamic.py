"""kraft-server format for a dynamic quorum (KIP-853): --standalone, --initial-controllers,
--no-initial-controllers, the bootstrap checkpoint's voter set, and the refusals."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from kraft.bootstrap import read_bootstrap_quorum
from kraft.config import ConfigError, config_from_properties
from kraft.storage import (
    StorageError,
    format_dirs,
    metadata_directory_id,
    parse_initial_controllers,
    print_uuid,
    random_uuid,
)
from log.fs import RealFileSystem
from raft.voters import KRAFT_VERSION_DYNAMIC, Endpoint

DYNAMIC = {
    "process.roles": "controller",
    "node.id": "1",
    "controller.quorum.bootstrap.servers": "127.0.0.1:9093",
    "listeners": "CONTROLLER://127.0.0.1:9093",
    "controller.listener.names": "CONTROLLER",
}


def formatted(tmp_path: Path, props: dict[str, str], **flags: object) -> Path:
    directory = tmp_path / f"d{props['node.id']}"
    config = config_from_properties({**props, "log.dirs": str(directory)})
    asyncio.run(
        format_dirs(RealFileSystem(), config, random_uuid(), ignore_formatted=False, **flags)
    )
    return directory


def test_standalone_writes_this_node_as_the_only_voter(tmp_path: Path) -> None:
    directory = formatted(tmp_path, DYNAMIC, standalone=True)
    fs = RealFileSystem()
    quorum = read_bootstrap_quorum(fs, str(directory))
    assert quorum.kraft_version == KRAFT_VERSION_DYNAMIC
    assert quorum.voters is not None and quorum.voters.ids() == (1,)
    voter = quorum.voters.voters[0]
    assert voter.directory_id == metadata_directory_id(fs, str(directory))
    assert voter.endpoints == (Endpoint("CONTROLLER", "127.0.0.1", 9093),)


def test_initial_controllers_fix_each_directory_id(tmp_path: Path) -> None:
    ids = [random_uuid() for _ in range(3)]
    text = ",".join(f"{i + 1}@127.0.0.{i + 1}:9093:{ids[i]}" for i in range(3))
    voters = parse_initial_controllers(text)
    directory = formatted(tmp_path, {**DYNAMIC, "node.id": "2"}, initial_controllers=voters)
    fs = RealFileSystem()
    own = metadata_directory_id(fs, str(directory))
    assert own is not None and print_uuid(own) == ids[1]
    assert read_bootstrap_quorum(fs, str(directory)).voters == voters


def test_no_initial_controllers_knows_no_voter(tmp_path: Path) -> None:
    directory = formatted(tmp_path, DYNAMIC, no_initial_controllers=True)
    quorum = read_bootstrap_quorum(RealFileSystem(), str(directory))
    assert (quorum.kraft_version, quorum.voters) == (KRAFT_VERSION_DYNAMIC, None)


def test_a_static_quorum_is_formatted_as_before(tmp_path: Path) -> None:
    static = {**DYNAMIC, "controller.quorum.voters": "1@127.0.0.1:9093"}
    del static["controller.quorum.bootstrap.servers"]
    directory = formatted(tmp_path, static)
    quorum = read_bootstrap_quorum(RealFileSystem(), str(directory))
    assert (quorum.kraft_version, quorum.voters) == (None, None)
    with pytest.raises(StorageError, match=r"need controller\.quorum\.bootstrap\.servers"):
        formatted(tmp_path, {**static, "node.id": "1", "log.dirs": "x"}, standalone=True)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({}, "needs --standalone, --initial-controllers or --no-initial-controllers"),
        ({"standalone": True, "no_initial_controllers": True}, "only one of"),
    ],
)
def test_a_dynamic_controller_must_say_how_the_quorum_starts(
    tmp_path: Path, flags: dict[str, object], message: str
) -> None:
    with pytest.raises(StorageError, match=message):
        formatted(tmp_path, DYNAMIC, **flags)


@pytest.mark.parametrize(
    "text", ["1@h:9093", "x@h:9093:AAAAAAAAAAAAAAAAAAAAAA", "1@h:9093:short", "1@h:p:" + "A" * 22]
)
def test_bad_initial_controllers_are_refused(text: str) -> None:
    with pytest.raises(StorageError, match="--initial-controllers"):
        parse_initial_controllers(text)


def test_initial_controllers_must_name_this_controller(tmp_path: Path) -> None:
    voters = parse_initial_controllers(f"5@h:9093:{random_uuid()}")
    with pytest.raises(StorageError, match=r"does not name node\.id 1"):
        formatted(tmp_path, DYNAMIC, initial_controllers=voters)


def test_a_config_needs_voters_or_bootstrap_servers() -> None:
    props = dict(DYNAMIC, **{"log.dirs": "d"})
    del props["controller.quorum.bootstrap.servers"]
    with pytest.raises(ConfigError, match=r"controller\.quorum\.bootstrap\.servers is required"):
        config_from_properties(props)
    with pytest.raises(ConfigError, match="is not host:port"):
        config_from_properties({**props, "controller.quorum.bootstrap.servers": "nohost"})
