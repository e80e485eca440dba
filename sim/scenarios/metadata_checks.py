"""The metadata scenario's invariants over what its nodes publish: each image a node's
loader publishes (``ImageWatcher``), each event a controller's Raft node reports
(``LeaderWatcher``), and a broker's start of serving (``Checker.check_serving``). They take
narrow views of a process, so tests/sim/test_metadata_invariants.py feeds them crafted
images and events and shows each invariant fire, and stay quiet on an honest neighbour."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field

from log.records import Record
from metadata.image import MetadataImage, TopicsImage
from metadata.records import NO_LEADER, encode_record
from metadata.snapshot import image_records
from raft.core import Event, HighWatermarkAdvanced, Role, RoleChanged
from raft.disk_log import DiskLog
from raft.driver import CommittedBatch
from raft.snapshot import SnapshotId
from sim.scenarios.raft_checks import ProcessView, own_epoch_violation
from sim.trace import Trace


class ImageDigests:
    """Digests of images by content, built part by part. An image shares every part a delta
    left alone (the broker map, each topic, the configs) with its predecessor by identity,
    so each part is hashed once however many images hold it; hashing whole images was most
    of a run's time."""

    __slots__ = ("_parts",)
    MAX_PARTS = 200_000

    def __init__(self) -> None:
        self._parts: dict[int, tuple[object, bytes]] = {}  # id -> (the part, its digest)

    def _part(self, part: object, as_image: MetadataImage) -> bytes:
        cached = self._parts.get(id(part))
        if cached is not None and cached[0] is part:
            return cached[1]
        hasher = hashlib.blake2b(digest_size=12)
        for record in image_records(as_image):
            hasher.update(encode_record(record))
        digest = hasher.digest()
        if len(self._parts) >= self.MAX_PARTS:
            self._parts.clear()
        self._parts[id(part)] = (part, digest)  # holding the part keeps its id unique
        return digest

    def digest(self, image: MetadataImage) -> str:
        hasher = hashlib.blake2b(digest_size=12)
        hasher.update(f"{image.offset}:{image.epoch}:{sorted(image.features.items())}".encode())
        hasher.update(f":{image.next_producer_id}".encode())
        hasher.update(self._part(image.cluster, MetadataImage(cluster=image.cluster)))
        for name, topic_id in sorted(image.topics.by_name.items()):
            topic = image.topics.by_id[topic_id]
            alone = TopicsImage(by_id={topic_id: topic}, by_name={name: topic_id})
            hasher.update(self._part(topic, MetadataImage(topics=alone)))
        hasher.update(self._part(image.configs, MetadataImage(configs=image.configs)))
        hasher.update(self._part(image.acls, MetadataImage(acls=image.acls)))
        if image.client_quotas:  # hashed only when set, so older runs' digests stand
            quotas = image.client_quotas
            hasher.update(self._part(quotas, MetadataImage(client_quotas=quotas)))
        return hasher.hexdigest()


@dataclass(slots=True)
class Checker:
    trace: Trace
    violation: str | None = None
    # A check that could not decide (a linearizability search out of budget): not a pass.
    unknown: str | None = None
    digests: dict[int, tuple[str, str]] = field(default_factory=dict)
    images: ImageDigests = field(default_factory=ImageDigests)
    # Brokers let go by a controlled shutdown: (broker id, broker epoch, committed offset).
    stopped: list[tuple[int, int, int]] = field(default_factory=list)

    def fail(self, message: str) -> None:
        if self.violation is None:
            self.violation = message
            self.trace.event("violation", detail=message)

    def expect_leads_nothing(self, broker_id: int, epoch: int, committed: int) -> None:
        """A broker stopped after its controlled shutdown was approved, when the metadata
        log was committed up to ``committed``: the first image at or past that offset must
        show it leading nothing (Kafka's promise: leadership moves before the broker goes)."""
        self.stopped.append((broker_id, epoch, committed))

    def check_stopped(self, image: MetadataImage, where: str) -> None:
        """``shutdown-leader``: judge each stopped broker the image is far enough for."""
        due = [entry for entry in self.stopped if entry[2] <= image.offset]
        for entry in due:
            self.stopped.remove(entry)
            broker_id, epoch, committed = entry
            registration = image.cluster.brokers.get(broker_id)
            if registration is None or registration.epoch != epoch:
                continue  # registered again since: a new life may lead again
            led = sorted(
                f"{topic.name}-{index}"
                for topic in image.topics.by_id.values()
                for index, partition in topic.partitions.items()
                if partition.leader == broker_id
            )
            if led:
                self.fail(
                    f"shutdown-leader: broker {broker_id} stopped after its controlled "
                    f"shutdown (metadata committed to {committed}), but the image at "
                    f"{image.offset} on {where} has it leading {', '.join(led[:4])}"
                )

    def check_serving(
        self, name: str, epoch: int, offset: int, unfenced_by: tuple[bool, int] | None
    ) -> None:
        """A broker that starts serving (RUNNING) at image ``offset``, registered at offset
        ``epoch``, must have been unfenced on a heartbeat (want_fence, reported offset) that
        asked for it from at or past its registration, and must have replayed that."""
        if unfenced_by is not None:
            want_fence, reported = unfenced_by
            if want_fence or reported < epoch:
                self.fail(
                    f"unfenced-early: the controller unfenced {name} (epoch {epoch}) "
                    f"answering a heartbeat with want_fence={want_fence} at offset {reported}"
                )
        if offset <= epoch:
            self.fail(
                f"unfenced-early: {name} serves clients at metadata offset {offset}, "
                f"before its registration at offset {epoch}"
            )


