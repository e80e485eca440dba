"""Trace sets the analysis tests share, written by the real ``kraft-sim`` once per session."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.planted import KAFKA_BUG_ARGS, KAFKA_BUG_SEEDS

BIN = Path(sys.executable).parent


@dataclass(frozen=True)
class TraceSets:
    """``clean``: runs without a planted bug; ``mixed``: the same plus ack-before-fsync runs
    (about half of which lose acknowledged records, so the simulator flags them)."""

    clean: Path
    mixed: Path


def kraft_sim(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the real CLI; a sweep exits 1 when a seed fails, which the tests expect."""
    result = subprocess.run(
        [str(BIN / "kraft-sim"), *args], capture_output=True, text=True, check=False
    )
    assert result.returncode in (0, 1), result.stderr
    return result


def trace_run(root: Path, scenario: str, seed: int, bug: str | None, *extra: str) -> None:
    """One ``kraft-sim run`` adding its trace to ``root``: it fails exactly when ``bug`` is
    planted (each bug runs at the seed pinned to catch it)."""
    args = ["run", "--scenario", scenario, "--seed", str(seed), *extra, "--trace", str(root)]
    result = subprocess.run(
        [str(BIN / "kraft-sim"), *args, *(["--bug", bug] if bug else [])],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == (1 if bug else 0), result.stdout + result.stderr


@pytest.fixture(scope="session")
def traces(tmp_path_factory: pytest.TempPathFactory) -> TraceSets:
    root = tmp_path_factory.mktemp("traces")
    clean, mixed = root / "clean", root / "mixed"
    kraft_sim(
        "sweep", "--scenario", "echo", "--seeds", "1-6", "--duration", "10", "--trace", str(clean)
    )
    shutil.copytree(clean, mixed)
    kraft_sim(
        "sweep",
        "--scenario",
        "echo",
        "--seeds",
        "1-6",
        "--duration",
        "20",
        "--bug",
        "ack-before-fsync",
        "--trace",
        str(mixed),
        "--jobs",
        "2",
    )
    return TraceSets(clean=clean, mixed=mixed)


@pytest.fixture(scope="session")
def kafka_traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Kafka-scenario runs: three planted bugs at their catching seeds (20 s runs, as pinned),
    the first two caught by a data check each (inconsistent-offsets, duplicate), the
    coordinator's by ``lost-commit`` from the group consumers' history, and a
    shorter honest run with faults in which a restarted broker replays the metadata log
    (old image changes reported late). Shared by the report and notebook tests."""
    root = tmp_path_factory.mktemp("kafka-traces")
    runs = [
        (bug, KAFKA_BUG_SEEDS[bug], "20")
        for bug in ("ack-before-fetch", "skip-sequence-check", "coordinator-hw-over-truncated")
    ]
    for bug, seed, duration in [*runs, (None, 1, "10")]:
        extra = KAFKA_BUG_ARGS.get(bug, ()) if bug else ()
        trace_run(root, "kafka", seed, bug, "--duration", duration, *extra)
    return root


def named_partition(violation: str) -> tuple[str, str]:
    """(check, partition) of a kafka data violation as the simulator worded it, e.g.
    ``duplicate: value 3 was read at offset 4 of jepsen-1 ...`` gives (duplicate, jepsen-1)."""
    check, _, text = violation.partition(": ")
    found = re.search(r"\bof ([\w.]+-\d+)\b", text)
    assert found is not None, f"no partition named in {violation!r}"
    return check, found.group(1)
