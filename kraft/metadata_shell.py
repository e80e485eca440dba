"""``kraft-server metadata-shell``: browse the metadata image as a file tree, as Kafka's
``kafka-metadata-shell`` does.

The image is rebuilt offline from a node's ``__cluster_metadata-0`` directory (its newest
snapshot, then every log batch after it) or from one snapshot file, or read from a running
quorum's leader over the controller listener (``--bootstrap-controller``, the way an
observer fetches: kraft/metadata_live.py, up to the leader's high watermark), and replayed
by the same ``MetadataDelta`` the brokers and controllers run, so what the shell shows is
what a node would load. Nothing is written and no lock is taken: it can read the directory
of a running node (a batch being appended at the tail is reported as torn and the image
stops before it).

The tree (paths as Kafka's shell names them where the two have the same thing)::

    /image/provenance/{offset,epoch}
    /image/features/<name>
    /image/cluster/<broker id>/<field>
    /image/topics/byName/<topic>/{id,partitions/<n>/<field>}
    /image/topics/byId/<topic id>          (the topic's name)
    /image/configs/<TOPIC|BROKER|...>/<name>/<key>
    /image/producerIds/nextProducerId

Commands: ``ls``, ``cd``, ``pwd``, ``cat``, ``tree``, ``find``, ``help``, ``exit``. Given on
the command line they run once; otherwise they are read from standard input (with a prompt
on a terminal). A bad path or command is one line on stderr and the shell carries on; the
exit code is 1 if any command failed.
"""

from __future__ import annotations

import dataclasses
import os
import posixpath
import shlex
from collections.abc import Iterator
from typing import TextIO

from kraft.metadata_live import (
    DEFAULT_FETCH_MAX_BYTES,
    DEFAULT_TIMEOUT_S,
    Address,
    LiveReadError,
    read_quorum_log,
)
from log.batch import decode_batch, iter_batches
from log.errors import RecordError
from log.fs import FileSystem, RealFileSystem, read_all
from log.segment import LOG_SUFFIX, parse_base_offset
from metadata.delta import MetadataDelta, MetadataStateError
from metadata.image import EMPTY, MetadataImage
from metadata.records import MetadataRecordError, decode_record
from protocol.connect import Connector
from raft.snapshot import (
    SnapshotError,
    SnapshotId,
    decode_snapshot,
    list_snapshots,
    read_snapshot,
)

# A node of the tree: a directory (name -> node) or a file's text.
Node = dict[str, "Node"] | str

# Kafka's ConfigResource.Type ids, as DescribeConfigs numbers them.
_RESOURCE_TYPES = {2: "TOPIC", 4: "BROKER", 8: "BROKER_LOGGER", 16: "CLIENT_METRICS", 32: "GROUP"}


class ShellError(Exception):
    """A path or a metadata source the shell cannot use (one line for the user)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Loaded:
    """An image and how it was read: the sources used and what stopped the replay early."""

    image: MetadataImage
    sources: tuple[str, ...]
    stopped: str | None = None


def load_image(path: str, fs: FileSystem | None = None) -> Loaded:
    """The image a snapshot file or a metadata log directory holds."""
    fs = fs or RealFileSystem()
    if fs.is_dir(path):
        return _load_directory(fs, path)
    snapshot = SnapshotId.parse(os.path.basename(path))
    if snapshot is None or not fs.exists(path):
        raise ShellError(f"{path}: neither a metadata log directory nor a .checkpoint snapshot")
    delta = MetadataDelta(EMPTY)
    for index, record in enumerate(read_snapshot(fs, os.path.dirname(path) or ".", snapshot)):
        _replay(delta, record.value, index, path)
    return Loaded(delta.apply(snapshot.end_offset, snapshot.epoch), (path,))


def _load_directory(fs: FileSystem, directory: str) -> Loaded:
    snapshots = list_snapshots(fs, directory)
    delta = MetadataDelta(EMPTY)
    sources: list[str] = []
    next_offset, epoch = 0, 0
    if snapshots:
        newest = snapshots[-1]
        where = os.path.join(directory, newest.file_name)
        for index, record in enumerate(read_snapshot(fs, directory, newest)):
            _replay(delta, record.value, index, where)
        sources.append(where)
        next_offset, epoch = newest.end_offset, newest.epoch
    segments = sorted(
        (base, name)
        for name in fs.list_dir(directory)
        if name.endswith(LOG_SUFFIX) and (base := parse_base_offset(name)) is not None
    )
    if not snapshots and not segments:
        raise ShellError(f"{directory}: no snapshot and no log segment")
    stopped = None
    for _, name in segments:
        where = os.path.join(directory, name)
        data = read_all(fs, where)
        sources.append(where)
        try:
            next_offset, epoch = _replay_batches(delta, data, next_offset, epoch, where)
        except _TornBatch as torn:  # a torn tail: what a node's recovery would cut off
            next_offset, epoch = torn.next_offset, torn.epoch
            stopped = f"{where}: stopped at a bad batch ({torn.error})"
            break
    return Loaded(delta.apply(next_offset, epoch), tuple(sources), stopped)


def load_live(
    bootstrap: list[Address],
    timeout_s: float = DEFAULT_TIMEOUT_S,
    max_bytes: int = DEFAULT_FETCH_MAX_BYTES,
    connector: Connector | None = None,
) -> Loaded:
    """The image a running quorum has committed, read from its leader over the controller
    listener (kraft/metadata_live.py, connecting as ``connector`` says) and replayed as a
    directory's snapshot and log are."""
    try:
        live = read_quorum_log(
            bootstrap, timeout_s=timeout_s, max_bytes=max_bytes, connector=connector
        )
    except LiveReadError as error:
        raise ShellError(str(error)) from None
    host, port = live.leader
    where = f"controller {live.leader_id} at {host}:{port}"
    delta = MetadataDelta(EMPTY)
    next_offset, epoch = 0, 0
    snapshot_note = ""
    if live.snapshot is not None:
        name = f"{where}: snapshot {live.snapshot.file_name}"
        try:
            records = decode_snapshot(live.snapshot_data, name)
        except SnapshotError as error:
            raise ShellError(str(error)) from None
        for index, record in enumerate(records):
            _replay(delta, record.value, index, name)
        next_offset, epoch = live.snapshot.end_offset, live.snapshot.epoch
        snapshot_note = f"snapshot {live.snapshot.file_name}, then "
    first = next_offset
    try:
        next_offset, epoch = _replay_batches(delta, bytes(live.log), next_offset, epoch, where)
    except _TornBatch as torn:
        message = f"{where}: a bad batch at offset {torn.next_offset}: {torn.error}"
        raise ShellError(message) from None
    offsets = f"offsets {first}..{next_offset - 1}" if next_offset > first else "no records"
    source = (
        f"{where}, epoch {live.epoch}: {snapshot_note}{offsets} "
        f"(high watermark {live.high_watermark})"
    )
    return Loaded(delta.apply(next_offset, epoch), (source,))


