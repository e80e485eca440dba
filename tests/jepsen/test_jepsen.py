"""kraft-jepsen: the node layer, the CLI's refusals, and one short fault run on real
processes whose verdict comes from kraft-analyze's checks; nothing is left behind, whether
the harness ends normally, is told to stop (SIGTERM) or is killed (then ``cleanup``).

Needs root (network namespaces, iptables), as kraft-jepsen itself does; scripts/test.sh
installs iproute2, iptables and faketime."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from jepsen.cli import main
from jepsen.cluster import LAYOUT, choose, place
from jepsen.java_lane import JAVA_SOURCE
from jepsen.nemesis import parse_nemeses
from jepsen.netns import NetnsBackend
from jepsen.processes import Processes, wait_until
from jepsen.run import WORK_PREFIX, RunOptions, claim, run
from kraft.config import ConfigError
from kraft.planted import PLANTED_BUGS_ENV, planted_bugs
from sim.analysis.job import analyze_local
from sim.analysis.load import read_trace_pandas
from tests.jepsen.leftovers import leftovers, namespaces, processes_running
from tests.kafka_tools import kafka_tools  # noqa: F401  (pytest fixture: installs once)
from tests.kraft.procs import free_port


def test_the_layout_is_placed_on_the_hosts_with_only_the_chosen_voters(tmp_path: Path) -> None:
    chosen = choose(LAYOUT, 1, 3)
    assert sorted(chosen) == [1, 4, 5, 6]
    placed = place(chosen, lambda node: f"10.9.9.{node}", tmp_path, partitions=3)
    assert placed[1]["controller.quorum.voters"] == "1@10.9.9.1:9093"
    assert placed[5]["controller.quorum.voters"] == "1@10.9.9.1:9093"
    assert placed[5]["listeners"] == "PLAINTEXT://10.9.9.5:9092"
    assert placed[5]["advertised.listeners"] == "PLAINTEXT://10.9.9.5:9092"
    assert placed[4]["log.dirs"] == str(tmp_path / "data-n4")
    assert placed[4]["default.replication.factor"] == "3"


def test_usage_errors_are_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, message in (
        (["run", "--nodes", "3x3"], "--nodes '3x3' is not CONTROLLERS+BROKERS"),
        (["run", "--nemesis", "kill,flood"], "unknown nemesis 'flood'"),
        (["run", "--bug", "no-such-bug"], "unknown planted bug 'no-such-bug'"),
        (["run", "--nodes", "4+3"], "not enough for 4+3"),
        (["run", "--kafka-lib", "/nonexistent"], "/nonexistent holds no kafka_2.*.jar"),
        (["run", "--kafka-lib", "/x", "--bug", "truncate-to-hw"], "cannot go with --kafka-lib"),
        (["run", "--admin-lanes", "-1"], "--admin-lanes -1: must be 0 or more"),
        (["run", "--java-lanes", "-2"], "--java-lanes -2: must be 0 or more"),
        (["run", "--txn-lanes", "-1"], "--txn-lanes -1: must be 0 or more"),
        (["run", "--java-txn-lanes", "-1"], "--java-txn-lanes -1: must be 0 or more"),
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, err
    assert parse_nemeses("all") == (
        "partition",
        "kill",
        "pause",
        "clock",
        "netem",
        "depose-controller",
    )
    assert parse_nemeses("none") == ()


def test_planted_bugs_are_read_from_the_environment() -> None:
    assert planted_bugs({}) == frozenset()
    named = {PLANTED_BUGS_ENV: "ack-before-fetch, truncate-to-hw"}
    assert planted_bugs(named) == {"ack-before-fetch", "truncate-to-hw"}
    with pytest.raises(ConfigError, match="unknown planted bug 'fast-path'"):
        planted_bugs({PLANTED_BUGS_ENV: "fast-path"})


def test_a_server_refuses_to_start_with_an_unknown_planted_bug(tmp_path: Path) -> None:
    port = free_port()
    props = {
        "process.roles": "controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{port}",
        "listeners": f"CONTROLLER://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
    }
    environ = {**os.environ, PLANTED_BUGS_ENV: "fast-path"}
    procs = Processes(tmp_path, {1: props}, environ=lambda _node: environ)
    procs.start(1)
    try:
        assert procs.procs[1].wait(timeout=60) == 1
    finally:
        procs.cleanup()
    assert "kraft-server start: KRAFT_PLANTED_BUGS: unknown planted bug 'fast-path'" in procs.log(1)


def _connects(backend: NetnsBackend, src: int | None, dst: int, port: int) -> bool:
    code = (
        "import socket, sys\n"
        "try:\n    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1)\n"
        "except OSError:\n    sys.exit(1)\n"
    )
    argv = [sys.executable, "-c", code, backend.address(dst), str(port)]
    return subprocess.run(argv if src is None else backend.wrap(src, argv)).returncode == 0


@contextmanager
def _server_in_n2() -> Iterator[NetnsBackend]:
    """Hosts n1 and n2 with an HTTP server listening in n2; ``down`` afterwards must kill
    the server and leave nothing behind."""
    backend = NetnsBackend("f" + os.urandom(2).hex()[:3])
    try:
        backend.up([1, 2])
        server = subprocess.Popen(
            backend.wrap(
                2, [sys.executable, "-m", "http.server", "-b", backend.address(2), "8000"]
            ),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_until(lambda: _connects(backend, None, 2, 8000), "the server in n2 listens")
        yield backend
    finally:
        backend.down()
    assert server.wait(timeout=10) == -signal.SIGKILL  # down() killed what ran in n2
    assert leftovers(backend.tag) == []


def test_a_cut_drops_one_direction_until_healed_and_down_removes_everything() -> None:
    with _server_in_n2() as backend:
        assert _connects(backend, 1, 2, 8000)
        backend.drop_from(2, [1])
        assert not _connects(backend, 1, 2, 8000)
        assert _connects(backend, None, 2, 8000)  # the harness's clients are never cut off
        backend.heal()
        assert _connects(backend, 1, 2, 8000)
        assert leftovers(backend.tag)


def _in(backend: NetnsBackend, node: int, *argv: str) -> str:
    return subprocess.run(backend.wrap(node, list(argv)), capture_output=True, text=True).stdout


def test_a_slow_link_is_what_the_kernel_allows_and_heal_removes_it() -> None:
    with _server_in_n2() as backend:
        assert _connects(backend, 1, 2, 8000)
        applied = backend.slow(2, delay_ms=50, jitter_ms=10, loss_pct=100)
        qdiscs = _in(backend, 2, "tc", "qdisc", "show", "dev", "eth0")
        rules = _in(backend, 2, "iptables", "-S", "INPUT")
        if applied["method"] == "netem":  # a kernel with sch_netem
            assert "netem" in qdiscs and "loss 100%" in qdiscs
        else:  # this machine's: no sch_netem
            assert backend.netem_missing
            assert applied == {
                "method": "tbf+iptables",
                "rate_kbit": 10485,  # 64 KiB in 50 ms
                "queue_ms": 120,
                "loss_pct": 100,
            }
            assert "tbf" in qdiscs and "rate 10485Kbit" in qdiscs
            assert "--mode random --probability 1" in rules and "-j DROP" in rules
        assert not _connects(backend, 1, 2, 8000)  # every packet n2 gets is lost
        backend.heal()
        assert "netem" not in _in(backend, 2, "tc", "qdisc", "show", "dev", "eth0")
        assert "tbf" not in _in(backend, 2, "tc", "qdisc", "show", "dev", "eth0")
        assert "statistic" not in _in(backend, 2, "iptables", "-S", "INPUT")
        assert _connects(backend, 1, 2, 8000)


def test_a_short_fault_run_is_clean_and_leaves_nothing_behind(tmp_path: Path) -> None:
    options = RunOptions(
        trace_dir=tmp_path / "traces",
        controllers=1,
        brokers=3,
        time_limit_s=20.0,
        nemeses=("partition", "kill"),
        seed=2,
    )
    report = run(options)
    assert leftovers(report.tag, report.work_dir) == []
    assert not report.work_dir.exists()
    trace = read_trace_pandas(str(options.trace_dir))
    history, events = trace.history, trace.events
    assert set(trace.runs["scenario"]) == {"kafka"}
    ok = history[history["type"] == "ok"]
    assert {"send", "poll"} <= set(ok["f"])
    assert {"heal", "final"} <= set(ok["process"])
    pollers = {process.split(".")[0] for process in ok[ok["f"] == "poll"]["process"]}
    assert {"c0", "a1"} <= pollers  # confluent-kafka's and aiokafka's consumers both read
    senders = {
        process.split(".")[0].rstrip("0123456789") for process in ok[ok["f"] == "send"]["process"]
    }
    assert {"p", "ap"} <= senders  # and both clients' producers had sends acknowledged
    assert report.faults >= 1
    assert {"kill", "restart"} & set(events["kind"]) or {"partition", "oneway"} & set(
        events["kind"]
    )
    assert "became-leader" in set(events["kind"])
    analysis = analyze_local(trace)
    assert analysis.violating_runs == [], analysis.violations.to_dict("records")


@pytest.mark.usefixtures("kafka_tools")
def test_the_admin_workload_under_pauses_and_slow_links_is_linearizable(tmp_path: Path) -> None:
    """The metadata scenario's admin workload on real clients: every topic it touched is read
    after the heal and judged linearizable by kraft-analyze's topic model; seed 1's schedule
    slows a node's link (netem, or tbf and iptables drops here) then pauses one. A lane of
    Apache Kafka's Java client sends and polls beside the Python clients."""
    options = RunOptions(
        trace_dir=tmp_path / "traces",
        controllers=1,
        brokers=3,
        time_limit_s=20.0,
        nemeses=("pause", "netem"),
        seed=1,
        admin_lanes=3,
        java_lanes=1,
    )
    report = run(options)
    assert leftovers(report.tag, report.work_dir) == []
    assert not processes_running(str(JAVA_SOURCE))  # the Java lane's JVMs are gone too
    trace = read_trace_pandas(str(options.trace_dir))
    history, events = trace.history, trace.events
    slow = [json.loads(d) for d in events[events["kind"] == "slow"]["detail"]]
    assert slow and {d["method"] for d in slow} <= {"netem", "tbf+iptables"}
    assert "pause" in set(events["kind"])
    admin = history[history["process"].str.startswith("admin")]
    lanes = admin[~admin["process"].str.startswith("admin-final")]
    ok = lanes[lanes["type"] == "ok"]
    assert {"create", "alter-config"} <= set(ok["f"])
    touched = set(lanes["key"])
    finals = admin[admin["process"].str.startswith("admin-final") & (admin["type"] == "ok")]
    assert set(finals[finals["f"] == "read"]["key"]) == touched
    assert set(finals[finals["f"] == "read-config"]["key"]) == touched
    java = history[history["process"].str.startswith("j") & (history["type"] == "ok")]
    assert {"send", "poll"} <= set(java["f"])
    analysis = analyze_local(trace)
    assert analysis.violating_runs == [], analysis.violations.to_dict("records")
    assert analysis.keys.empty  # no topic's search was a violation or gave up
    assert analysis.keys_checked >= len(touched)


