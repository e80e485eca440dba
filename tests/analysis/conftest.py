"""Trace sets the analysis tests share, written by the real ``kraft-sim`` once per session."""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

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
