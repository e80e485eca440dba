"""``kraft-server quorum-state``: show a stopped node's election state, and the operator's way
out of an exhausted epoch.

A quorum whose voters all stand at epoch 2^31-2 (MAX_EPOCH) can never elect again: there is
no next epoch (issue 22's epoch cliff; forged Votes did it before raft/validation.py bounded
how far and how fast peers may raise an epoch). The way out rewrites ``quorum-state`` to a
lower epoch with no leader and no vote, which is safe under one procedure (docs/raft.md,
"Epoch cliff"): every node stopped, and the same epoch N on every node, at least the last
epoch of every node's metadata log. No log then holds a record of an epoch above N, so no
leader of such an epoch ever had an entry anyone kept, and nothing is still campaigning in
one: forgetting those epochs (and the votes cast in them) breaks neither election safety nor
log matching. The tool refuses an N below this node's own log.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from kraft.config import ServerConfig
from kraft.storage import check_and_lock
from log.manager import METADATA_PARTITION_DIR
from log.runtime import real_runtime
from raft import quorum_state
from raft.disk_log import DiskLog
from raft.messages import MAX_EPOCH, NO_LEADER
from raft.quorum_state import QuorumState, QuorumStateError

# The highest epoch a reset may set: the next election's epoch must still be one a node takes.
MAX_RESET_EPOCH = MAX_EPOCH - 1


@dataclass(frozen=True, slots=True)
class QuorumStatus:
    """What ``quorum-state`` shows: the stored state and the metadata log it must not undercut."""

    path: str
    state: QuorumState
    log_end_offset: int
    log_last_epoch: int

    def describe(self) -> str:
        state = self.state
        return (
            f"{self.path}: epoch {state.leader_epoch}, leader {state.leader_id}, voted "
            f"{state.voted_id}; metadata log: end offset {self.log_end_offset}, last epoch "
            f"{self.log_last_epoch}"
        )


async def quorum_status(
    config: ServerConfig, *, reset_epoch: int | None = None
) -> tuple[QuorumStatus, QuorumStatus | None]:
    """The node's election state, and with ``reset_epoch`` the state after rewriting it to
    that epoch with no leader and no vote. The node must be stopped (its dirs are locked
    here, so a running one is refused); QuorumStateError when the epoch cannot be set."""
    runtime = real_runtime()
    check_and_lock(runtime.fs, config)
    directory = os.path.join(config.metadata_dir, METADATA_PARTITION_DIR)
    path = os.path.join(directory, quorum_state.FILE_NAME)
    log = await DiskLog.open(runtime, directory)
    try:
        end_offset, last_epoch = log.end_offset(), log.last_fetched_epoch()
    finally:
        await log.close()
    before = QuorumStatus(path, quorum_state.load(runtime.fs, directory), end_offset, last_epoch)
    if reset_epoch is None:
        return before, None
    if not last_epoch <= reset_epoch <= MAX_RESET_EPOCH:
        raise QuorumStateError(
            f"{path}: --reset-epoch {reset_epoch} is outside [{last_epoch}, "
            f"{MAX_RESET_EPOCH}]: it may not be below this node's metadata log's last epoch, "
            "and an election must have a next epoch"
        )
    state = QuorumState(leader_epoch=reset_epoch, leader_id=NO_LEADER, voted_id=NO_LEADER)
    await quorum_state.store(runtime.fs, directory, state)
    after = QuorumStatus(path, quorum_state.load(runtime.fs, directory), end_offset, last_epoch)
    return before, after
