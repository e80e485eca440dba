"""A client lane driven by Apache Kafka's own Java client: an idempotent acks=all producer
and an assign()ing consumer in one JVM (jepsen/java/JepsenClient.java, run in Java's
single-file source mode on the kafka-clients jars of scripts/kafka-tools.sh).

The harness keeps the history: it records each invoke before it writes the command to the
JVM and the completion after it reads the answer, so a command's history window holds the
real operation (the JVM's own timing never enters the trace). The lane alternates sends to
its partition and polls of every partition, one command at a time; an answer of unknown
outcome, or none within the timeout, makes it start over as new clients and processes
(``new``, or a new JVM when it stopped answering).
"""

from __future__ import annotations

import random
import select
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from jepsen.txn import END_TIMEOUT_S, TxnWorkload, txn_key
from jepsen.workload import REPORT_MARGIN_S, Workload, per_partition
from sim.analysis.txn import RC_POLL, TXN_END, TXN_SEND
from sim.scenarios.kafka import (
    CRASH_CHANCE,
    HEAL_BOUND_S,
    NOT_APPENDED,
    POLL_WAIT_S,
    REQUEST_TIMEOUT_S,
    SEND_TIMEOUT_S,
    SETTLE_S,
    TOPIC,
    key_of,
)
from sim.scenarios.kafka_txn import COMMIT_CHANCE, MAX_TXN_PARTITIONS, TXN_TOPIC

JAVA_SOURCE = Path(__file__).resolve().parent / "java" / "JepsenClient.java"
KAFKA_TOOLS = Path(__file__).resolve().parent.parent / "scripts" / "kafka-tools.sh"
# A JVM compiles the source and connects before its first answer: seconds on a busy machine.
START_S = 60.0
# One step of a lane (a send, a poll, a transaction): whether the lane may go on.
Turn = Callable[[], bool]


class JavaGone(RuntimeError):
    """The JVM did not start, answer in time, or exited: one line."""


@dataclass(slots=True)
class JavaClient:
    """One JVM running JepsenClient.java; ``call`` writes a command and reads its answer."""

    proc: subprocess.Popen[str]

    @classmethod
    def start(
        cls, bootstrap: str, partitions: int, log: Path, transactional_id: str | None = None
    ) -> JavaClient:
        """A JVM whose clients exist (it said ``ready``); JavaGone, its log's last line
        named, when it did not get there within ``START_S``. With ``transactional_id`` its
        producer is transactional and its consumer read_committed, on the transactional
        topic."""
        topic = TOPIC if transactional_id is None else TXN_TOPIC
        argv = [str(JAVA_SOURCE), bootstrap, topic, str(partitions)]
        argv += [str(int(s * 1000)) for s in (REQUEST_TIMEOUT_S, SEND_TIMEOUT_S, POLL_WAIT_S)]
        argv += [] if transactional_id is None else [transactional_id]
        with log.open("a") as stderr:
            proc = subprocess.Popen(
                ["bash", str(KAFKA_TOOLS), *argv],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
                bufsize=1,
            )
        client = cls(proc)
        if client._answer(START_S) != "ready":
            client.close()
            lines = log.read_text().strip().splitlines()
            raise JavaGone(f"the Java client did not start: {lines[-1] if lines else 'no output'}")
        return client

    def call(self, command: str, timeout_s: float) -> str:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(command + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise JavaGone(f"the Java client exited before {command!r}") from None
        answer = self._answer(timeout_s)
        if answer is None:
            raise JavaGone(f"the Java client did not answer {command!r} in {timeout_s:.0f}s")
        return answer

    def _answer(self, timeout_s: float) -> str | None:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout_s)
        line = self.proc.stdout.readline() if ready else ""
        return line.strip() if line else None

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


def java_lane(
    workload: Workload, started: list[JavaClient], lane: int, seed: int, log: Path
) -> None:
    """Sends to partition ``lane % partitions`` and polls every partition, alternately at
    random, until the workload stops; processes ``j<lane>.<gen>`` (sends) and
    ``jc<lane>.<gen>/<partition>`` (polls). ``started[lane]`` is the lane's JVM; a new one
    is appended to ``started`` (the run kills them all at its end, whatever happens)."""
    rng = random.Random(seed)

    def turns(client: JavaClient, generation: int, positions: dict[int, int]) -> Turn:
        def turn() -> bool:
            if rng.random() < 0.5:
                return _send(workload, client, f"j{lane}.{generation}", lane)
            return _poll(workload, client, f"jc{lane}.{generation}", positions)

        return turn

    _run_lane(workload, started, lane, rng, lambda: _start(workload, log), turns)


def _start(workload: Workload, log: Path, transactional_id: str | None = None) -> JavaClient:
    return JavaClient.start(workload.bootstrap, workload.partitions, log, transactional_id)


