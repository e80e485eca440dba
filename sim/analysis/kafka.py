"""The Kafka workload's checks, as Jepsen's Kafka workload defines them: one implementation
that the simulator runs online (``KafkaChecker.add`` as each operation completes, ``finish``
at the end) and ``kraft-analyze`` runs over a trace's history (``check_history``).

Operations (one partition each, its key ``<topic>-<partition>``):
- ``send``: the value (unique in the run) in, the acknowledged offset out;
- ``poll``: the position asked for in, the (offset, value) pairs read out, and the high
  watermark the broker reported; the final reads after the heal are polls of process
  ``final`` from offset 0 to the high watermark.

A group's consumers also commit and fetch committed offsets (key ``<group>/<topic>-<partition>``):

- ``commit``: the offset in; ok once the coordinator acknowledged it; a refused commit
  (ILLEGAL_GENERATION, ...) is ``fail``, any other error ``info`` (the record may be written);
- ``offset-fetch``: the committed offset out (-1 for none), from the process ``final`` too
  after the heal. Both carry the coordinator's ISR of the group's ``__consumer_offsets``
  partition and its leader epoch there when it answered (a fetch: only while it leads).

Checks (the violation name leads the message):
- ``inconsistent-offsets``: two values read at one offset, or an acknowledged send's offset
  read holding another value;
- ``duplicate``: one value read at two offsets (values are unique, and only an idempotent
  producer resends, with the same sequence number, so any copy is the broker's);
- ``nonmonotonic-send``: a producer's acknowledged offsets on a partition did not increase;
- ``nonmonotonic-poll``: a consumer read a partition's offsets out of order;
- ``poll-skip``: a consumer's read jumped over offsets that hold values;
- ``lost-write``: an acknowledged value no read found, though reads passed its offset;
- ``unseen``: an acknowledged value at an offset no read ever reached, though the final
  reads go to the healed cluster's high watermark;
- ``lost-commit``: an offset fetch returned an offset older than a commit acknowledged
  before it began, and no commit of the offset it returned may have come after that one;
- ``offset-backwards``: an offset fetch returned an offset older than an earlier fetch
  did, and no commit of the offset it returned may have come between them.

A commit "may come after" another unless it failed or completed before the other began
(pending and ``info`` commits may land any time later). Commits and fetches are ordered by
the coordinator's leader epoch too: a deposed coordinator that has not yet heard of its
successor answers from its older state, as Kafka's does, so a fetch is compared only with
commits acknowledged at its epoch or earlier, and with fetches answered at its epoch or
earlier.

What an acknowledgement promises: acks=all with min.insync.replicas=2 keeps a write while
the ISR keeps it. Data logs are not fsynced per append (as in Kafka), so a write may be
lost once every member of the ISR that acknowledged it, or of a later ISR, lost power while
that ISR stood (a whole-cluster power cut can do it; so can two cuts after the ISR shrank
to two); such a loss is excused, and counted (``PowerCuts.may_have_lost``).
With acks=1 only the leader had the write, so sends promise nothing: lost and unseen sends
are counted, not violations.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class KafkaOp:
    """One completed operation of the Kafka workload (pending ones are not checked)."""

    process: str
    f: str  # "send", "poll", "commit" or "offset-fetch"
    key: str  # "<topic>-<partition>" ("<group>/<topic>-<partition>" for commit, offset-fetch)
    status: str  # "ok", "fail", "info" ("pending" too for a commit)
    value: int | None  # send: the value; poll: the position asked for; commit: the offset
    offset: int | None = None  # send: acknowledged offset; poll: high watermark; offset-fetch:
    # the committed offset (-1 for none)
    records: tuple[tuple[int, int], ...] = ()  # poll: (offset, value), in the order read
    complete_us: int = 0
    isr: tuple[int, ...] = ()  # the leader's (coordinator's) ISR when it answered
    invoke_us: int = 0
    epoch: int = -1  # commit, offset-fetch: the coordinator's leader epoch when it answered


# The group operations: their key is "<group>/<topic>-<partition>".
COMMIT, OFFSET_FETCH = "commit", "offset-fetch"
KAFKA_OPS = ("send", "poll", COMMIT, OFFSET_FETCH)
# A commit whose coordinator's epoch is unknown (a failed one, or its node gone before the
# answer arrived) is compared with no fetch, as one from a later coordinator would be.
COMMIT_EPOCH_UNKNOWN = 2**31 - 1
# broker.group.coordinator.OFFSETS_TOPIC; not imported: Spark workers load no broker code.
OFFSETS_TOPIC = "__consumer_offsets"
# broker.txn.config.TXN_TOPIC (not imported, as above): the transaction coordinators' log.
TXN_STATE_TOPIC = "__transaction_state"


@dataclass(frozen=True, slots=True)
class KafkaViolation:
    check: str
    message: str
    time_us: int


@dataclass(frozen=True, slots=True)
class _Read:
    value: int
    key: str
    offset: int
    isr: tuple[int, ...]
    time_us: int


@dataclass(slots=True)
class _Send:
    key: str
    offset: int
    value: int
    complete_us: int
    isr: tuple[int, ...]


@dataclass(slots=True)
class PowerCuts:
    """When each broker lost power, and each partition's ISR over time (as the controller
    committed it), to excuse exactly the losses the promise allows."""

    times: dict[int, list[int]] = field(default_factory=dict)
    isrs: dict[str, list[tuple[int, tuple[int, ...]]]] = field(default_factory=dict)
    # (partition, offset) where a leader answered a new batch as the duplicate of an old one
    # of the same producer, epoch and sequence, after the coordinator may have forgotten the
    # epoch it handed out (``check_duplicate_answer``'s excuse): the new batch's write is lost
    # to that cut, and the checks of the writes excuse it as such
    reissued: set[tuple[str, int]] = field(default_factory=set)

    def cut(self, broker: int, time_us: int) -> None:
        self.times.setdefault(broker, []).append(time_us)

    def isr_changed(self, key: str, isr: tuple[int, ...], time_us: int) -> None:
        self.isrs.setdefault(key, []).append((time_us, isr))

    def _all_cut_between(self, brokers: tuple[int, ...], after_us: int, before_us: float) -> bool:
        # A cut at ``after_us`` itself counts: the simulator may cut power in the very
        # microsecond a record is acknowledged, after the acknowledgement (kafka --reassign
        # --brokers 5 seed 12: every ISR member of __consumer_offsets-1 lost power as the
        # commit of offset 481 was answered, and its unsynced record went with them).
        return bool(brokers) and all(
            any(after_us <= t < before_us for t in self.times.get(broker, ())) for broker in brokers
        )

    def may_have_lost(
        self, key: str, isr: Iterable[int], time_us: int, before_us: float = float("inf")
    ) -> bool:
        """Whether a record ``isr`` held at ``time_us`` may since have been lost to power
        cuts alone: every member of that ISR, or of one ISR the partition had later (the
        record lived on it), lost power after ``time_us`` and while that ISR stood (and
        before ``before_us``). (A member that restarted and fetched the record again is not
        told apart: lenient.)"""
        if self._all_cut_between(tuple(isr), time_us, before_us):
            return True
        history = self.isrs.get(key, [])
        for index, (_since, members) in enumerate(history):
            until = history[index + 1][0] if index + 1 < len(history) else float("inf")
            if until > time_us and self._all_cut_between(members, time_us, min(until, before_us)):
                return True
        return False

    def topic_may_have_lost(self, topic: str, before_us: int, after_us: int = 0) -> bool:
        """Whether some partition of ``topic`` may have lost records to power cuts alone
        between ``after_us`` and ``before_us`` (every member of one of its ISRs lost power
        while it stood)."""
        return any(
            self.may_have_lost_between(key, after_us, before_us)
            for key in self.isrs
            if key.rsplit("-", 1)[0] == topic
        )

    def may_have_lost_between(self, key: str, after_us: int, before_us: int) -> bool:
        """Whether every member of one ISR ``key`` had lost power between ``after_us`` and
        ``before_us`` while that ISR stood: records it held then may be gone."""
        history = self.isrs.get(key, [])
        for index, (since, members) in enumerate(history):
            until = history[index + 1][0] if index + 1 < len(history) else float("inf")
            if (
                until > after_us
                and since < before_us
                and self._all_cut_between(members, after_us, min(until, before_us))
            ):
                return True
        return False


def broker_id(node: str | None) -> int | None:
    """The broker id of a simulated node name ``n<id>``."""
    if node is None or not node.startswith("n") or not node[1:].isdigit():
        return None
    return int(node[1:])


@dataclass(slots=True)
class KafkaChecker:
    """The checks over a history fed in completion order."""

    acks_all: bool = True
    cuts: PowerCuts = field(default_factory=PowerCuts)
    violations: list[KafkaViolation] = field(default_factory=list)
    excused: int = 0
    lost: int = 0  # acks=1 losses (counted, not violations)
    sends_ok: int = 0
    polls_ok: int = 0
    _at: dict[tuple[str, int], _Read] = field(default_factory=dict)  # by (key, offset)
    _where: dict[int, _Read] = field(default_factory=dict)  # by value
    _reached: dict[str, int] = field(default_factory=dict)  # key -> offsets read below this
    _sends: list[_Send] = field(default_factory=list)
    _acked: dict[int, _Send] = field(default_factory=dict)  # by value
    _last_send: dict[tuple[str, str], _Send] = field(default_factory=dict)
    _last_poll: dict[tuple[str, str], int] = field(default_factory=dict)
    _positions: list[tuple[str, str, int, int, int]] = field(default_factory=list)
    offsets_log: str = ""  # the group's __consumer_offsets partition, "<topic>-<partition>"
    commits_ok: int = 0
    _commits: dict[str, list[KafkaOp]] = field(default_factory=dict)  # by key, any status
    _fetches: dict[str, list[KafkaOp]] = field(default_factory=dict)  # by key, ok ones

    def fail(self, check: str, message: str, time_us: int) -> None:
        self.violations.append(KafkaViolation(check, f"{check}: {message}", time_us))

    def add(self, op: KafkaOp) -> None:
        """Check one completed operation against everything before it (a commit, any
        status, pending ones included: they are judged at the end)."""
        if op.f == COMMIT:
            self._commits.setdefault(op.key, []).append(op)
            self.commits_ok += op.status == "ok"
            return
        if op.status != "ok":
            return
        if op.f == OFFSET_FETCH:
            self._fetches.setdefault(op.key, []).append(op)
            return
        if op.f == "send" and op.offset is not None and op.value is not None:
            self.sends_ok += 1
            slot = (op.process, op.key)
            send = _Send(op.key, op.offset, op.value, op.complete_us, op.isr)
            last = self._last_send.get(slot)
            if last is not None and op.offset <= last.offset:
                if not self.acks_all:
                    pass  # acks=1: a leader change may truncate the earlier one (counted lost)
                elif self.cuts.may_have_lost(op.key, last.isr, last.complete_us):
                    self.excused += 1  # the log lost the earlier one: offsets are reused
                else:
                    self.fail(
                        "nonmonotonic-send",
                        f"{op.process} was acknowledged offset {op.offset} of {op.key} after "
                        f"offset {last.offset}",
                        op.complete_us,
                    )
            self._last_send[slot] = send
            self._sends.append(send)
            self._acked[op.value] = send
        elif op.f == "poll":
            self.polls_ok += 1
            self._add_poll(op)

    def _add_poll(self, op: KafkaOp) -> None:
        slot = (op.process, op.key)
        position = op.value if op.value is not None else 0
        previous = self._last_poll.get(slot, -1)
        expected = position
        for offset, value in op.records:
            if offset <= previous:
                self.fail(
                    "nonmonotonic-poll",
                    f"{op.process} read offset {offset} of {op.key} after offset {previous}",
                    op.complete_us,
                )
            if offset > expected:
                self._positions.append((op.process, op.key, expected, offset, op.complete_us))
            previous, expected = max(previous, offset), offset + 1
            self._read(op.key, offset, value, op)
        self._last_poll[slot] = previous
        reached = max(op.offset or 0, previous + 1)
        self._reached[op.key] = max(self._reached.get(op.key, 0), reached)

    def _read(self, key: str, offset: int, value: int, op: KafkaOp) -> None:
        """One record a poll read. A record the read's ISR (the leader's, when it answered)
        all lost to power cuts since may be replaced: that loss is excused, not a verdict."""
        read = _Read(value, key, offset, op.isr, op.complete_us)
        known = self._at.setdefault((key, offset), read)
        if known.value != value:
            if self._may_be_gone(known):
                self.excused += 1
                self._at[(key, offset)] = read
            else:
                self.fail(
                    "inconsistent-offsets",
                    f"offset {offset} of {key} was read holding {known.value} and {value}",
                    op.complete_us,
                )
        where = self._where.setdefault(value, read)
        if (where.key, where.offset) != (key, offset):
            if self._may_be_gone(where):
                self.excused += 1
                self._where[value] = read
            else:
                self.fail(
                    "duplicate",
                    f"value {value} was read at offset {where.offset} of {where.key} and at "
                    f"offset {offset} of {key}",
                    op.complete_us,
                )

    def _may_be_gone(self, read: _Read) -> bool:
        """Whether a record read may since have been lost to power cuts, judged from the
        read and from the record's acknowledged send, which may be older: a read served by
        a replica the controller had already shrunk out of the ISR, after the whole ISR
        lost power, still read a record whose loss the promise excuses (kafka seed 182)."""
        if self.cuts.may_have_lost(read.key, read.isr, read.time_us):
            return True
        send = self._acked.get(read.value)
        return (
            send is not None
            and (send.key, send.offset) == (read.key, read.offset)
            and self.cuts.may_have_lost(send.key, send.isr, send.complete_us)
        )

    def finish(self, end_us: int) -> list[KafkaViolation]:
        """The checks that need the whole history: lost, unseen, skipped writes."""
        for send in self._sends:
            where = self._where.get(send.value)
            found = None if where is None else (where.key, where.offset)
            held = self._at.get((send.key, send.offset))
            at = None if held is None else held.value
            if found == (send.key, send.offset) or at == send.value:
                continue  # read where it was acknowledged (also elsewhere: a duplicate)
            if not self.acks_all:
                self.lost += 1
                continue
            if self.cuts.may_have_lost(send.key, send.isr, send.complete_us):
                self.excused += 1
                continue
            if at is not None:
                self.fail(
                    "inconsistent-offsets",
                    f"{send.value} was acknowledged at offset {send.offset} of {send.key}, "
                    f"which was read holding {at}",
                    end_us,
                )
            elif found is not None:
                continue  # read at another offset: a duplicate or inconsistency if at all
            elif send.offset < self._reached.get(send.key, 0):
                self.fail(
                    "lost-write",
                    f"{send.value} acknowledged at offset {send.offset} of {send.key} was "
                    f"never read, though reads reached offset {self._reached[send.key]}",
                    end_us,
                )
            else:
                self.fail(
                    "unseen",
                    f"{send.value} acknowledged at offset {send.offset} of {send.key} was "
                    f"never read: reads reached only offset {self._reached.get(send.key, 0)}",
                    end_us,
                )
        acknowledged = {(s.key, s.offset) for s in self._sends} if self.acks_all else set()
        for process, key, expected, offset, at_us in self._positions:
            held = [
                o
                for o in range(expected, offset)
                if (key, o) in self._at or (key, o) in acknowledged
            ]
            if held:
                self.fail(
                    "poll-skip",
                    f"{process} read offset {offset} of {key} right after asking for offset "
                    f"{expected}, skipping offset {held[0]} which holds a value",
                    at_us,
                )
        for key, fetches in sorted(self._fetches.items()):
            self._check_committed(key, fetches, self._commits.get(key, []))
        return self.violations

    def _check_committed(self, key: str, fetches: list[KafkaOp], commits: list[KafkaOp]) -> None:
        """``lost-commit`` and ``offset-backwards`` over one key's fetches."""

        def latest_end(value: int | None, before_us: int) -> float:
            """When the last commit of ``value`` begun before ``before_us`` completed (inf
            if it may still be in flight; -inf if there is none)."""
            ends = [
                float("inf") if c.status != "ok" else c.complete_us
                for c in commits
                if c.value == value and c.status != "fail" and c.invoke_us < before_us
            ]
            return max(ends, default=float("-inf"))

        cuts, log = self.cuts, self.offsets_log

        def commit_may_be_gone(value: int) -> bool:
            """Whether an acknowledged commit of ``value`` may have been lost to power cuts:
            then a fetch that saw it, even one answered after the cuts by a deposed leader
            that still held it, says nothing about what the offsets log keeps (kafka seed
            279 with 5 brokers; the same reasoning as ``_may_be_gone`` for records)."""
            return any(
                c.status == "ok"
                and c.value == value
                and cuts.may_have_lost(log, c.isr, c.complete_us)
                for c in commits
            )

        for fetch in fetches:
            got = fetch.offset if fetch.offset is not None else -1
            end = latest_end(got, fetch.complete_us)
            for commit in commits:
                if (
                    commit.status == "ok"
                    and commit.complete_us < fetch.invoke_us
                    and (commit.value or 0) > got
                    and commit.epoch <= fetch.epoch
                    and end < commit.invoke_us
                    and not cuts.may_have_lost(log, commit.isr, commit.complete_us)
                ):
                    self.fail(
                        "lost-commit",
                        f"{fetch.process} fetched committed offset {got} of {key}, though "
                        f"{commit.process}'s commit of offset {commit.value} was acknowledged "
                        f"before it and no commit of offset {got} may have followed that one",
                        fetch.complete_us,
                    )
                    break
            for earlier in fetches:
                before = earlier.offset if earlier.offset is not None else -1
                if (
                    earlier.complete_us < fetch.invoke_us
                    and got < before
                    and earlier.epoch <= fetch.epoch
                    and end < earlier.invoke_us
                    and not cuts.may_have_lost(log, earlier.isr, earlier.complete_us)
                    and not commit_may_be_gone(before)
                ):
                    self.fail(
                        "offset-backwards",
                        f"{fetch.process} fetched committed offset {got} of {key} after "
                        f"{earlier.process} had fetched offset {before}, with no commit of "
                        f"offset {got} in between",
                        fetch.complete_us,
                    )
                    break


