"""meta.properties: what ``kraft-server format`` writes and ``start`` insists on.

Every log dir (and the metadata dir) carries ``meta.properties`` (version=1, cluster.id,
node.id, directory.id), written atomically. ``start`` refuses unformatted dirs, dirs of
another cluster or node, and dirs another process has locked.
"""

from __future__ import annotations

import base64
import errno
import os
import uuid

from kraft.bootstrap import write_bootstrap
from kraft.config import ServerConfig
from kraft.properties import format_properties, parse_properties
from log.fs import FileSystem, read_all, write_atomic
from log.manager import META_PROPERTIES
from metadata.records import MetadataRecord
from raft.voters import CONTROLLER_LISTENER, Endpoint, Voter, VoterSet

LOCK_FILE = ".lock"


class StorageError(Exception):
    """A log dir cannot be formatted or used; the message says which and why."""


def random_uuid() -> str:
    """A cluster or directory id as Kafka prints them: 16 random bytes, URL-safe base64.

    Like Kafka's Uuid.randomUuid it never returns the zero id or an id starting with '-'
    (which would read as a command-line flag).
    """
    while True:
        raw = uuid.uuid4().bytes
        text = base64.urlsafe_b64encode(raw).decode().rstrip("=")
        if raw != bytes(16) and not text.startswith("-"):
            return text


def parse_uuid(text: str) -> uuid.UUID:
    """A Kafka Uuid as printed (22 characters of URL-safe base64); ValueError otherwise."""
    try:
        raw = base64.urlsafe_b64decode(text + "==")
    except ValueError:
        raw = b""
    if len(text) != 22 or len(raw) != 16 or raw == bytes(16):
        raise ValueError(f"{text!r} is not a directory id (22 characters of base64)")
    return uuid.UUID(bytes=raw)