class _TornBatch(Exception):
    """A batch failing its checks; the replay got as far as (next_offset, epoch)."""

    def __init__(self, error: RecordError, next_offset: int, epoch: int) -> None:
        super().__init__(str(error))
        self.error, self.next_offset, self.epoch = error, next_offset, epoch


def _replay_batches(
    delta: MetadataDelta, data: bytes, next_offset: int, epoch: int, where: str
) -> tuple[int, int]:
    """Replay the data records of the batches in ``data`` from ``next_offset`` on (control
    batches are the quorum's, not the image's); the (next offset, epoch) they reach."""
    try:
        for position, header in iter_batches(data):
            if header.last_offset < next_offset:
                continue  # already in the snapshot, or replayed from an earlier segment
            batch_header, records = decode_batch(data, position)
            if not batch_header.is_control:
                for record in records:
                    offset = batch_header.base_offset + (record.offset_delta or 0)
                    _replay(delta, record.value, offset, where)
            next_offset, epoch = batch_header.last_offset + 1, batch_header.partition_leader_epoch
    except RecordError as error:
        raise _TornBatch(error, next_offset, epoch) from None
    return next_offset, epoch


def _replay(delta: MetadataDelta, value: bytes | None, offset: int, where: str) -> None:
    try:
        delta.replay(decode_record(value or b"", offset))
    except (MetadataRecordError, MetadataStateError) as error:
        raise ShellError(f"{where}: offset {offset}: {error}") from None


def image_tree(image: MetadataImage) -> Node:
    """The image as the shell's file tree."""
    brokers: dict[str, Node] = {}
    for broker_id, broker in sorted(image.cluster.brokers.items()):
        brokers[str(broker_id)] = _fields(broker)
    by_name: dict[str, Node] = {}
    by_id: dict[str, Node] = {}
    for topic in sorted(image.topics.by_id.values(), key=lambda t: t.name):
        partitions: dict[str, Node] = {
            str(index): _fields(partition) for index, partition in sorted(topic.partitions.items())
        }
        by_name[topic.name] = {"id": str(topic.topic_id), "partitions": partitions}
        by_id[str(topic.topic_id)] = topic.name
    configs: dict[str, dict[str, Node]] = {}
    for (resource_type, name), values in sorted(image.configs.items()):
        kind = _RESOURCE_TYPES.get(resource_type, str(resource_type))
        configs.setdefault(kind, {})[name or "<default>"] = dict(sorted(values.items()))
    return {
        "image": {
            "provenance": {"offset": str(image.offset), "epoch": str(image.epoch)},
            "features": {name: str(level) for name, level in sorted(image.features.items())},
            "cluster": brokers,
            "topics": {"byName": by_name, "byId": by_id},
            "configs": dict(configs),
            "producerIds": {"nextProducerId": str(image.next_producer_id)},
        }
    }


