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
    bootstrap_records: tuple[MetadataRecord, ...] = (),
) -> list[str]:
    """Write meta.properties into every dir, and the bootstrap metadata into the metadata
    dir; returns the dirs it formatted."""
    check_cluster_id(cluster_id)
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
        try:
            if directory == config.metadata_dir:
                await write_bootstrap(fs, directory, timestamp_ms, bootstrap_records)
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