@dataclass(slots=True)
class PartitionStateChecker:
    """The brokers' partition state, from ``partition-hw`` events (a leader's high watermark
    in its epoch, with its ISR) and ``partition-truncate`` events (a replica's log end moved
    back within one incarnation):

    - ``high-watermark``: a leader's high watermark never moves back within its epoch;
    - ``committed-truncated``: no member of the ISR (as the controller committed it)
      truncates below the highest high watermark any leader reached, unless power cuts may
      have lost those records (``PowerCuts.may_have_lost``, as for sends). A replica out of
      the ISR may hold an old epoch's records below it, which it rightly truncates.
    """

    cuts: PowerCuts = field(default_factory=PowerCuts)
    _hw: dict[tuple[str, int, str, int], int] = field(default_factory=dict)
    _committed: dict[str, tuple[int, tuple[int, ...], int]] = field(default_factory=dict)

    def committed(self, key: str) -> int:
        return self._committed.get(key, (0, (), 0))[0]

    def on_hw(
        self,
        node: str,
        incarnation: int,
        key: str,
        epoch: int,
        hw: int,
        isr: tuple[int, ...],
        time_us: int,
    ) -> KafkaViolation | None:
        slot = (node, incarnation, key, epoch)
        previous = self._hw.get(slot)
        self._hw[slot] = hw if previous is None else max(previous, hw)
        if hw > self.committed(key):
            self._committed[key] = (hw, isr, time_us)
        if previous is not None and hw < previous:
            return KafkaViolation(
                "high-watermark",
                f"high-watermark: {node}, leader of {key} in epoch {epoch}, moved its high "
                f"watermark back from {previous} to {hw}",
                time_us,
            )
        return None

    def on_truncate(self, node: str, key: str, to: int, time_us: int) -> KafkaViolation | None:
        committed, isr, at_us = self._committed.get(key, (0, (), 0))
        history = self.cuts.isrs.get(key)
        if history and broker_id(node) not in history[-1][1]:
            return None  # out of the ISR: its tail may be an old epoch's, never committed
        if to >= committed or self.cuts.may_have_lost(key, isr, at_us):
            return None
        return KafkaViolation(
            "committed-truncated",
            f"committed-truncated: {node} truncated {key} to offset {to}, below offset "
            f"{committed} its ISR {list(isr)} had committed",
            time_us,
        )


