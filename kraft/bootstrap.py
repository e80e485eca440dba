"""bootstrap.checkpoint: the metadata a new cluster starts from (Kafka's bootstrap snapshot).

``kraft-server format`` writes it next to meta.properties in the metadata log dir: FeatureLevel
records fixing ``metadata.version`` and ``eligible.leader.replicas.version`` (1: KIP-966's ELR
on, the default Kafka 4.1 gives a new cluster) and ``transaction.version`` (2: KIP-890 part 2,
Kafka 4.0+'s default). The first controller to become active on an
empty metadata log writes these records before anything else, so every node's image carries
the version the cluster was formatted with. The file uses the snapshot layout (header
control record, the records, footer), so the same CRC-checked reader loads it.

A dynamic quorum (KIP-853: ``--standalone``, ``--initial-controllers`` or
``--no-initial-controllers``) also has a KRaftVersionRecord (kraft.version 1) and, unless
formatted to join later, the first VotersRecord in the header's control batch, as Kafka's
bootstrap checkpoint does. The first leader copies them into the log (raft/core.py), so
replicas that fetch the log from its start learn the voter set.
"""

from __future__ import annotations

import os

from log.fs import FileSystem, read_all, write_atomic
from log.records import Record
from metadata.records import (
    ELR_FEATURE,
    METADATA_VERSION_FEATURE,
    TRANSACTION_VERSION_FEATURE,
    FeatureLevel,
    MetadataRecord,
    decode_record,
    encode_record,
)
from raft.snapshot import decode_snapshot, decode_snapshot_control, encode_snapshot
from raft.voters import (
    KRAFT_VERSION_DYNAMIC,
    QuorumControl,
    VoterSet,
    kraft_version_record,
    voters_record,
)

BOOTSTRAP_FILE = "bootstrap.checkpoint"
METADATA_VERSION = 1  # the only metadata.version kraft-py has so far
ELIGIBLE_LEADER_REPLICAS_VERSION = 1  # Kafka 4.1's default for a new cluster
TRANSACTION_VERSION = 2  # Kafka 4.0+'s default for a new cluster (KIP-1022)
BOOTSTRAP_FEATURES = (
    FeatureLevel(METADATA_VERSION_FEATURE, METADATA_VERSION),
    FeatureLevel(ELR_FEATURE, ELIGIBLE_LEADER_REPLICAS_VERSION),
    FeatureLevel(TRANSACTION_VERSION_FEATURE, TRANSACTION_VERSION),
)


async def write_bootstrap(
    fs: FileSystem,
    directory: str,
    timestamp_ms: int,
    extra: tuple[MetadataRecord, ...] = (),
    *,
    dynamic: bool = False,
    voters: VoterSet | None = None,
) -> None:
    """Write the bootstrap records atomically (temp file, fsync, rename); ``extra`` follow
    the features (the SCRAM credentials of ``format --add-scram``); with ``dynamic``,
    kraft.version 1 and the initial ``voters`` (None: this node joins a running quorum)."""
    records = [Record(None, encode_record(r), timestamp_ms) for r in (*BOOTSTRAP_FEATURES, *extra)]
    control = []
    if dynamic:
        control.append(kraft_version_record(KRAFT_VERSION_DYNAMIC, timestamp_ms))
        if voters is not None:
            control.append(voters_record(voters, timestamp_ms))
    data = encode_snapshot(records, timestamp_ms, control)
    await write_atomic(fs, os.path.join(directory, BOOTSTRAP_FILE), data)


def read_bootstrap_quorum(fs: FileSystem, directory: str) -> QuorumControl:
    """The kraft.version and voter set the directory was formatted with (None for each
    when it was formatted for a static quorum)."""
    path = os.path.join(directory, BOOTSTRAP_FILE)
    if not fs.exists(path):
        return QuorumControl(-1)
    return decode_snapshot_control(read_all(fs, path), BOOTSTRAP_FILE)


def read_bootstrap(fs: FileSystem, directory: str) -> list[MetadataRecord]:
    """The bootstrap records, or the default set when the file is absent (a directory
    formatted before bootstrap files existed). A corrupt file raises SnapshotError."""
    path = os.path.join(directory, BOOTSTRAP_FILE)
    if not fs.exists(path):
        return list(BOOTSTRAP_FEATURES)
    records = decode_snapshot(read_all(fs, path), BOOTSTRAP_FILE)
    return [decode_record(r.value or b"", index) for index, r in enumerate(records)]
