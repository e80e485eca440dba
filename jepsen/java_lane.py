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
from dataclasses import dataclass
from pathlib import Path

from jepsen.workload import REPORT_MARGIN_S, Workload, per_partition
from sim.scenarios.kafka import (
    CRASH_CHANCE,
    NOT_APPENDED,
    POLL_WAIT_S,
    REQUEST_TIMEOUT_S,
    SEND_TIMEOUT_S,
    TOPIC,
    key_of,
)

JAVA_SOURCE = Path(__file__).resolve().parent / "java" / "JepsenClient.java"
KAFKA_TOOLS = Path(__file__).resolve().parent.parent / "scripts" / "kafka-tools.sh"
# A JVM compiles the source and connects before its first answer: seconds on a busy machine.
START_S = 60.0


class JavaGone(RuntimeError):
    """The JVM did not start, answer in time, or exited: one line."""


@dataclass(slots=True)
class JavaClient:
    """One JVM running JepsenClient.java; ``call`` writes a command and reads its answer."""

    proc: subprocess.Popen[str]

    @classmethod
    def start(cls, bootstrap: str, partitions: int, log: Path) -> JavaClient:
        """A JVM whose clients exist (it said ``ready``); JavaGone, its log's last line
        named, when it did not get there within ``START_S``."""
        argv = [str(JAVA_SOURCE), bootstrap, TOPIC, str(partitions)]
        argv += [str(int(s * 1000)) for s in (REQUEST_TIMEOUT_S, SEND_TIMEOUT_S, POLL_WAIT_S)]
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
    generation = 0
    current: JavaClient | None = started[lane]
    try:
        while not workload.stop.is_set():
            positions = dict.fromkeys(range(workload.partitions), 0)
            try:
                if current is None:
                    current = JavaClient.start(workload.bootstrap, workload.partitions, log)
                    started.append(current)
                elif generation:
                    current.call("new", START_S)
                while not workload.stop.wait(rng.uniform(0.005, 0.05)):
                    if rng.random() < 0.5:
                        go_on = _send(workload, current, f"j{lane}.{generation}", lane)
                    else:
                        go_on = _poll(workload, current, f"jc{lane}.{generation}", positions)
                    if not go_on or rng.random() < CRASH_CHANCE:
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
        records, _, marks = rest.partition(";")
        for record in records.split():
            partition, offset, value = (int(n) for n in record.split(","))
            read[partition] += [offset, value]
        for mark in marks.split():
            partition, high = (int(n) for n in mark.split(","))
            highs[partition] = high
    else:
        errors = dict.fromkeys(positions, rest)
    return workload.complete_polls(processes, positions, read, errors, highs.get)