COMMITTED_ON_ISR = "committed-on-isr"
REPLICA_CATCH_UP = "replica-catch-up"
DUPLICATE_OFFSET = "duplicate-offset"


@dataclass(frozen=True, slots=True)
class BatchIdentity:
    """A producer's batch as the duplicate check compares it: who wrote it (producer id and
    epoch, first sequence), how many records it holds (its last offset delta) and its
    content (the batch CRC, which covers everything after the leader epoch field: the
    stored batch of a CreateTime, uncompressed produce is byte for byte the produced one
    from there on)."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    last_offset_delta: int
    crc: int

    def describe(self) -> str:
        return (
            f"producer {self.producer_id} epoch {self.producer_epoch} sequence "
            f"{self.base_sequence} ({self.last_offset_delta + 1} records, crc {self.crc})"
        )


def check_duplicate_answer(
    node: str,
    key: str,
    epoch: int,
    offset: int,
    batch: BatchIdentity,
    found_base: int,
    found: BatchIdentity | None,
    time_us: int,
    cuts: PowerCuts,
) -> KafkaViolation | None:
    """Judge one produce a leader acknowledged as a duplicate of a batch it already holds
    (``duplicate-answer`` events): Kafka answers a retried sequence with the original
    batch's base offset, so the leader's log, read as the answer leaves (for acks=all it is
    committed by then), must hold that very batch at ``offset``. ``found`` is the batch
    that holds ``offset`` there, based at ``found_base`` (None, -1: no batch holds it).
    A producer state that outlived a truncation names an offset that now holds another
    producer's batch, or nothing yet: the producer takes its write as done, and it is not
    in the log.

    One excuse: a power cut on every replica of a ``__transaction_state`` partition (Kafka
    does not fsync it either) can take back the coordinator's record of the epochs it
    handed out, so it hands a producer id and epoch out again, and the new producer's first
    batch then repeats an old one's identity (same producer, epoch and sequence, other
    content) in a log that kept the old one. The promise allows that loss, as it allows
    losing acknowledged records to such cuts; the place is noted in ``cuts.reissued`` so the
    checks of the writes excuse the new batch's records, which the log never took (kafka
    seed 86 with --transactions at 5 brokers: a committed write acknowledged this way was
    otherwise reported lost)."""
    if found is not None and found_base == offset and found == batch:
        return None
    if (
        found is not None
        and found_base == offset
        and (found.producer_id, found.producer_epoch, found.base_sequence)
        == (batch.producer_id, batch.producer_epoch, batch.base_sequence)
        and cuts.topic_may_have_lost(TXN_STATE_TOPIC, time_us)
    ):
        cuts.reissued.add((key, offset))
        return None
    if found is None:
        there = "no batch holds that offset"
    elif found_base != offset:
        there = f"that offset is inside the batch at {found_base}, {found.describe()}"
    else:
        there = f"the batch there is {found.describe()}"
    return KafkaViolation(
        DUPLICATE_OFFSET,
        f"{DUPLICATE_OFFSET}: {node}, leader of {key} in epoch {epoch}, answered the retry "
        f"of {batch.describe()} as a duplicate at offset {offset}, but in its log {there}",
        time_us,
    )


def check_committed_on_isr(
    node: str,
    key: str,
    epoch: int,
    from_hw: int,
    hw: int,
    diverged: Mapping[str, int],
    time_us: int,
) -> KafkaViolation | None:
    """Judge one move of a leader's high watermark (``hw-advance`` events): every member of
    the ISR the leader counted that follows it in its epoch holds the newly committed
    offsets ``[from_hw, hw)`` it has with the leader's batches, byte for byte (the CRCs
    compared). ``diverged`` names the members that held another batch there, each with the
    leader's first batch it disagreed on. Checked at the moment the high watermark moves, so
    a follower whose diverging log counted towards it is seen even if it is repaired a fetch
    later. A member that is merely short (a power cut lost its unflushed tail since its
    fetch) is not judged here: the checks on acknowledged writes judge what that loses."""
    if not diverged:
        return None
    member, offset = min(diverged.items(), key=lambda item: (item[1], item[0]))
    return KafkaViolation(
        COMMITTED_ON_ISR,
        f"{COMMITTED_ON_ISR}: {node}, leader of {key} in epoch {epoch}, moved its high "
        f"watermark from {from_hw} to {hw}, but ISR member {member} holds other batches than "
        f"the leader's from offset {offset} of {key}",
        time_us,
    )


def check_replica_caught_up(
    node: str,
    key: str,
    leader: str,
    hw: int,
    end: int,
    diverged_at: int,
    bound_s: float,
    time_us: int,
) -> KafkaViolation | None:
    """Judge one replica after the heal and the final reads (``replica-caught-up`` events):
    within ``bound_s`` it holds the leader's log up to the leader's high watermark (its log
    end ``end`` reached ``hw``), with the leader's batches byte for byte (``diverged_at``:
    the first offset of a batch of the leader's it holds differently, -1 for none)."""
    if end >= hw and diverged_at < 0:
        return None
    what = (
        f"holds other batches than the leader's from offset {diverged_at}"
        if diverged_at >= 0
        else f"reached only offset {end}"
    )
    return KafkaViolation(
        REPLICA_CATCH_UP,
        f"{REPLICA_CATCH_UP}: {node}'s replica of {key} must hold the log of its leader "
        f"{leader} up to its high watermark {hw} within {bound_s:.0f}s of the final reads, "
        f"but {what} of {key}",
        time_us,
    )