def print_uuid(value: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")


def parse_initial_controllers(text: str) -> VoterSet:
    """``--initial-controllers id@host:port:directoryId,...`` (Kafka's format)."""
    voters = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        node, at, rest = item.partition("@")
        address, colon, directory = rest.rpartition(":")
        host, colon2, port = address.rpartition(":")
        if not at or not colon or not colon2 or not node.isdigit() or not port.isdigit():
            raise StorageError(f"--initial-controllers: {item!r} is not id@host:port:directoryId")
        try:
            directory_id = parse_uuid(directory)
        except ValueError as error:
            raise StorageError(f"--initial-controllers: {error}") from None
        endpoint = Endpoint(CONTROLLER_LISTENER, host.strip("[]"), int(port))
        voters.append(Voter(int(node), directory_id, (endpoint,)))
    try:
        return VoterSet(tuple(voters))
    except ValueError as error:
        raise StorageError(f"--initial-controllers: {error}") from None


def metadata_directory_id(fs: FileSystem, directory: str) -> uuid.UUID | None:
    """The directory.id of a formatted directory as a UUID (what KIP-853 voter keys carry),
    or None if it has none that parses."""
    meta = read_meta(fs, directory) or {}
    try:
        raw = base64.urlsafe_b64decode(meta.get("directory.id", "") + "==")
    except ValueError:
        return None
    return uuid.UUID(bytes=raw) if len(raw) == 16 else None


def check_cluster_id(cluster_id: str) -> None:
    """Kafka's rule: a cluster id is a base64url UUID (22 characters, 16 bytes)."""
    try:
        raw = base64.urlsafe_b64decode(cluster_id + "==")
    except ValueError:
        raw = b""
    if len(cluster_id) != 22 or len(raw) != 16:
        raise StorageError(
            f"cluster id {cluster_id!r} is not a valid UUID (use kraft-server random-uuid)"
        )


def read_meta(fs: FileSystem, directory: str) -> dict[str, str] | None:
    """The directory's meta.properties, or None if it is not formatted."""
    path = os.path.join(directory, META_PROPERTIES)
    if not fs.exists(path):
        return None
    return parse_properties(read_all(fs, path).decode(), path)


async def format_dirs(
    fs: FileSystem,
    config: ServerConfig,
    cluster_id: str,
    *,
    ignore_formatted: bool,
    timestamp_ms: int = 0,
    standalone: bool = False,
    initial_controllers: VoterSet | None = None,
    no_initial_controllers: bool = False,
    bootstrap_records: tuple[MetadataRecord, ...] = (),
) -> list[str]:
    """Write meta.properties into every dir, and the bootstrap metadata into the metadata
    dir; returns the dirs it formatted.

    A controller of a dynamic quorum (controller.quorum.bootstrap.servers) must say how the
    quorum starts, as Kafka's ``kafka-storage format`` does: ``standalone`` (this node is
    the only voter), ``initial_controllers`` (this node's metadata dir gets the directory id
    its entry names) or ``no_initial_controllers`` (it joins a running quorum as an observer,
    to be added with AddRaftVoter). A static quorum (controller.quorum.voters) takes none."""
    check_cluster_id(cluster_id)
    chosen = sum((standalone, initial_controllers is not None, no_initial_controllers))
    controller = "controller" in config.process_roles
    if chosen > 1:
        raise StorageError(
            "only one of --standalone, --initial-controllers, --no-initial-controllers"
        )
    if chosen and not config.dynamic_quorum:
        raise StorageError(
            "--standalone, --initial-controllers and --no-initial-controllers need "
            "controller.quorum.bootstrap.servers instead of controller.quorum.voters"
        )
    if controller and config.dynamic_quorum and not chosen:
        raise StorageError(
            "a controller of a dynamic quorum needs --standalone, --initial-controllers or "
            "--no-initial-controllers"
        )
    metadata_dir_id: str | None = None
    voters: VoterSet | None = None
    if initial_controllers is not None:
        own = initial_controllers.get(config.node_id)
        if controller and own is None:
            raise StorageError(f"--initial-controllers does not name node.id {config.node_id}")
        voters = initial_controllers
        if own is not None and own.directory_id is not None:
            metadata_dir_id = print_uuid(own.directory_id)
    elif standalone:
        metadata_dir_id = random_uuid()
        endpoint = config.controller_endpoint()
        host = endpoint.host or "localhost"
        voters = VoterSet(
            (
                Voter(
                    config.node_id,
                    parse_uuid(metadata_dir_id),
                    (Endpoint(endpoint.name, host, endpoint.port),),
                ),
            )
        )
    formatted = []
    for directory in config.all_dirs:
        _check_is_dir(fs, directory)
        meta = read_meta(fs, directory) if fs.is_dir(directory) else None
        if meta is not None:
            if meta.get("cluster.id") != cluster_id:
                raise StorageError(
                    f"{directory} is formatted for cluster {meta.get('cluster.id')}, "
                    f"not {cluster_id}"
                )
            if not ignore_formatted:
                raise StorageError(
                    f"{directory} is already formatted (use --ignore-formatted to skip it)"
                )
            continue
        try:
            fs.mkdir(directory)
        except OSError as error:
            raise StorageError(f"cannot create log dir {directory}: {error.strerror}") from None
        props = {
            "version": "1",
            "cluster.id": cluster_id,
            "node.id": str(config.node_id),
            "directory.id": random_uuid(),
        }
        if directory == config.metadata_dir and metadata_dir_id is not None:
            props["directory.id"] = metadata_dir_id
        try:
            if directory == config.metadata_dir:
                await write_bootstrap(
                    fs,
                    directory,
                    timestamp_ms,
                    bootstrap_records,
                    dynamic=config.dynamic_quorum,
                    voters=voters,
                )
            await write_atomic(
                fs, os.path.join(directory, META_PROPERTIES), format_properties(props).encode()
            )
        except OSError as error:
            raise StorageError(f"cannot write to log dir {directory}: {error.strerror}") from None
        formatted.append(directory)
    return formatted


def _check_is_dir(fs: FileSystem, directory: str) -> None:
    if fs.exists(directory) and not fs.is_dir(directory):
        raise StorageError(f"log dir {directory} is not a directory")


def check_and_lock(fs: FileSystem, config: ServerConfig) -> str:
    """Verify every dir is formatted for one cluster and this node, lock it; the cluster id."""
    cluster_ids = set()
    for directory in config.all_dirs:
        _check_is_dir(fs, directory)
        meta = read_meta(fs, directory) if fs.is_dir(directory) else None
        if meta is None:
            raise StorageError(f"{directory} is not formatted: run kraft-server format first")
        if meta.get("node.id") != str(config.node_id):
            raise StorageError(
                f"{directory} belongs to node {meta.get('node.id')}, not node.id {config.node_id}"
            )
        cluster_ids.add(meta.get("cluster.id", ""))
        try:
            fs.lock(os.path.join(directory, LOCK_FILE))
        except OSError as error:
            if error.errno == errno.EAGAIN:
                raise StorageError(
                    f"{directory} is locked by another kraft-server process"
                ) from None
            raise StorageError(f"cannot lock log dir {directory}: {error.strerror}") from None
    if len(cluster_ids) != 1:
        raise StorageError(f"log dirs disagree on the cluster id: {sorted(cluster_ids)}")
    return cluster_ids.pop()
