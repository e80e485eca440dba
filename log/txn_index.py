"""The aborted-transaction index (``.txnindex``): Kafka's TransactionIndex, one per segment.

A read_committed consumer needs, with the records it fetches, the transactions among them
that were aborted (their producer id and first offset), so it can drop their records. Those
are found here rather than by reading the log: when an abort marker completes a transaction,
the leader (and every follower, as it appends the marker) adds one entry to the index of the
segment the marker went to.

On-disk layout, big-endian, exactly Kafka's (34 bytes an entry, no header)::

    version int16 (0)  producerId int64  firstOffset int64  lastOffset int64
    lastStableOffset int64

``lastOffset`` is the marker's offset and increases from entry to entry (entries are appended
in marker order). ``lastStableOffset`` is the partition's last stable offset once this
transaction completed: the first offset of the earliest other transaction still open, or
``lastOffset + 1``. A search for the transactions overlapping ``[fetch offset, upper bound)``
walks segments from the one holding the fetch offset and stops at the first entry whose
``lastStableOffset`` reaches the upper bound: no transaction aborted later can have begun
below it.

As in Kafka the file is created only when a segment gets its first entry, so segments
without aborted transactions have none. Entries are kept in memory (34 bytes each, loaded
on first use) and each is written at once; the index is derived data: the partition's
producer state rebuilds missing entries when it opens the log (broker/producer_state.py), and
a truncation of the log truncates the index with it.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Iterable
from dataclasses import dataclass

from log.fs import FileHandle, FileSystem

TXN_INDEX_SUFFIX = ".txnindex"
ABORTED_TXN_VERSION = 0
ENTRY_SIZE = 34
_ENTRY = struct.Struct(">hqqqq")
assert _ENTRY.size == ENTRY_SIZE


class CorruptTxnIndexError(Exception):
    """A ``.txnindex`` whose contents cannot be right (size, version, order)."""


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """One aborted transaction (Kafka's AbortedTxn)."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return _ENTRY.pack(
            ABORTED_TXN_VERSION,
            self.producer_id,
            self.first_offset,
            self.last_offset,
            self.last_stable_offset,
        )

    @classmethod
    def decode(cls, data: bytes | memoryview, position: int = 0) -> AbortedTxn:
        version, producer_id, first, last, stable = _ENTRY.unpack_from(data, position)
        if version != ABORTED_TXN_VERSION:
            raise CorruptTxnIndexError(f"aborted transaction entry of version {version}")
        return cls(producer_id, first, last, stable)


@dataclass(frozen=True, slots=True)
class TxnIndexSearch:
    """What one index holds for a fetch; ``complete``: no later index can add to it."""

    aborted: tuple[AbortedTxn, ...]
    complete: bool


def _last_offset(entry: AbortedTxn) -> int:
    return entry.last_offset


class TransactionIndex:
    """The ``.txnindex`` of one segment; the file exists once it has an entry."""

    __slots__ = ("_dirty", "_entries", "_fs", "_handle", "path")

    def __init__(self, fs: FileSystem, path: str) -> None:
        self._fs = fs
        self.path = path
        self._handle: FileHandle | None = None
        self._entries: list[AbortedTxn] | None = None  # None: not read yet
        self._dirty = False  # written since the last fsync

    @property
    def entries(self) -> list[AbortedTxn]:
        """Every entry, in marker order (a copy)."""
        return list(self._load())

    def _load(self) -> list[AbortedTxn]:
        if self._entries is not None:
            return self._entries
        entries: list[AbortedTxn] = []
        if self._fs.exists(self.path):
            handle = self._open()
            size = handle.size()
            if size % ENTRY_SIZE:
                raise CorruptTxnIndexError(f"{self.path}: {size} bytes is not whole entries")
            data = handle.pread(0, size)
            previous = -1
            for position in range(0, size, ENTRY_SIZE):  # bounded by the file size
                entry = AbortedTxn.decode(data, position)
                if entry.last_offset <= previous or entry.first_offset > entry.last_offset:
                    raise CorruptTxnIndexError(f"{self.path}: entry {entry} out of order")
                previous = entry.last_offset
                entries.append(entry)
        self._entries = entries
        return entries

    def _open(self) -> FileHandle:
        if self._handle is None:
            self._handle = self._fs.open(self.path, create=True)
        return self._handle

    def append(self, entry: AbortedTxn) -> None:
        """Add the entry of a transaction whose abort marker was just appended."""
        entries = self._load()
        if entries and entry.last_offset <= entries[-1].last_offset:
            raise ValueError(
                f"{self.path}: last offset {entry.last_offset} does not follow "
                f"{entries[-1].last_offset}"
            )
        if entry.first_offset > entry.last_offset:
            raise ValueError(f"{self.path}: {entry} ends before it begins")
        self._open().append(entry.encode())
        self._dirty = True
        entries.append(entry)

    def replace(self, entries: Iterable[AbortedTxn]) -> None:
        """Make the index hold exactly ``entries`` (sorted by last offset here): the
        rebuild after a recovery, and a cleaned segment's copy of its originals' entries."""
        wanted = sorted(entries, key=_last_offset)
        if wanted == self._load():
            return
        self._open().truncate(0)
        self._dirty = True
        self._entries = []
        for entry in wanted:
            self.append(entry)

    def cut_torn_tail(self) -> int:
        """Recovery after an unclean shutdown: cut a partial last entry, an append a power
        cut interrupted (it was past the last fsync, so its marker lies past the last
        producer snapshot and the log read that follows recovery, ProducerState.build,
        restores it through Log.repair_txn_indexes). Kafka rebuilds a recovered segment's
        transaction index from its batches to the same end. Returns the bytes cut; a file
        of whole entries out of order is still corrupt (raised when it is loaded)."""
        if self._entries is not None or not self._fs.exists(self.path):
            return 0
        handle = self._open()
        size = handle.size()
        torn = size % ENTRY_SIZE
        if torn:
            handle.truncate(size - torn)
            self._dirty = True
        return torn

    def truncate_to(self, offset: int) -> None:
        """Drop the entries of transactions whose marker is at or past ``offset``."""
        entries = self._load()
        keep = bisect.bisect_left(entries, offset, key=_last_offset)
        if keep == len(entries):
            return
        del entries[keep:]
        self._open().truncate(keep * ENTRY_SIZE)
        self._dirty = True

    def collect(self, fetch_offset: int, upper_bound_offset: int) -> TxnIndexSearch:
        """Kafka's collectAbortedTxns: entries overlapping [fetch_offset, upper bound)."""
        found: list[AbortedTxn] = []
        entries = self._load()
        for entry in entries[bisect.bisect_left(entries, fetch_offset, key=_last_offset) :]:
            if entry.first_offset < upper_bound_offset:
                found.append(entry)
            if entry.last_stable_offset >= upper_bound_offset:
                return TxnIndexSearch(tuple(found), True)
        return TxnIndexSearch(tuple(found), False)

    async def fsync(self) -> None:
        if self._handle is not None and self._dirty:
            self._dirty = False
            await self._handle.fsync()

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def renamed(self, path: str) -> None:
        """The file now has this name (segment deletion renames it ``.deleted``)."""
        self.path = path