MEMBER_ASSIGNMENT = "member-assignment"
EXCLUSIVE_ASSIGNMENT = "exclusive-assignment"


@dataclass(slots=True)
class _Held:
    """One partition a KIP-848 member holds: since when, whether an authoritative
    coordinator gave it, and the offsets partition's ISR that stored that."""

    since_us: int
    authoritative: bool
    isr: tuple[int, ...]


@dataclass(slots=True)
class _Holder:
    confirmed_us: int = -1  # its last heartbeat an authoritative coordinator answered
    held: dict[int, _Held] = field(default_factory=dict)


@dataclass(slots=True)
class AssignmentChecker:
    """``exclusive-assignment``: KIP-848's promise that a partition is never held by two
    members of a consumer group at once (the coordinator gives a member a partition only
    once its previous owner has said it gave it up, or has been fenced).

    Fed ``member-assignment`` events: after each heartbeat answer, the partitions a member
    holds (empty once fenced, left or stopped), whether the coordinator that answered led
    the offsets partition in the controller's current epoch then (``authoritative``: a
    deposed coordinator can still answer a heartbeat that writes nothing, from state its
    successor may have moved past), the time that heartbeat was sent, and the ISR the
    offsets partition had.

    When a member takes a partition from an authoritative answer, any other member that
    still holds it (from an authoritative answer) is a violation, unless the coordinator
    may have fenced that member first: a coordinator fences a member no sooner than
    ``fence_after_us`` (the lesser of the session and the rebalance timeout) after a
    heartbeat of it that it answered without taking the partition away, so the holder's last
    authoritative heartbeat must be recent; or unless power cuts may have lost the record
    that gave the holder the partition (``PowerCuts.may_have_lost`` over the offsets log).
    """

    fence_after_us: int
    cuts: PowerCuts
    offsets_log: str
    violations: list[KafkaViolation] = field(default_factory=list)
    _members: dict[tuple[str, str], _Holder] = field(default_factory=dict)

    def assigned(
        self,
        group: str,
        member: str,
        partitions: Iterable[int],
        *,
        authoritative: bool,
        sent_us: int,
        isr: tuple[int, ...],
        time_us: int,
    ) -> KafkaViolation | None:
        holder = self._members.setdefault((group, member), _Holder())
        now = frozenset(partitions)
        if not now:
            del self._members[(group, member)]
            return None
        if authoritative:
            holder.confirmed_us = max(holder.confirmed_us, sent_us)
        found = None
        for partition in sorted(now - holder.held.keys()):
            if authoritative and found is None:
                found = self._taken_from_another(group, member, partition, time_us)
            holder.held[partition] = _Held(time_us, authoritative, isr)
        for partition in holder.held.keys() - now:
            del holder.held[partition]
        if found is not None:
            self.violations.append(found)
        return found

    def _taken_from_another(
        self, group: str, member: str, partition: int, time_us: int
    ) -> KafkaViolation | None:
        for (other_group, other), holder in sorted(self._members.items()):
            held = holder.held.get(partition)
            if (
                other_group != group
                or other == member
                or held is None
                or not held.authoritative
                or time_us >= holder.confirmed_us + self.fence_after_us
                or self.cuts.may_have_lost(self.offsets_log, held.isr, held.since_us)
            ):
                continue
            return KafkaViolation(
                EXCLUSIVE_ASSIGNMENT,
                f"{EXCLUSIVE_ASSIGNMENT}: {member} of group {group} was given partition "
                f"{partition} while {other} held it (since {held.since_us} us; its last "
                f"heartbeat the coordinator answered was sent at {holder.confirmed_us} us, "
                f"too recent for it to have been fenced)",
                time_us,
            )
        return None