def _fields(entity: object) -> dict[str, Node]:
    return {item.name: str(getattr(entity, item.name)) for item in dataclasses.fields(entity)}  # type: ignore[arg-type]


class Shell:
    """The commands over one tree; ``cwd`` is an absolute path."""

    def __init__(self, tree: Node, out: TextIO, err: TextIO) -> None:
        self.tree = tree
        self.cwd = "/"
        self.out = out
        self.err = err
        self.failed = False

    def run(self, line: str) -> bool:
        """Run one command line; False once it asks to exit."""
        try:
            words = shlex.split(line)
        except ValueError as error:
            return self._fail(f"bad quoting: {error}")
        if not words:
            return True
        command, args = words[0], words[1:]
        if command in ("exit", "quit"):
            return False
        handler = getattr(self, f"_cmd_{command}", None)
        if handler is None:
            return self._fail(f"{command}: unknown command (try help)")
        try:
            handler(args)
        except ShellError as error:
            return self._fail(str(error))
        return True

    def _fail(self, message: str) -> bool:
        print(message, file=self.err)
        self.failed = True
        return True

    def _resolve(self, path: str) -> tuple[str, Node]:
        absolute = posixpath.normpath(posixpath.join(self.cwd, path))
        node = self.tree
        for part in (p for p in absolute.split("/") if p):
            if not isinstance(node, dict) or part not in node:
                raise ShellError(f"{path}: no such file or directory")
            node = node[part]
        return ("/" if absolute == "//" else absolute), node

    def _cmd_help(self, args: list[str]) -> None:
        print(
            "ls [PATH] | cd [PATH] | pwd | cat PATH... | tree [PATH] | find [PATH] | exit",
            file=self.out,
        )

    def _cmd_pwd(self, args: list[str]) -> None:
        print(self.cwd, file=self.out)

    def _cmd_cd(self, args: list[str]) -> None:
        path, node = self._resolve(args[0] if args else "/")
        if not isinstance(node, dict):
            raise ShellError(f"{args[0]}: not a directory")
        self.cwd = path

    def _cmd_ls(self, args: list[str]) -> None:
        for target in args or ["."]:
            _, node = self._resolve(target)
            names = sorted(node) if isinstance(node, dict) else [posixpath.basename(target)]
            for name in names:
                print(name, file=self.out)

    def _cmd_cat(self, args: list[str]) -> None:
        if not args:
            raise ShellError("cat: which file?")
        for target in args:
            _, node = self._resolve(target)
            if isinstance(node, dict):
                raise ShellError(f"{target}: is a directory")
            print(node, file=self.out)

    def _cmd_tree(self, args: list[str]) -> None:
        path, node = self._resolve(args[0] if args else ".")
        print(path, file=self.out)
        for depth, name, child in _walk(node):
            text = name if isinstance(child, dict) else f"{name}: {child}"
            print("    " * (depth + 1) + text, file=self.out)

    def _cmd_find(self, args: list[str]) -> None:
        path, node = self._resolve(args[0] if args else ".")
        print(path, file=self.out)
        for relative in _paths(node):
            print(posixpath.join(path, relative), file=self.out)


def _walk(node: Node, depth: int = 0) -> Iterator[tuple[int, str, Node]]:
    if isinstance(node, dict):
        for name, child in node.items():
            yield depth, name, child
            yield from _walk(child, depth + 1)


def _paths(node: Node) -> Iterator[str]:
    if isinstance(node, dict):
        for name, child in node.items():
            yield name
            yield from (posixpath.join(name, below) for below in _paths(child))


def main(
    source: str | list[Address],
    command: list[str],
    stdin: TextIO,
    out: TextIO,
    err: TextIO,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    max_bytes: int = DEFAULT_FETCH_MAX_BYTES,
    connector: Connector | None = None,
) -> int:
    """Run ``kraft-server metadata-shell`` on a path or on a live quorum (its controllers'
    addresses, reached as ``connector`` says): 0, or 1 if loading or any command failed."""
    try:
        if isinstance(source, str):
            loaded = load_image(source)
        else:
            loaded = load_live(source, timeout_s, max_bytes, connector)
            print(f"note: read from {loaded.sources[0]}", file=err)
    except (ShellError, OSError) as error:
        print(f"kraft-server metadata-shell: {error}", file=err)
        return 1
    if loaded.stopped is not None:
        print(f"note: {loaded.stopped}", file=err)
    shell = Shell(image_tree(loaded.image), out, err)
    if command:
        shell.run(shlex.join(command))
        return 1 if shell.failed else 0
    interactive = stdin.isatty()
    while True:  # bounded by the input: ends at EOF or exit
        if interactive:
            print(f"[{shell.cwd}] > ", end="", file=out, flush=True)
        line = stdin.readline()
        if not line or not shell.run(line):
            break
    return 1 if shell.failed else 0
