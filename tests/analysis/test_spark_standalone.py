"""kraft-analyze on a real Spark standalone cluster: a master and two workers started from
the installed pyspark on loopback, the job submitted with ``--master spark://...``, the same
verdicts as ``local[*]`` (docs/traces.md, "On a cluster")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pyspark
import pytest

from jepsen.processes import wait_until
from tests.analysis.conftest import BIN, TraceSets
from tests.kraft.procs import free_port

SPARK_CLASS = str(Path(pyspark.__file__).parent / "bin" / "spark-class")


def _alive_workers(ui_port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=2) as answer:
            return int(json.load(answer).get("aliveworkers", 0))
    except OSError:
        return 0


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[str]:
    """A master and two one-core workers; the master's URL."""
    port, ui_port = free_port(), free_port()
    # Executors run Python tasks importing sim.analysis: this interpreter and this checkout.
    environ = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOCAL_DIRS": str(tmp_path / "local"),
        "SPARK_WORKER_DIR": str(tmp_path / "work"),
    }
    log = open(tmp_path / "spark.log", "w")  # noqa: SIM115
    master = f"spark://127.0.0.1:{port}"
    daemons = [
        subprocess.Popen(
            [
                SPARK_CLASS,
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--webui-port",
                str(ui_port),
            ],
            env=environ,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    ]
    try:
        for _ in range(2):
            daemons.append(
                subprocess.Popen(
                    [
                        SPARK_CLASS,
                        "org.apache.spark.deploy.worker.Worker",
                        "--host",
                        "127.0.0.1",
                        "--webui-port",
                        str(free_port()),
                        "--cores",
                        "1",
                        "--memory",
                        "1g",
                        master,
                    ],
                    env=environ,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
        wait_until(lambda: _alive_workers(ui_port) == 2, "two workers registered", 120)
        yield master
    finally:
        for daemon in daemons:
            daemon.kill()
            daemon.wait()
        log.close()


def _analyze(trace_dir: Path, out: Path, *master: str) -> tuple[int, str, dict]:
    environ = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    result = subprocess.run(
        [str(BIN / "kraft-analyze"), str(trace_dir), "--out", str(out), *master],
        capture_output=True,
        text=True,
        env=environ,
        timeout=600,
        check=False,
    )
    summary = json.loads((out / "summary.json").read_text()) if out.exists() else {}
    return result.returncode, result.stdout.strip(), summary


@pytest.mark.slow
def test_a_standalone_cluster_gives_the_local_verdicts(
    traces: TraceSets, standalone: str, tmp_path: Path
) -> None:
    local = _analyze(traces.mixed, tmp_path / "local")
    cluster = _analyze(traces.mixed, tmp_path / "cluster", "--master", standalone)
    assert local[0] == 1 and local[2]["violating_runs"], local[:2]  # the bug runs are caught
    assert cluster[:2] == local[:2]
    verdicts = [{r["run_id"]: r["verdict"] for r in s["per_run"]} for s in (local[2], cluster[2])]
    assert verdicts[0] == verdicts[1]
