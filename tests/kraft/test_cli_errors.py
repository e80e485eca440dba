"""kraft-server's bad inputs end in one clear line and a non-zero exit, never a traceback:
unusable log dirs, a binary server.properties, a port already in use, describe-quorum
pointed at a broker, Ctrl-C during start-up (real processes)."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kraft.procs import KRAFT_SERVER, Processes, free_port, single_node

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"


def kraft_server(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [KRAFT_SERVER, *args], capture_output=True, text=True, timeout=60, check=False
    )


def one_error_line(result: subprocess.CompletedProcess[str], command: str) -> str:
    """The one line a failed command printed about its failure (logging aside)."""
    assert result.returncode != 0, result.stderr
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    (line,) = [x for x in result.stderr.splitlines() if x.startswith(f"kraft-server {command}")]
    assert result.stderr.rstrip().endswith(line)
    return line


def properties(path: Path, log_dirs: str, broker_port: int, controller_port: int) -> Path:
    path.write_text(
        "process.roles=broker,controller\nnode.id=1\n"
        f"controller.quorum.voters=1@127.0.0.1:{controller_port}\n"
        f"listeners=PLAINTEXT://127.0.0.1:{broker_port},CONTROLLER://127.0.0.1:{controller_port}\n"
        f"controller.listener.names=CONTROLLER\nlog.dirs={log_dirs}\n"
    )
    return path


@pytest.mark.parametrize(
    ("log_dirs", "expected"),
    [
        ("a-file", "log dir {} is not a directory"),
        ("/sys/kraft-test", "cannot create log dir {}: "),  # read-only, even for root
    ],
)
def test_an_unusable_log_dir_is_one_line(tmp_path: Path, log_dirs: str, expected: str) -> None:
    if log_dirs == "a-file":
        log_dirs = str(tmp_path / "a-file")
        Path(log_dirs).write_text("not a dir")
    config = properties(tmp_path / "s.properties", log_dirs, 1, 2)
    line = one_error_line(kraft_server("format", "-t", CLUSTER_ID, "-c", str(config)), "format")
    assert line.startswith(f"kraft-server format: {expected.format(log_dirs)}")


@pytest.mark.parametrize("command", ["format", "start"])
def test_empty_log_dirs_is_one_line(tmp_path: Path, command: str) -> None:
    config = properties(tmp_path / "s.properties", "", 1, 2)
    args = ["format", "-t", CLUSTER_ID, "-c", str(config)] if command == "format" else [command]
    if command == "start":
        args.append(str(config))
    line = one_error_line(kraft_server(*args), command)
    assert line == (
        f"kraft-server {command}: {config}: log.dirs: Value error, must name at least one directory"
    )


def test_a_binary_server_properties_is_one_line(tmp_path: Path) -> None:
    config = tmp_path / "s.properties"
    config.write_bytes(bytes(range(256)))
    line = one_error_line(kraft_server("start", str(config)), "start")
    assert line.startswith(f"kraft-server start: {config}: not a properties file (byte 0x80 ")


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Processes, int, Path]]:
    root = tmp_path_factory.mktemp("running")
    procs, bootstrap = single_node(root)
    try:
        yield procs, int(bootstrap.rpartition(":")[2]), root
    finally:
        procs.cleanup()


def test_a_freshly_formatted_node_does_not_claim_to_recover(
    running: tuple[Processes, int, Path],
) -> None:
    procs, _, _ = running
    assert "no clean shutdown marker" not in procs.log(1)


def test_a_port_already_in_use_is_one_line(running: tuple[Processes, int, Path]) -> None:
    _, broker_port, root = running
    config = properties(root / "taken.properties", str(root / "taken"), broker_port, free_port())
    kraft_server("format", "-t", CLUSTER_ID, "-c", str(config))
    line = one_error_line(kraft_server("start", str(config)), "start")
    assert "address already in use" in line
    assert str(broker_port) in line


def test_describe_quorum_at_a_broker_port_is_one_line(
    running: tuple[Processes, int, Path],
) -> None:
    _, broker_port, _ = running
    result = kraft_server("describe-quorum", "--bootstrap-controller", f"127.0.0.1:{broker_port}")
    line = one_error_line(result, "describe-quorum")
    assert line == (
        "kraft-server describe-quorum: no leader found: "
        f"127.0.0.1:{broker_port} gave no DescribeQuorum answer (not a controller?)"
    )


def test_ctrl_c_during_start_up_is_one_line(tmp_path: Path) -> None:
    config = properties(tmp_path / "s.properties", str(tmp_path / "d"), free_port(), free_port())
    config.write_text(config.read_text() + "log.retention.hourz=1\n")
    assert kraft_server("format", "-t", CLUSTER_ID, "-c", str(config)).returncode == 0
    proc = subprocess.Popen(
        [KRAFT_SERVER, "start", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    # The unknown-key warning is the first line start-up prints: interrupt right after it,
    # while the node's modules are still being imported.
    first = proc.stderr.readline()
    assert "log.retention.hourz" in first
    proc.send_signal(signal.SIGINT)
    rest = proc.stderr.read()
    code = proc.wait(timeout=60)
    result = subprocess.CompletedProcess(proc.args, code, "", first + rest)
    if code == 0:  # the handlers were in place already: a controlled shutdown, as Kafka's
        assert "Traceback" not in rest and "Shut down completed" in rest
    else:
        assert one_error_line(result, "start") == "kraft-server start: interrupted"
        assert code == 130
