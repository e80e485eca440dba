"""One fault run, start to finish: hosts up, cluster formatted and started, the topic
created, workload and nemesis for the time limit, the heal, the final reads, the trace
published, everything torn down (also on Ctrl-C, SIGTERM or an exception).

A harness killed outright (SIGKILL, a power cut) leaves its namespaces, their processes and
its root FORWARD rule behind: ``kraft-jepsen cleanup`` removes them by name.
"""

from __future__ import annotations

import fcntl
import secrets
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import IO

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from jepsen.admin import AdminWorkload
from jepsen.cluster import LAYOUT, ClockMode, Cluster, choose, libfaketime, place
from jepsen.history import Recorder
from jepsen.java_lane import (
    JavaClient,
    JavaGone,
    java_final_reads,
    java_lane,
    java_transactional_id,
    java_txn_lane,
)
from jepsen.nemesis import Nemesis
from jepsen.netns import NetnsBackend
from jepsen.servers import KRAFT_PY, ApacheKafka, NodeProgram
from jepsen.txn import TxnWorkload, consumer_lanes
from jepsen.watch import LeaderWatch
from jepsen.workload import LOG_LEVEL, Workload
from sim.progress import wait_showing_progress
from sim.run import RunConfig
from sim.scenarios.kafka import (
    CONSUMERS,
    REQUEST_TIMEOUT_S,
    SETUP_BOUND_S,
    TOPIC,
    key_of,
)
from sim.scenarios.kafka_txn import TXN_TOPIC, broker_props

WORK_PREFIX = "kraft-jepsen-"
LOCK_NAME = "harness.lock"  # held by a live harness (claim)
PRODUCER_LANES_PER_PARTITION = 2
ADMIN_LANES = 2  # the metadata scenario's admin workload (jepsen/admin.py)
JOIN_S = 30.0  # a client lane finishes its operation within its timeouts


class RunError(RuntimeError):
    """The run could not get going (no leaders, no topic): one line for the CLI."""


@dataclass(frozen=True, slots=True)
class RunOptions:
    trace_dir: Path
    controllers: int = 3
    brokers: int = 3
    time_limit_s: float = 60.0
    nemeses: tuple[str, ...] = ("partition", "kill")
    seed: int = 1
    partitions: int = 3
    bug: str | None = None
    layout: Path = LAYOUT
    fake_monotonic: bool = False
    keep_data: bool = False
    kafka_lib: Path | None = None  # run Apache Kafka from this lib dir, not kraft-server
    admin_lanes: int = ADMIN_LANES
    java_lanes: int = 0  # Apache Kafka's Java client (jepsen/java_lane.py): needs java
    txn_lanes: int = 0  # librdkafka's transactional producers (jepsen/txn.py)
    java_txn_lanes: int = 0  # the Java client's transactional lanes (jepsen/java_lane.py)

    @property
    def transactional(self) -> bool:
        """Whether the run has transactional lanes (their topic, the brokers' settings)."""
        return bool(self.txn_lanes or self.java_txn_lanes)


@dataclass(frozen=True, slots=True)
class RunReport:
    tag: str  # in every name the run gave the machine (jepsen/netns.py)
    run_id: str
    run_dir: Path
    work_dir: Path
    faults: int
    trace_events: int


def _interrupt(signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@contextmanager
def _signals_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP end the run like Ctrl-C: through the teardown."""
    previous = {s: signal.signal(s, _interrupt) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _thread(target, *args: object) -> threading.Thread:  # type: ignore[no-untyped-def]
    thread = threading.Thread(target=target, args=args, daemon=True)
    thread.start()
    return thread


def create_topic(bootstrap: str, partitions: int, rf: int, topic_name: str = TOPIC) -> None:
    """A workload's topic with min.insync.replicas 2 (1 when rf is 1), as the simulator's."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": LOG_LEVEL})
    topic = NewTopic(
        topic_name,
        num_partitions=partitions,
        replication_factor=rf,
        config={"min.insync.replicas": str(min(2, rf))},
    )
    deadline = time.monotonic() + SETUP_BOUND_S
    while True:
        try:
            admin.create_topics([topic])[topic_name].result(timeout=REQUEST_TIMEOUT_S)
            return
        except (KafkaException, TimeoutError) as failure:
            name = failure.args[0].name() if failure.args else type(failure).__name__
            if name == "TOPIC_ALREADY_EXISTS":
                return
            if time.monotonic() > deadline:
                raise RunError(f"the topic could not be created: {name}") from None
        time.sleep(0.5)