ACL_ANSWER = "acl-answer"
ACL_BYPASSED = "acl-bypassed"


def check_acl_answer(
    node: str, api: str, resource: str, error: str, time_us: int
) -> KafkaViolation | None:
    """``acl-bypassed``: a request the ACLs deny (created, and applied by every broker, before
    the first fault: ``--acls``) is never answered as a success, by any broker, under any
    fault; every broker that serves has them in its image, or read them from its log."""
    if error != "NONE":
        return None
    return KafkaViolation(
        ACL_BYPASSED,
        f"{ACL_BYPASSED}: {node} answered {api} on {resource} with NONE, though an ACL "
        "every broker had applied denies it",
        time_us,
    )


QUOTA_ANSWER = "quota-answer"
QUOTA_EXCEEDED = "quota-exceeded"
# The bound's slack over the quota: a rate is measured over whole samples and a throttle
# follows the request that crossed it, so a connection may run a little ahead of the quota
# for a window; a broker that does not hold it back at all runs ahead without bound.
QUOTA_SLACK = 2.0


@dataclass(slots=True)
class _QuotaConnection:
    since_us: int  # when its first request was sent
    accepted: int = 0  # bytes of the batches answered NONE
    largest: int = 0
    flagged: bool = False  # one violation a connection


class QuotaChecker:
    """``quota-exceeded``: a client held to a byte-rate quota (``--quotas``) that ignores
    the throttle times it is answered is still held to the quota by each broker (KIP-219:
    the connection is muted for the throttle time after the answer). Judged per connection,
    from its first request: the bytes accepted on it stay within ``QUOTA_SLACK`` times what
    the quota lets through since then plus one window, and two requests. A connection is the
    unit because a broker restarted, a new leader or a new connection starts its own count;
    the quota is per client, so one connection can only have less."""

    def __init__(self, rate: float, window_s: float) -> None:
        self.rate = rate
        self.window_s = window_s
        self._connections: dict[tuple[str, str], _QuotaConnection] = {}
        self.violations: list[KafkaViolation] = []

    def answered(
        self, node: str, connection: str, sent_us: int, size: int, error: str, time_us: int
    ) -> KafkaViolation | None:
        state = self._connections.setdefault((node, connection), _QuotaConnection(sent_us))
        if error != "NONE":
            return None
        state.largest = max(state.largest, size)
        state.accepted += size
        elapsed_s = (time_us - state.since_us) / 1_000_000
        bound = QUOTA_SLACK * self.rate * (elapsed_s + self.window_s) + 2 * state.largest
        if state.accepted <= bound or state.flagged:
            return None
        state.flagged = True
        found = KafkaViolation(
            QUOTA_EXCEEDED,
            f"{QUOTA_EXCEEDED}: {node} accepted {state.accepted} bytes on connection "
            f"{connection} in {elapsed_s:.2f} s, over the {bound:.0f} a quota of "
            f"{self.rate:.0f} bytes/s lets through",
            time_us,
        )
        self.violations.append(found)
        return found