@dataclass(slots=True)
class ImageWatcher:
    """A loader publisher on one node incarnation, holding each image to the invariants."""

    checker: Checker
    process: ProcessView
    incarnation: int
    offset: int = 0

    def on_image(self, before: MetadataImage, after: MetadataImage, from_snapshot: bool) -> None:
        checker, name = self.checker, self.process.name
        if not (self.process.alive and self.process.incarnation == self.incarnation):
            return
        if after.offset < self.offset:
            checker.fail(
                f"applied-monotone: {name} went from offset {self.offset} to {after.offset}"
            )
        self.offset = after.offset
        digest = checker.images.digest(after)
        known, where = checker.digests.setdefault(after.offset, (digest, name))
        if known != digest:
            checker.fail(
                f"image-agreement: {name} and {where} hold different images at offset "
                f"{after.offset}"
            )
        if where == name and known == digest and not from_snapshot:
            self._trace_changes(before, after)
        brokers = after.cluster.brokers
        for topic in after.topics.by_id.values():
            previous = None if from_snapshot else before.topics.by_id.get(topic.topic_id)
            for index, partition in topic.partitions.items():
                leader = partition.leader
                if leader == NO_LEADER:
                    continue
                old = None if previous is None else previous.partitions.get(index)
                eligible = () if old is None else old.isr + old.elr + old.last_known_elr
                if (
                    old is not None
                    and leader != old.leader
                    and leader not in eligible
                    and old.replicas == partition.replicas
                ):
                    # Unclean election is off in these scenarios, so a new leader comes from
                    # the old ISR, or (KIP-966) its ELR or its last known leader, except when
                    # a reassignment completes: the leader's AlterPartition adds the last
                    # target replicas to the ISR and the same record may hand them leadership
                    # (Kafka's PartitionChangeBuilder; leader-in-isr still holds).
                    checker.fail(
                        f"leader-from-isr: {topic.name}-{index} elected {leader} from outside "
                        f"its ISR {list(old.isr)} at offset {after.offset} on {name}"
                    )
                if leader not in partition.isr:
                    checker.fail(
                        f"leader-in-isr: {topic.name}-{index} led by {leader} outside its ISR "
                        f"{list(partition.isr)} at offset {after.offset} on {name}"
                    )
                registration = brokers.get(leader)
                if registration is None or registration.fenced:
                    checker.fail(
                        f"fenced-leader: {topic.name}-{index} led by fenced broker {leader} at "
                        f"offset {after.offset} on {name}"
                    )
        if checker.stopped:
            checker.check_stopped(after, name)

    def _trace_changes(self, before: MetadataImage, after: MetadataImage) -> None:
        """The first node to apply an offset records what changed in the trace, so
        kraft-analyze can re-derive the image checks from node events alone: broker fencing
        first, then every partition whose registration changed (docs/traces.md)."""
        trace, name = self.checker.trace, self.process.name
        for broker_id, broker in sorted(after.cluster.brokers.items()):
            old = before.cluster.brokers.get(broker_id)
            if old is None or old.fenced != broker.fenced or old.epoch != broker.epoch:
                trace.event(
                    "broker-state",
                    node=name,
                    offset_end=after.offset,
                    broker=broker_id,
                    epoch=broker.epoch,
                    fenced=broker.fenced,
                )
        for topic_id, topic in after.topics.by_id.items():
            previous = before.topics.by_id.get(topic_id)
            for index, partition in sorted(topic.partitions.items()):
                if previous is not None and previous.partitions.get(index) == partition:
                    continue
                trace.event(
                    "partition-state",
                    node=name,
                    offset_end=after.offset,
                    epoch=partition.leader_epoch,
                    topic=topic.name,
                    topic_id=str(topic_id),
                    partition=index,
                    leader_id=str(partition.leader),
                    isr=list(partition.isr),
                    replicas=list(partition.replicas),
                    elr=list(partition.elr),
                    last_known_elr=list(partition.last_known_elr),
                )


@dataclass(slots=True)
class LeaderWatcher:
    """A RaftListener on one controller incarnation: while it leads, every high watermark
    it reaches sits just above an entry of its own epoch (commit-own-epoch)."""

    checker: Checker
    process: ProcessView
    incarnation: int
    log: Callable[[], DiskLog | None]
    leading: int | None = None

    def handle_event(self, event: Event) -> None:
        if not (self.process.alive and self.process.incarnation == self.incarnation):
            return
        if isinstance(event, RoleChanged):
            self.leading = event.epoch if event.role is Role.LEADER else None
        elif isinstance(event, HighWatermarkAdvanced) and self.leading is not None:
            log = self.log()
            if log is not None:
                found = own_epoch_violation(
                    self.process.name, self.leading, log, event.high_watermark
                )
                if found is not None:
                    self.checker.fail(found)

    def handle_commit(self, batch: CommittedBatch) -> None:
        pass

    def handle_load_snapshot(self, snapshot: SnapshotId, records: list[Record]) -> None:
        pass