def _parents(namespace: str) -> set[int]:
    """The parent process ids of the processes in ``namespace``."""
    listed = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True)
    parents = set()
    for pid in listed.stdout.split():
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue  # exited while we looked
        parents.add(int(stat.rpartition(")")[2].split()[1]))
    return parents


def _harness(tmp_path: Path) -> tuple[subprocess.Popen[bytes], str]:
    """A harness run in its own process, once its cluster's nodes run; (it, its tag)."""
    before = namespaces()
    argv = [sys.executable, "-m", "jepsen.cli", "run", "--nodes", "1+1", "--time-limit", "120"]
    harness = subprocess.Popen(
        [*argv, "--trace", str(tmp_path / "traces")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def running() -> str | None:
        # Namespaces whose processes the harness started: other runs on the machine (other
        # test sessions) make namespaces too.
        ours = [n for n in sorted(namespaces() - before) if harness.pid in _parents(n)]
        return ours[0].split("-")[1] if len(ours) == 2 else None

    return harness, wait_until(running, "the harness's nodes run", deadline_s=120)


def test_sigterm_tears_the_run_down(tmp_path: Path) -> None:
    harness, tag = _harness(tmp_path)
    harness.send_signal(signal.SIGTERM)
    assert harness.wait(timeout=60) == 130
    assert leftovers(tag) == []


def test_cleanup_removes_what_a_killed_harness_left(tmp_path: Path) -> None:
    harness, tag = _harness(tmp_path)
    harness.kill()
    harness.wait()
    assert leftovers(tag)
    assert main(["cleanup"]) == 0
    assert leftovers(tag) == []
    assert not list(Path("/tmp").glob(f"kraft-jepsen-{tag}-*"))


def test_cleanup_spares_a_run_whose_harness_is_alive() -> None:
    """Two users (or two test sessions) on one machine: one's cleanup must not tear down the
    other's live run. A live harness holds its work dir's lock; when it dies, however it
    dies, the lock goes and cleanup takes the run's leftovers."""
    tag = secrets.token_hex(2)
    backend = NetnsBackend(tag)
    work = Path(tempfile.mkdtemp(prefix=f"{WORK_PREFIX}{tag}-"))
    lock = claim(work)
    try:
        backend.up([1])
        assert main(["cleanup"]) == 0
        assert leftovers(tag) != [] and work.exists()
    finally:
        lock.close()  # what the kernel does when the harness dies
    assert main(["cleanup"]) == 0
    assert leftovers(tag) == [] and not work.exists()


@pytest.mark.slow
def test_a_planted_ack_before_fetch_loses_acknowledged_writes_the_checks_flag(
    tmp_path: Path,
) -> None:
    # Seed 10's schedule isolates partition leaders past the session timeout; a leader
    # that answered acks=all before any follower fetched takes those writes with it.
    options = RunOptions(
        trace_dir=tmp_path / "traces",
        time_limit_s=30.0,
        nemeses=("partition",),
        seed=10,
        bug="ack-before-fetch",
    )
    report = run(options)
    assert leftovers(report.tag, report.work_dir) == []
    analysis = analyze_local(read_trace_pandas(str(options.trace_dir)))
    lost = {"lost-write", "unseen", "inconsistent-offsets"} & set(analysis.violations["check"])
    assert lost, analysis.violations.to_dict("records")


@pytest.mark.slow
def test_a_planted_answer_before_commit_loses_topic_changes_the_admin_checks_flag(
    tmp_path: Path,
) -> None:
    # The active controller, cut off from the other controllers but not from the brokers,
    # answers the changes they forward before they commit, and the other two controllers'
    # new leader truncates them. Without the bug the same schedule is clean.
    options = RunOptions(
        trace_dir=tmp_path / "traces",
        time_limit_s=40.0,
        nemeses=("depose-controller",),
        seed=1,
        bug="answer-before-commit",
        admin_lanes=3,
    )
    report = run(options)
    assert leftovers(report.tag, report.work_dir) == []
    analysis = analyze_local(read_trace_pandas(str(options.trace_dir)))
    assert "linearizability" in set(analysis.violations["check"]), analysis.violations