def _run_lane(
    workload: Workload,
    started: list[JavaClient],
    lane: int,
    rng: random.Random,
    start: Callable[[], JavaClient],
    turns: Callable[[JavaClient, int, dict[int, int]], Turn],
) -> None:
    """The life of every Java lane: a generation's turns (``turns`` of its client, its
    number and its consumer positions, from 0) run a random 5-50 ms apart until one says
    stop, the lane crashes (``CRASH_CHANCE`` a turn) or the workload stops; then the lane
    starts over as a new generation, with new clients in the same JVM (``new``), or a new
    JVM when the old one is gone. ``started[lane]`` is the first JVM; new ones are appended
    (the run kills them all at its end, whatever happens)."""
    generation = 0
    current: JavaClient | None = started[lane]
    try:
        while not workload.stop.is_set():
            positions = dict.fromkeys(range(workload.partitions), 0)
            try:
                if current is None:
                    current = start()
                    started.append(current)
                elif generation:
                    current.call("new", START_S)
                turn = turns(current, generation, positions)
                while not workload.stop.wait(rng.uniform(0.005, 0.05)):
                    if not turn() or rng.random() < CRASH_CHANCE:
                        break
            except JavaGone:
                if current is not None:
                    current.close()
                current = None
                workload.stop.wait(1.0)  # a JVM that cannot start: try again, not in a spin
            generation += 1
    finally:
        if current is not None:
            current.close()


def _send(workload: Workload, client: JavaClient, process: str, lane: int) -> bool:
    partition = lane % workload.partitions
    key, value = key_of(partition), workload.next_value()
    workload.recorder.op(process, "invoke", "send", key, value)
    try:
        answer = client.call(f"send {partition} {value}", SEND_TIMEOUT_S + REPORT_MARGIN_S)
    except JavaGone:
        workload.recorder.op(process, "info", "send", key, value, error="no-answer")
        raise
    word, _, rest = answer.partition(" ")
    if word == "ok":
        workload.recorder.op(process, "ok", "send", key, value, offset=int(rest), error=None)
        return True
    status = "fail" if rest in NOT_APPENDED else "info"
    workload.recorder.op(process, status, "send", key, value, error=rest)
    return status == "fail"


def _poll(workload: Workload, client: JavaClient, process: str, positions: dict[int, int]) -> bool:
    processes = per_partition(process, positions)
    workload.invoke_polls(processes, positions)
    read: dict[int, list[int]] = {p: [] for p in positions}
    errors: dict[int, str] = {}
    highs: dict[int, int] = {}
    try:
        answer = client.call("poll", POLL_WAIT_S + REQUEST_TIMEOUT_S + REPORT_MARGIN_S)
    except JavaGone:
        for partition, position in positions.items():
            workload.recorder.op(
                processes[partition], "info", "poll", key_of(partition), position, error="no-answer"
            )
        raise
    word, _, rest = answer.partition(" ")
    if word == "ok":
        records, marks, _positions = rest.split(";")
        for record in records.split():
            partition, offset, value = (int(n) for n in record.split(","))
            read[partition] += [offset, value]
        for mark in marks.split():
            partition, high = (int(n) for n in mark.split(","))
            highs[partition] = high
    else:
        errors = dict.fromkeys(positions, rest)
    return workload.complete_polls(processes, positions, read, errors, highs.get)


# ---- the transactional lane ------------------------------------------------------------------
# A transactional command may wait for its coordinator (max.block.ms, the delivery timeout)
# and then for the records' delivery (the delivery timeout again).
TXN_ANSWER_S = END_TIMEOUT_S + REPORT_MARGIN_S


def java_transactional_id(lane: int) -> str:
    return f"jepsen-jtxn-{lane}"


def java_txn_lane(
    txn: TxnWorkload, started: list[JavaClient], lane: int, seed: int, log: Path
) -> None:
    """The librdkafka transactional lanes' history (jepsen/txn.py) with the Java client:
    transactions of 1-3 random partitions that commit or abort (process
    ``jt<lane>.<gen>``, transactional id ``jepsen-jtxn-<lane>``) and read_committed polls of
    every partition (``jrc<lane>.<gen>/<partition>``), alternately at random. Any error of
    the transaction itself, or a send's, makes the lane start over (``new``: a producer
    with the same transactional id, which fences the old one)."""
    workload = txn.workload
    rng = random.Random(seed)

    def turns(client: JavaClient, generation: int, positions: dict[int, int]) -> Turn:
        count = 0

        def turn() -> bool:
            nonlocal count
            if rng.random() < 0.5:
                process = f"jt{lane}.{generation}"
                count += 1
                return _transaction(txn, client, rng, process, f"{process}-{count - 1}")
            processes = per_partition(f"jrc{lane}.{generation}", positions)
            return _rc_poll(txn, client, processes, positions, {})

        return turn

    def start() -> JavaClient:
        return _start(workload, log, java_transactional_id(lane))

    _run_lane(workload, started, lane, rng, start, turns)


