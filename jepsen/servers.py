"""The node programs a cluster of real processes can run: kraft-py's ``kraft-server``, or
Apache Kafka started from a lib dir of its jars (scripts/kafka-dist.sh assembles one from
Maven Central; an unpacked distribution's ``libs/`` works too), so the same harness, the
same workload and the same nemesis schedule compare the two.

A node program formats a node's storage with one cluster id and starts a node from a
properties file; both take the properties kraft-py's layout uses (Kafka's own keys)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

KRAFT_SERVER = str(Path(sys.executable).parent / "kraft-server")
# Java options of a Kafka node in a fault run: a small heap and one GC thread, so six JVMs
# fit a two-core machine; a benchmark passes Kafka's own defaults (KAFKA_JVM_OPTS below).
SMALL_JVM_OPTS = ("-Xms64m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")
# kafka-server-start.sh's defaults (KAFKA_HEAP_OPTS, KAFKA_JVM_PERFORMANCE_OPTS).
KAFKA_JVM_OPTS = (
    "-Xms1g",
    "-Xmx1g",
    "-server",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
)
# Where a lib dir's logging configuration is looked for: kafka-dist.sh writes the first
# two, a distribution ships the others.
SERVER_LOG4J = ("log4j2.properties", "../config/log4j2.yaml")
TOOLS_LOG4J = ("tools-log4j2.properties", "../config/tools-log4j2.yaml")


# Why a JVM gets no wall-clock-only clock faults: libfaketime 0.9.10 (Debian 12) with
# FAKETIME_DONT_FAKE_MONOTONIC=1 slows a JVM about twentyfold (Kafka's StorageTool: 2 s to
# 35-45 s; a broker does not come up within the set-up bound), while with both clocks faked
# it runs at full speed.
JVM_WALL_CLOCK_ONLY = (
    "libfaketime faking only the wall clock slows a JVM twentyfold; "
    "clock faults on Apache Kafka need --fake-monotonic"
)


class NodeProgram(Protocol):
    """How a node is formatted and started (argv lists; the caller runs them)."""

    name: str
    # Why the program cannot run under libfaketime with only the wall clock faked (None: it
    # can); the harness then skips wall-clock-only clock faults and records this reason.
    wall_clock_only: str | None

    def random_uuid(self) -> str:
        """A fresh cluster id."""

    def format_argv(self, cluster_id: str, config: Path) -> list[str]:
        """Format the storage (log.dirs) of the node ``config`` describes."""

    def start_argv(self, config: Path) -> list[str]:
        """Run the node in the foreground until a signal ends it."""


@dataclass(frozen=True, slots=True)
class KraftServer:
    """kraft-py's ``kraft-server`` from this Python's environment."""

    name: str = "kraft-py"
    wall_clock_only: str | None = None

    def random_uuid(self) -> str:
        argv = [KRAFT_SERVER, "random-uuid"]
        return subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip()

    def format_argv(self, cluster_id: str, config: Path) -> list[str]:
        return [KRAFT_SERVER, "format", "-t", cluster_id, "-c", str(config)]

    def start_argv(self, config: Path) -> list[str]:
        return [KRAFT_SERVER, "start", str(config)]


KRAFT_PY = KraftServer()


class KafkaLibError(ValueError):
    """The lib dir does not hold an Apache Kafka broker: one line for a CLI."""


@dataclass(frozen=True, slots=True)
class ApacheKafka:
    """Apache Kafka's broker (``kafka.Kafka``) and StorageTool from the jars in ``lib``,
    run by ``java`` with ``jvm_opts``: exactly ``java -cp LIB/* kafka.Kafka CONFIG``."""

    lib: Path
    jvm_opts: tuple[str, ...] = SMALL_JVM_OPTS
    name: str = "kafka"
    wall_clock_only: str | None = JVM_WALL_CLOCK_ONLY

    def __post_init__(self) -> None:
        if not sorted(self.lib.glob("kafka_2.*.jar")):
            raise KafkaLibError(
                f"{self.lib} holds no kafka_2.*.jar (scripts/kafka-dist.sh install makes one)"
            )

    def _java(self, log4j: tuple[str, ...], main: str, *args: str) -> list[str]:
        config = next((self.lib / c for c in log4j if (self.lib / c).is_file()), None)
        logging = [] if config is None else [f"-Dlog4j2.configurationFile={config.resolve()}"]
        classpath = f"{self.lib.resolve()}/*"
        return ["java", *self.jvm_opts, *logging, "-cp", classpath, main, *args]

    def random_uuid(self) -> str:
        argv = self._java(TOOLS_LOG4J, "kafka.tools.StorageTool", "random-uuid")
        return subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip()

    def format_argv(self, cluster_id: str, config: Path) -> list[str]:
        args = ("format", "-t", cluster_id, "-c", str(config))
        return self._java(TOOLS_LOG4J, "kafka.tools.StorageTool", *args)

    def start_argv(self, config: Path) -> list[str]:
        return self._java(SERVER_LOG4J, "kafka.Kafka", str(config))