def run(options: RunOptions) -> RunReport:
    """One run; its trace is published under ``options.trace_dir``."""
    chosen = choose(options.layout, options.controllers, options.brokers)
    program: NodeProgram = KRAFT_PY
    if options.kafka_lib is not None:
        if options.bug is not None:
            raise RunError("--bug plants kraft-py's bugs: it cannot go with --kafka-lib")
        program = ApacheKafka(options.kafka_lib)
    clock = None
    clock_skipped = None  # why the clock nemesis injects nothing on this program
    if "clock" in options.nemeses:
        if options.fake_monotonic or program.wall_clock_only is None:
            clock = ClockMode(libfaketime(), options.fake_monotonic)
        else:
            clock_skipped = program.wall_clock_only
    tag = secrets.token_hex(2)
    backend = NetnsBackend(tag)
    work = Path(tempfile.mkdtemp(prefix=f"{WORK_PREFIX}{tag}-"))
    lock = claim(work)
    rf = min(3, options.brokers)
    config = RunConfig(
        scenario="kafka",
        seed=options.seed,
        duration_s=options.time_limit_s,
        faults=options.nemeses,
        bug=options.bug,
        nodes=options.controllers + options.brokers,
        voters=options.controllers,
        controllers=options.controllers,
        brokers=options.brokers,
        partitions=options.partitions,
        rf=rf,
        idempotent=True,
    )
    system = "" if options.kafka_lib is None else f"{program.name}-"
    run_id = f"jepsen-{system}s{options.seed}-{time.strftime('%Y%m%dT%H%M%S')}-{tag}"
    recorder = Recorder(options.trace_dir, config, run_id)
    cluster: Cluster | None = None
    stops: list[threading.Event] = []
    nemesis = None
    javas: list[JavaClient] = []  # every JVM started (the lanes append their new ones)
    txn_javas: list[JavaClient] = []
    try:
        with _signals_interrupt():
            backend.up(list(chosen))
            props = place(chosen, backend.address, work, options.partitions)
            if options.transactional:
                for node in props.values():
                    if "broker" in node["process.roles"]:
                        node.update(broker_props(rf))
            cluster = Cluster(
                work, backend, recorder, props, bug=options.bug, clock=clock, program=program
            )
            recorder.event(
                "kafka-config",
                topic=TOPIC,
                acks="all",
                rf=rf,
                partitions=options.partitions,
                idempotent=True,
                **({"txn_topics": [TXN_TOPIC]} if options.transactional else {}),
            )
            if clock_skipped is not None:
                recorder.event("nemesis-skipped", nemesis="clock", reason=clock_skipped)
            for node in props:
                cluster.start(node)
            create_topic(cluster.bootstrap, options.partitions, rf)
            if options.transactional:
                create_topic(cluster.bootstrap, options.partitions, rf, TXN_TOPIC)
            watch = LeaderWatch(
                recorder, cluster.broker_endpoints(), cluster.controller_endpoints()
            )
            stops.append(watch.stop)
            watcher = _thread(watch.run)
            _wait_for_leaders(watch, options.partitions)
            workload = Workload(recorder, cluster.bootstrap, options.partitions)
            stops.append(workload.stop)
            # Each partition's first producer lane is confluent-kafka's, its second aiokafka's.
            producers = [workload.producer_lane, workload.aiokafka_producer_lane]
            lanes = [
                _thread(producers[lane // options.partitions % 2], lane, options.seed * 100 + lane)
                for lane in range(PRODUCER_LANES_PER_PARTITION * options.partitions)
            ]
            # The simulator's consumer lanes, half of them (rounded down) aiokafka's.
            consumers = [workload.consumer_lane, workload.aiokafka_consumer_lane]
            lanes += [
                _thread(consumers[lane % 2], lane, options.seed * 100 + 50 + lane)
                for lane in range(CONSUMERS)
            ]
            txn = TxnWorkload(workload)
            lanes += [
                _thread(txn.producer_lane, lane, options.seed * 100 + 60 + lane)
                for lane in range(options.txn_lanes)
            ]
            lanes += [
                _thread(txn.consumer_lane, lane, options.seed * 100 + 90 + lane)
                for lane in range(consumer_lanes(options.txn_lanes))
            ]
            txn_logs = [work / f"java-txn-{lane}.log" for lane in range(options.java_txn_lanes)]
            for lane, log in enumerate(txn_logs):  # each JVM ready before the faults begin
                try:
                    tid = java_transactional_id(lane)
                    txn_javas.append(
                        JavaClient.start(cluster.bootstrap, options.partitions, log, tid)
                    )
                except JavaGone as gone:
                    raise RunError(str(gone)) from None
            lanes += [
                _thread(java_txn_lane, txn, txn_javas, lane, options.seed * 100 + 40 + lane, log)
                for lane, log in enumerate(txn_logs)
            ]
            java_logs = [work / f"java-{lane}.log" for lane in range(options.java_lanes)]
            for log in java_logs:  # each JVM ready before the faults begin
                try:
                    javas.append(JavaClient.start(cluster.bootstrap, options.partitions, log))
                except JavaGone as gone:
                    raise RunError(str(gone)) from None
            lanes += [
                _thread(java_lane, workload, javas, lane, options.seed * 100 + 70 + lane, log)
                for lane, log in enumerate(java_logs)
            ]
            admin = AdminWorkload(recorder, cluster.bootstrap)
            stops.append(admin.stop)
            lanes += [
                _thread(admin.lane, lane, options.seed * 100 + 80 + lane)
                for lane in range(options.admin_lanes)
            ]
            nemesis = Nemesis(cluster, backend, recorder, watch, options.nemeses, options.seed)
            stops.append(nemesis.stop)
            faulting = _thread(nemesis.run)
            wait_showing_progress(
                options.time_limit_s, f"kraft-jepsen {run_id}", lambda: recorder.count
            )
            nemesis.stop.set()
            faulting.join()
            nemesis.heal()
            workload.stop.set()
            admin.stop.set()
            for lane in lanes:
                lane.join(JOIN_S)
            workload.heal_sends()
            workload.final_reads()
            if options.transactional:
                txn.final_reads()
            if options.java_txn_lanes:
                java_final_reads(txn, work / "java-txn-final.log")
            if options.admin_lanes:
                admin.final_reads(cluster.broker_endpoints())
            watch.stop.set()
            watcher.join(JOIN_S)
            cluster.reap()
            run_dir = recorder.commit(options.seed)
    finally:
        for stop in stops:
            stop.set()
        for java in [*javas, *txn_javas]:
            java.close()
        if cluster is not None:
            cluster.close()
        backend.down()
        if not options.keep_data:
            shutil.rmtree(work, ignore_errors=True)
        lock.close()
    return RunReport(tag, run_id, run_dir, work, nemesis.injected if nemesis else 0, recorder.count)


def _wait_for_leaders(watch: LeaderWatch, partitions: int) -> None:
    deadline = time.monotonic() + SETUP_BOUND_S
    while not all(key_of(p) in watch.leaders for p in range(partitions)):
        if time.monotonic() > deadline:
            raise RunError(f"the topic had no leaders {SETUP_BOUND_S:.0f}s after start")
        time.sleep(0.1)


def claim(work: Path) -> IO[str]:
    """Lock the run's work dir for as long as the harness lives. ``cleanup`` spares a run
    whose lock is held, so it removes what killed runs left and never tears down one still
    going; the kernel drops the lock however the harness dies, SIGKILL included."""
    handle = open(work / LOCK_NAME, "w")  # noqa: SIM115  (held for the whole run)
    fcntl.flock(handle, fcntl.LOCK_EX)
    return handle


def _is_live(work: Path) -> bool:
    try:
        with open(work / LOCK_NAME) as handle:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False  # no lock file: a run that is over (--keep-data) or never began
    return False


def live_tags() -> set[str]:
    """The tags of the runs whose harness still holds its work dir's lock."""
    return {
        path.name[len(WORK_PREFIX) :].split("-")[0]
        for path in Path(tempfile.gettempdir()).glob(f"{WORK_PREFIX}*")
        if _is_live(path)
    }


def cleanup_work_dirs(spare: set[str]) -> list[str]:
    """Remove the data dirs runs killed outright left in the temp dir, but a live run's."""
    removed = []
    for path in sorted(Path(tempfile.gettempdir()).glob(f"{WORK_PREFIX}*")):
        if path.name[len(WORK_PREFIX) :].split("-")[0] in spare:
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(f"directory {path}")
    return removed