def check_liveness(ops: Iterable[KafkaOp], partitions: int, topic: str) -> list[str]:
    """After the heal, every partition took an acks=all produce (process ``heal``) and the
    final reads (process ``final``) reached its high watermark from offset 0 (nothing in the
    workload deletes records, so a log start past 0 lost them: ``log-start-moved``); one
    message per failure."""
    produced: set[str] = set()
    reached: set[str] = set()
    first_final: dict[str, int] = {}
    for op in ops:
        if op.status != "ok":
            continue
        if op.process == "final" and op.f == "poll":
            first_final.setdefault(op.key, op.value or 0)
        if op.process == "heal" and op.f == "send":
            produced.add(op.key)
        elif op.process == "final" and op.f == "poll" and op.offset is not None:
            end = op.records[-1][0] + 1 if op.records else (op.value or 0)
            if end >= op.offset:
                reached.add(op.key)
    found = []
    for partition in range(partitions):
        key = f"{topic}-{partition}"
        if key not in produced:
            found.append(f"liveness: {key} took no acks=all produce after the heal")
        elif key not in reached:
            found.append(f"liveness: the final reads of {key} did not reach its high watermark")
        if first_final.get(key, 0) > 0:  # nothing deletes records in this workload
            found.append(
                f"log-start-moved: the final reads of {key} could start only at offset "
                f"{first_final[key]}: the records below it are gone"
            )
    return found