def _transaction(
    txn: TxnWorkload, client: JavaClient, rng: random.Random, process: str, name: str
) -> bool:
    """One transaction: whether the lane may go on with these clients."""
    recorder = txn.workload.recorder
    partitions = txn.workload.partitions
    if client.call("begin", TXN_ANSWER_S) != "ok":
        return False
    chosen = rng.sample(range(partitions), rng.randint(1, min(MAX_TXN_PARTITIONS, partitions)))
    sent = True
    for partition in chosen:
        key, value = txn_key(partition), txn.workload.next_value()
        recorder.op(process, "invoke", TXN_SEND, key, value, txn=name)
        try:
            answer = client.call(f"send {partition} {value}", TXN_ANSWER_S)
        except JavaGone:
            recorder.op(process, "info", TXN_SEND, key, value, txn=name, error="no-answer")
            raise
        word, _, rest = answer.partition(" ")
        if word == "ok":
            recorder.op(process, "ok", TXN_SEND, key, value, txn=name, offset=int(rest), error=None)
            continue
        status = "fail" if rest in NOT_APPENDED else "info"
        recorder.op(process, status, TXN_SEND, key, value, txn=name, error=rest)
        sent = False
        break
    commit = sent and rng.random() < COMMIT_CHANCE
    recorder.op(process, "invoke", TXN_END, name, int(commit))
    try:
        answer = client.call("commit" if commit else "abort", TXN_ANSWER_S)
    except JavaGone:
        recorder.op(process, "info", TXN_END, name, int(commit), error="no-answer")
        raise
    if answer != "ok":
        recorder.op(process, "info", TXN_END, name, int(commit), error=answer.partition(" ")[2])
        return False
    recorder.op(process, "ok", TXN_END, name, int(commit), error=None)
    return True


def _rc_poll(
    txn: TxnWorkload,
    client: JavaClient,
    processes: dict[int, str],
    positions: dict[int, int],
    ends: dict[int, int],
) -> bool:
    """One read_committed poll of every partition, each recorded as ``rc-poll`` by its
    process; ``ends`` gets each partition's last stable offset where the consumer knows it
    (its lag is measured from there). False when the poll failed."""
    txn.invoke_polls(processes, positions)
    read: dict[int, list[int]] = {p: [] for p in positions}
    errors: dict[int, str] = {}
    reached: dict[int, int] = {}
    try:
        answer = client.call("poll", POLL_WAIT_S + REQUEST_TIMEOUT_S + REPORT_MARGIN_S)
    except JavaGone:
        for partition, position in positions.items():
            txn.workload.recorder.op(
                processes[partition],
                "info",
                RC_POLL,
                txn_key(partition),
                position,
                error="no-answer",
            )
        raise
    word, _, rest = answer.partition(" ")
    if word == "ok":
        records, marks, positions_after = rest.split(";")
        for record in records.split():
            partition, offset, value = (int(n) for n in record.split(","))
            read[partition] += [offset, value]
        for mark in marks.split():
            partition, end = (int(n) for n in mark.split(","))
            ends[partition] = end
        for after in positions_after.split():
            partition, position = (int(n) for n in after.split(","))
            reached[partition] = position
    else:
        errors = dict.fromkeys(positions, rest)
    return txn.complete_polls(processes, positions, read, errors, reached)


JAVA_FINAL = "jtxn-final"


def java_final_reads(txn: TxnWorkload, log: Path) -> None:
    """Processes ``jtxn-final/<partition>``: after the heal, a new JVM's read_committed
    consumer reads every partition from 0 until its positions reach last stable offsets that
    stay the same for ``SETTLE_S`` (bounded by ``HEAL_BOUND_S``), as ``txn-final`` does with
    librdkafka.
    So every run judges one whole read by the Java client, however little time the
    schedule left its lane for polls (a send that times out and the abort after it can take
    15 s of a 30 s run). A JVM that does not start or answer ends it with ``info`` polls
    (``no-answer``) in the history."""
    workload = txn.workload
    positions = dict.fromkeys(range(workload.partitions), 0)
    processes = per_partition(JAVA_FINAL, positions)
    try:
        client = _start(workload, log, "jepsen-jtxn-final")  # never begins: fences no one
    except JavaGone:
        txn.invoke_polls(processes, positions)
        for partition, process in processes.items():
            workload.recorder.op(process, "info", RC_POLL, txn_key(partition), 0, error="no-answer")
        return
    try:
        deadline, settled = time.monotonic() + HEAL_BOUND_S, None
        while time.monotonic() < deadline:
            ends: dict[int, int] = {}
            _rc_poll(txn, client, processes, positions, ends)
            if len(ends) < len(positions) or any(positions[p] < end for p, end in ends.items()):
                continue
            if settled == ends:
                return
            settled = ends
            time.sleep(SETTLE_S)
    except JavaGone:
        return  # its polls are in the history as info (no-answer)
    finally:
        client.close()
