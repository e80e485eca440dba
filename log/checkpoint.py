"""Kafka's text checkpoint files.

Format (CheckpointFile.java), every line ending in a newline:

    0                   <- version
    2                   <- number of entries
    topic-a 0 45        <- offset checkpoints: topic partition offset
    topic-b 3 0

recovery-point-offset-checkpoint, replication-offset-checkpoint (high watermarks) and
log-start-offset-checkpoint live in each log dir and use the three-field form; the
leader-epoch-checkpoint inside a partition dir uses ``epoch startOffset``.

Files are replaced with write_atomic (temp, fsync, rename, fsync dir), so a crash leaves the
old or the new file. A file that does not parse raises CheckpointError naming the file and
line: a wrong recovery point or log start offset would silently lose or expose data, so we
never guess.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from log.fs import FileSystem, read_all, write_atomic

CHECKPOINT_VERSION = 0
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"  # first dirty offsets (log cleaner)

# A checkpoint lists at most one line per partition; this bounds parsing of a garbled count.
ENTRIES_MAX = 10_000_000

TopicPartition = tuple[str, int]
_E = TypeVar("_E")


class CheckpointError(Exception):
    """A checkpoint file exists but is not a valid checkpoint."""

    def __init__(self, path: str, line_number: int, reason: str) -> None:
        super().__init__(f"malformed checkpoint file {path}, line {line_number}: {reason}")
        self.path = path
        self.line_number = line_number
        self.reason = reason


@dataclass(frozen=True, slots=True, order=True)
class EpochEntry:
    """A leader epoch and the first offset written in it."""

    epoch: int
    start_offset: int


def format_checkpoint(lines: Iterable[str]) -> bytes:
    """The bytes of a version-0 checkpoint holding ``lines`` (already formatted)."""
    body = list(lines)
    return "".join(f"{line}\n" for line in [str(CHECKPOINT_VERSION), str(len(body)), *body]).encode(
        "utf-8"
    )


def parse_checkpoint(data: bytes, path: str, parse_line: Callable[[list[str]], _E]) -> list[_E]:
    """Entries of a checkpoint; CheckpointError on any deviation from the format."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CheckpointError(path, 1, f"not UTF-8 ({exc})") from None
    if not text.endswith("\n"):
        raise CheckpointError(path, text.count("\n") + 1, "file does not end with a newline")
    lines = text[:-1].split("\n")
    if lines[0].strip() != str(CHECKPOINT_VERSION):
        raise CheckpointError(path, 1, f"unsupported version {lines[0]!r}")
    if len(lines) < 2:
        raise CheckpointError(path, 2, "missing entry count")
    try:
        count = int(lines[1].strip())
    except ValueError:
        raise CheckpointError(path, 2, f"entry count {lines[1]!r} is not a number") from None
    if not 0 <= count <= ENTRIES_MAX:
        raise CheckpointError(path, 2, f"entry count {count} out of range")
    if len(lines) - 2 != count:
        raise CheckpointError(
            path,
            min(len(lines), count + 2) + 1,
            f"expected {count} entries, found {len(lines) - 2}",
        )
    entries: list[_E] = []
    for index, line in enumerate(lines[2:]):
        try:
            entries.append(parse_line(line.split()))
        except (ValueError, IndexError) as exc:
            raise CheckpointError(path, index + 3, f"bad entry {line!r}: {exc}") from None
    return entries


def _parse_offset_line(fields: list[str]) -> tuple[TopicPartition, int]:
    if len(fields) != 3:
        raise ValueError(f"expected 'topic partition offset', got {len(fields)} fields")
    topic, partition, offset = fields[0], int(fields[1]), int(fields[2])
    if partition < 0:
        raise ValueError(f"negative partition {partition}")
    return (topic, partition), offset


def _parse_epoch_line(fields: list[str]) -> EpochEntry:
    if len(fields) != 2:
        raise ValueError(f"expected 'epoch offset', got {len(fields)} fields")
    entry = EpochEntry(int(fields[0]), int(fields[1]))
    if entry.epoch < 0 or entry.start_offset < 0:
        raise ValueError("negative epoch or offset")
    return entry


class OffsetCheckpointFile:
    """A ``topic partition offset`` checkpoint (Kafka's OffsetCheckpointFile)."""

    __slots__ = ("fs", "path")

    def __init__(self, fs: FileSystem, path: str) -> None:
        self.fs = fs
        self.path = path

    def read(self) -> dict[TopicPartition, int]:
        """The stored offsets; empty if the file does not exist; CheckpointError if garbled."""
        if not self.fs.exists(self.path):
            return {}
        result: dict[TopicPartition, int] = {}
        for number, (tp, offset) in enumerate(
            parse_checkpoint(read_all(self.fs, self.path), self.path, _parse_offset_line)
        ):
            if tp in result:
                raise CheckpointError(self.path, number + 3, f"duplicate partition {tp}")
            result[tp] = offset
        return result

    async def write(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Atomically replace the file; entries are sorted so equal maps give equal bytes."""
        for (topic, _), _offset in offsets.items():
            if not topic or any(c.isspace() for c in topic):
                raise ValueError(f"topic {topic!r} cannot be written to a checkpoint")
        lines = [f"{t} {p} {o}" for (t, p), o in sorted(offsets.items())]
        await write_atomic(self.fs, self.path, format_checkpoint(lines))


class LeaderEpochCheckpointFile:
    """The ``epoch startOffset`` checkpoint of one partition."""

    __slots__ = ("fs", "path")

    def __init__(self, fs: FileSystem, path: str) -> None:
        self.fs = fs
        self.path = path

    def read(self) -> list[EpochEntry]:
        """Stored entries in file order; empty if missing; CheckpointError if garbled or if
        epochs and offsets do not both increase (a cache that is not monotone is corrupt)."""
        if not self.fs.exists(self.path):
            return []
        entries = parse_checkpoint(read_all(self.fs, self.path), self.path, _parse_epoch_line)
        for index in range(1, len(entries)):
            previous, entry = entries[index - 1], entries[index]
            if entry.epoch <= previous.epoch or entry.start_offset <= previous.start_offset:
                raise CheckpointError(
                    self.path, index + 3, f"entry {entry} does not follow {previous}"
                )
        return entries

    async def write(self, entries: Iterable[EpochEntry]) -> None:
        """Atomically replace the file with ``entries``."""
        await write_atomic(
            self.fs,
            self.path,
            format_checkpoint(f"{e.epoch} {e.start_offset}" for e in entries),
        )
