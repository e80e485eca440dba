"""Apache Kafka's own Java CLI tools (scripts/kafka-tools.sh) for tests against kraft-py,
and Apache Kafka's broker (scripts/kafka-dist.sh) for tests that compare with it.

The first use installs the jars from Maven Central into ./.cache, so CI needs only Java 17
and Maven; later runs reuse the cache and work offline.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "kafka-tools.sh"
DIST_SCRIPT = ROOT / "scripts" / "kafka-dist.sh"
INSTALL_TIMEOUT_S = 600.0
RUN_TIMEOUT_S = 120.0


def install() -> None:
    """Fetch the jars unless they are cached; a missing java or mvn is a clear failure."""
    for needed in ("java", "mvn"):
        if shutil.which(needed) is None:
            raise RuntimeError(f"the Kafka CLI tools need {needed} on PATH (Java 17+, Maven)")
    subprocess.run(["bash", str(SCRIPT), "install"], check=True, timeout=INSTALL_TIMEOUT_S)


def kafka_dist_lib() -> Path:
    """The lib dir of Apache Kafka's broker (jepsen.servers.ApacheKafka runs it), installed
    once; a missing java or mvn is a clear failure."""
    for needed in ("java", "mvn"):
        if shutil.which(needed) is None:
            raise RuntimeError(f"Apache Kafka's broker needs {needed} on PATH (Java 17+, Maven)")
    out = subprocess.run(
        ["bash", str(DIST_SCRIPT), "lib"],
        capture_output=True,
        text=True,
        check=True,
        timeout=INSTALL_TIMEOUT_S,
    )
    return Path(out.stdout.strip())


def run(
    tool: str, *args: str, timeout: float = RUN_TIMEOUT_S, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run a Kafka tool (short name as in scripts/kafka-tools.sh, or a main class)."""
    result = subprocess.run(
        ["bash", str(SCRIPT), tool, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check and result.returncode != 0:
        raise AssertionError(
            f"kafka-tools {tool} {' '.join(args)} exited {result.returncode}:\n"
            f"{result.stdout}\n{result.stderr}"
        )
    return result


@pytest.fixture(scope="session")
def kafka_tools() -> Callable[..., subprocess.CompletedProcess[str]]:
    """Installs the tools once per session and hands back :func:`run`."""
    install()
    return run
