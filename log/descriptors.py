"""A reserve of file descriptors for the node's own work, and what running out means.

Every partition log holds descriptors (a segment's log, offset index and time index) and so
does every connection. When a node hosts partitions and accepts connections until the
process is out of descriptors, the next checkpoint write, metadata log segment roll or
fsync of a directory fails with EMFILE, and the node can no longer keep itself consistent
(issue 22: a checkpoint's EMFILE was taken for a disk failure and the node stopped). So a
reserve is kept: new client connections are refused while fewer than ``reserve``
descriptors would remain and new partition logs while fewer than 1.5 times that would
(an operator can still connect when partitions took everything else), and what the node
itself must do (checkpoints, the metadata log, segment rolls) draws on the reserve.

Out of descriptors is never a disk failure: an EMFILE or ENFILE leaves every log and log dir
online (the operation fails and is retried), as nothing on disk is wrong.

Descriptors are counted without asking the kernel (listing /proc/self/fd costs about 50 ms
at 15,000 descriptors): what the filesystem seam holds open, what the node counts itself
(its connections), and a baseline measured once at start-up (standard streams, the event
loop, listening sockets).
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from dataclasses import dataclass, field

from log.fs import FileSystem

OUT_OF_DESCRIPTORS = frozenset({errno.EMFILE, errno.ENFILE})
# What a new partition log opens: its first segment's log, offset index and time index.
DESCRIPTORS_PER_LOG = 3
# The default reserve: a tenth of the limit, at least 64 and at most 4,096 descriptors
# (enough for every log dir's checkpoints, the metadata log's rolls and snapshots, and the
# quorum's and fetchers' connections, with room for the segment rolls of busy partitions),
# but never more than a quarter of a tiny limit (a node under 256 must still serve).
MIN_DEFAULT_RESERVE = 64
MAX_DEFAULT_RESERVE = 4096


def is_out_of_descriptors(error: BaseException) -> bool:
    """Whether ``error`` says the process (EMFILE) or the system (ENFILE) has no descriptor
    left: a resource limit, not a disk failure."""
    return isinstance(error, OSError) and error.errno in OUT_OF_DESCRIPTORS


class OutOfDescriptorsError(OSError):
    """A new partition log refused so that the reserve stays free (errno EMFILE)."""


def default_reserve(limit: int) -> int:
    """The reserve kept when ``open.files.reserve`` is not set."""
    return min(MAX_DEFAULT_RESERVE, max(min(MIN_DEFAULT_RESERVE, limit // 4), limit // 10))


@dataclass(slots=True)
class DescriptorReserve:
    """How many descriptors the node may still spend on new partitions and connections."""

    fs: FileSystem
    reserve: int
    baseline: int = 0  # held outside the seam and the counted sources, measured at start
    sources: list[Callable[[], int]] = field(default_factory=list)  # e.g. open connections
    # Closes idle files (log/lazy_files.py) to free at least that many descriptors.
    reclaim: Callable[[int], None] | None = None

    def in_use(self) -> int:
        return self.fs.open_descriptors() + self.baseline + sum(count() for count in self.sources)

    def headroom(self) -> int:
        """Descriptors left before the reserve is reached (negative inside it)."""
        return self.fs.descriptor_limit() - self.reserve - self.in_use()

    def admits(self, count: int) -> bool:
        """Whether ``count`` more descriptors (a connection's) may be spent without
        touching the reserve (idle files are closed first to make room)."""
        return self._room_for(count)

    def admits_logs(self, count: int) -> bool:
        """Whether ``count`` new partition logs may be opened. They stop half a reserve
        earlier than connections, so that with every descriptor taken by partitions an
        operator can still connect (to delete topics, or move partitions away)."""
        return self._room_for(count * DESCRIPTORS_PER_LOG + self.reserve // 2)

    def _room_for(self, needed: int) -> bool:
        headroom = self.headroom()
        if headroom < needed and self.reclaim is not None:
            self.reclaim(needed - headroom)
            headroom = self.headroom()
        return headroom >= needed
