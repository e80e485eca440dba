"""Reading a trace directory: one Spark session factory, and Spark or pandas readers.

``spark_session`` is the only place a session is configured, so ``kraft-analyze``, the tests
and the notebooks behave alike. The readers return only *published* runs (a run directory
with its run row); half-written runs never exist, because the writer renames a complete
directory into place (sim/tracefmt.py).
"""

from __future__ import annotations

import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from sim.tracefmt import (
    EVENTS_FILE,
    EVENTS_SCHEMA,
    HISTORY_FILE,
    HISTORY_SCHEMA,
    RUN_FILE,
    RUNS_DIR,
    RUNS_SCHEMA,
    check_version,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

_LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
logger.repl.name = org.apache.spark.repl.Main
logger.repl.level = error
logger.pyspark.name = org.apache.spark.api.python.PythonGatewayServer
logger.pyspark.level = error
"""


class TraceDirError(ValueError):
    """The trace directory is missing, empty, or written by an unknown schema version."""


def _is_local(path: str) -> bool:
    return "://" not in path or path.startswith("file://")


def _local_path(path: str) -> Path:
    return Path(path.removeprefix("file://"))


def _quiet_log_config() -> str:
    """A log4j2 file that keeps Spark to errors on stderr (a run's stdout is its verdict)."""
    path = Path(tempfile.gettempdir()) / "kraft-analyze-log4j2.properties"
    if not path.exists() or path.read_text() != _LOG4J2:
        staging = path.with_name(f".{path.name}.{os.getpid()}")
        staging.write_text(_LOG4J2)
        os.replace(staging, path)
    return str(path)


def spark_session(
    master: str | None = None,
    *,
    app_name: str = "kraft-analyze",
    shuffle_partitions: int | None = None,
    driver_memory: str = "4g",
) -> SparkSession:
    """The Spark session every entry point uses: local[*] unless a master is given.

    Under ``spark-submit`` (a master already configured) pass ``master=None`` and the
    submitted configuration wins. Local sessions run Python workers on this interpreter,
    keep the UI off, and use few shuffle partitions: trace analyses shuffle small frames
    and Spark's default of 200 partitions would mostly schedule empty tasks.
    """
    from pyspark.sql import SparkSession

    # spark-submit starts the JVM first and hands this process its gateway.
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ
    if master is None and not submitted:
        master = "local[*]"
    local = master is not None and master.startswith("local")
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    if local:
        # Workers must import kraft-py, pandas and pyarrow: the driver's venv has them all.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        partitions = shuffle_partitions or max(2, 2 * (os.cpu_count() or 1))
        builder = builder.config("spark.sql.shuffle.partitions", str(partitions))
        builder = builder.config("spark.driver.memory", driver_memory)
    elif shuffle_partitions is not None:
        builder = builder.config("spark.sql.shuffle.partitions", str(shuffle_partitions))
    log_config = f"-Dlog4j2.configurationFile=file:{_quiet_log_config()}"
    spark = (
        builder.config("spark.ui.enabled", "false")
        # Spark's own stage bar (tasks done of total) on a terminal; never in a log file,
        # where its carriage returns would be one endless line.
        .config("spark.ui.showConsoleProgress", str(sys.stderr.isatty()).lower())
        .config("spark.driver.extraJavaOptions", log_config)
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


@dataclass(frozen=True, slots=True)
class TraceFrames:
    """The three tables of a trace directory as Spark DataFrames (published runs only)."""

    runs: DataFrame
    history: DataFrame
    events: DataFrame


@dataclass(frozen=True, slots=True)
class LocalTrace:
    """The same three tables as pandas frames, for one run or a small trace set."""

    runs: pd.DataFrame
    history: pd.DataFrame
    events: pd.DataFrame


def check_trace_dir(trace_dir: str) -> None:
    """Raise TraceDirError unless ``trace_dir`` (a local path) holds at least one run.

    Remote URIs (hdfs://, s3a://) are left to Spark, which reports its own errors.
    """
    if not _is_local(trace_dir):
        return
    root = _local_path(trace_dir)
    if not root.is_dir():
        raise TraceDirError(f"{trace_dir}: no such directory")
    if not any((root / RUNS_DIR).glob(f"run_id=*/{RUN_FILE}")):
        raise TraceDirError(
            f"{trace_dir}: no runs (expected {RUNS_DIR}/run_id=<id>/{RUN_FILE}; "
            "write some with `kraft-sim run|sweep ... --trace DIR`)"
        )


def _spark_schema(schema: pa.Schema):  # type: ignore[no-untyped-def]
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)


def load_trace(spark: SparkSession, trace_dir: str) -> TraceFrames:
    """Read every published run under ``trace_dir`` (any Hadoop-readable URI), lazily.

    Nothing runs until an action; check the run table with ``check_versions`` once it is
    collected (the job does).
    """
    check_trace_dir(trace_dir)
    root = trace_dir.rstrip("/") + "/" + RUNS_DIR

    def table(file_name: str, schema: pa.Schema) -> DataFrame:
        # An explicit schema: no footer sampling over thousands of small files, and a
        # column added later (nullable, same schema version) reads as null in older runs.
        # Listing skips names starting with "." or "_", which is how staging dirs hide.
        return (
            spark.read.schema(_spark_schema(schema))
            .option("recursiveFileLookup", "true")
            .option("pathGlobFilter", file_name)
            .parquet(root)
        )

    runs = table(RUN_FILE, RUNS_SCHEMA)
    published = runs.select("run_id")
    history = table(HISTORY_FILE, HISTORY_SCHEMA).join(published, "run_id", "left_semi")
    events = table(EVENTS_FILE, EVENTS_SCHEMA).join(published, "run_id", "left_semi")
    return TraceFrames(runs=runs, history=history, events=events)


def check_versions(runs: pd.DataFrame, trace_dir: str) -> None:
    """Raise TraceDirError if there are no runs or one was written by an unknown schema."""
    if runs.empty:
        raise TraceDirError(f"{trace_dir}: no runs")
    for version in runs["schema_version"].unique():
        try:
            check_version(int(version))
        except ValueError as error:
            raise TraceDirError(f"{trace_dir}: {error}") from None


def run_dirs(trace_dir: str) -> list[Path]:
    """The published run directories under a local ``trace_dir``, sorted by run id."""
    root = _local_path(trace_dir) / RUNS_DIR
    return sorted(path.parent for path in root.glob(f"run_id=*/{RUN_FILE}"))


def read_trace_pandas(trace_dir: str, run_ids: list[str] | None = None) -> LocalTrace:
    """Read published runs of a local trace directory into pandas (no Spark needed)."""
    check_trace_dir(trace_dir)
    wanted = None if run_ids is None else set(run_ids)
    dirs = [d for d in run_dirs(trace_dir) if wanted is None or d.name[7:] in wanted]

    def table(file_name: str, schema: pa.Schema) -> pd.DataFrame:
        tables = [pq.read_table(d / file_name, schema=schema) for d in dirs]
        if not tables:
            return schema.empty_table().to_pandas()
        return pa.concat_tables(tables).to_pandas()

    runs = table(RUN_FILE, RUNS_SCHEMA)
    check_versions(runs, trace_dir)
    return LocalTrace(
        runs=runs,
        history=table(HISTORY_FILE, HISTORY_SCHEMA),
        events=table(EVENTS_FILE, EVENTS_SCHEMA),
    )


def read_runs(spark: SparkSession, trace_dir: str, run_ids: list[str]) -> LocalTrace:
    """A few runs of any trace directory (local or remote) collected into pandas via Spark."""
    from pyspark.sql import functions as F

    frames = load_trace(spark, trace_dir)
    wanted = F.col("run_id").isin(list(run_ids))
    return LocalTrace(
        runs=frames.runs.where(wanted).toPandas(),
        history=frames.history.where(wanted).toPandas(),
        events=frames.events.where(wanted).toPandas(),
    )
