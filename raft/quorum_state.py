"""The ``quorum-state`` file: the election state a voter must never forget.

Raft's safety rests on a voter never voting twice in one epoch and never going back to an
older epoch, so (epoch, votedId, votedDirectoryId, leaderId) is written atomically (temp
file, fsync, rename, directory fsync) before any message that depends on it leaves the node.
The format is Kafka's: a JSON object with ``data_version`` 1. ``votedDirectoryId`` (KIP-853)
names the disk the vote went to, so a candidate re-formatted under the same id (a new
directory id) cannot collect the vote its predecessor was given in that epoch; it is
written only when known (Kafka reads a missing one as the zero UUID, "unknown").
"""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from dataclasses import dataclass

from log.fs import FileSystem, read_all, write_atomic
from raft.messages import MAX_EPOCH

FILE_NAME = "quorum-state"


class QuorumStateError(Exception):
    """The quorum-state file exists but cannot be trusted."""


@dataclass(frozen=True, slots=True)
class QuorumState:
    """The persisted election state; -1 means none."""

    leader_epoch: int = 0
    leader_id: int = -1
    voted_id: int = -1
    voted_directory_id: uuid.UUID | None = None

    def encode(self) -> bytes:
        obj: dict[str, object] = {
            "leaderEpoch": self.leader_epoch,
            "leaderId": self.leader_id,
            "votedId": self.voted_id,
            "data_version": 1,
        }
        if self.voted_directory_id is not None:
            obj["votedDirectoryId"] = _print_uuid(self.voted_directory_id)
        return json.dumps(obj, sort_keys=True).encode()

    @staticmethod
    def decode(data: bytes, path: str = FILE_NAME) -> QuorumState:
        try:
            obj = json.loads(data)
            if obj.get("data_version") not in (0, 1):
                raise QuorumStateError(f"{path}: unknown data_version {obj.get('data_version')}")
            state = QuorumState(
                leader_epoch=int(obj["leaderEpoch"]),
                leader_id=int(obj.get("leaderId", -1)),
                voted_id=int(obj.get("votedId", -1)),
                voted_directory_id=_parse_uuid(obj.get("votedDirectoryId")),
            )
        except (ValueError, KeyError, TypeError, AttributeError, binascii.Error) as error:
            raise QuorumStateError(f"{path}: corrupt quorum state ({error})") from None
        problem = state.problem()
        if problem is not None:
            raise QuorumStateError(f"{path}: {problem}; refusing to start on it")
        return state

    def problem(self) -> str | None:
        """Why this state cannot be real (a forged epoch accepted by an older version, a
        hand edit), or None. Checked before it is written and after it is read."""
        if not 0 <= self.leader_epoch <= MAX_EPOCH:
            return f"leaderEpoch {self.leader_epoch} is outside [0, {MAX_EPOCH}]"
        if self.leader_id < -1 or self.voted_id < -1:
            return f"leaderId {self.leader_id} / votedId {self.voted_id} below -1"
        return None


def _print_uuid(value: uuid.UUID) -> str:
    """Kafka's Uuid.toString: URL-safe base64 of the 16 bytes, unpadded."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode()


def _parse_uuid(text: object) -> uuid.UUID | None:
    """A Kafka Uuid string; None for a missing one or the zero UUID (unknown)."""
    if text is None:
        return None
    if not isinstance(text, str) or len(text) != 22:
        raise ValueError(f"votedDirectoryId {text!r} is not a Kafka Uuid")
    value = uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))
    return None if value.int == 0 else value


def load(fs: FileSystem, directory: str) -> QuorumState:
    """The stored state, or the initial one when the file does not exist yet."""
    path = f"{directory}/{FILE_NAME}"
    if not fs.exists(path):
        return QuorumState()
    return QuorumState.decode(read_all(fs, path), path)


async def store(fs: FileSystem, directory: str, state: QuorumState, *, sync: bool = True) -> None:
    """Durably replace the stored state (``sync=False`` only for the planted bug)."""
    assert state.problem() is None, state.problem()
    path = f"{directory}/{FILE_NAME}"
    if sync:
        await write_atomic(fs, path, state.encode())
        return
    handle = fs.open(path)
    try:
        handle.truncate(0)
        handle.pwrite(0, state.encode())
    finally:
        handle.close()
