"""How long the trace analysis takes on 1,000,000 history operations: Spark against plain Python.

Generates the trace with the simulator (``kraft-sim sweep --scenario echo --duration 60
--trace DIR`` over as many seeds as it takes to reach the row target), then, from one run:
1. ``kraft-analyze``'s job (sim.analysis.job.analyze) on Spark in local mode, session start
   timed apart from the job;
2. the baseline: the same checks and statistics in one Python process over the same Parquet
   (pyarrow -> pandas -> sim.analysis.job.analyze_local, the very functions Spark's tasks run).
Both must reach the same verdict line; the bench fails otherwise.

Run: .venv/bin/python bench/bench_analyze.py [--rows 1000000] [--trace-dir DIR] [--master M]
A trace directory that already holds enough rows is reused, so a second run times only the
analysis.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

from sim.analysis.job import analyze, analyze_local
from sim.analysis.load import read_trace_pandas, run_dirs, spark_session
from sim.tracefmt import RUN_FILE

DURATION_S = 60
BATCH_SEEDS = 40  # seeds per sweep call, so the row count is checked as the trace grows


def trace_rows(trace_dir: Path) -> tuple[int, int]:
    """(history rows, runs) already published under ``trace_dir``."""
    if not trace_dir.is_dir():
        return 0, 0
    dirs = run_dirs(str(trace_dir))
    rows = sum(int(pq.read_table(d / RUN_FILE)["history_rows"][0].as_py()) for d in dirs)
    return rows, len(dirs)


def generate(trace_dir: Path, target_rows: int) -> float:
    """Sweep seeds until the trace holds ``target_rows`` history rows; wall seconds spent."""
    started = time.perf_counter()
    kraft_sim = str(Path(sys.executable).parent / "kraft-sim")
    rows, runs = trace_rows(trace_dir)
    next_seed = runs + 1
    while rows < target_rows:
        last = next_seed + BATCH_SEEDS - 1
        command = [kraft_sim, "sweep", "--scenario", "echo", "--seeds", f"{next_seed}-{last}"]
        command += ["--duration", str(DURATION_S), "--trace", str(trace_dir), "--quiet"]
        # Exit 1 means some seed found a violation: still a valid trace to analyse.
        subprocess.run(command, check=False, stdout=subprocess.DEVNULL)
        next_seed = last + 1
        rows, runs = trace_rows(trace_dir)
        print(f"  generated {rows:,} rows in {runs} runs", file=sys.stderr)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="history rows to analyse")
    parser.add_argument("--trace-dir", default=None, help="trace directory (created if needed)")
    parser.add_argument("--master", default=None, help="Spark master (default local[*])")
    args = parser.parse_args()
    default_dir = Path(tempfile.gettempdir()) / f"kraft-bench-trace-{args.rows}"
    trace_dir = Path(args.trace_dir) if args.trace_dir else default_dir
    generated_s = generate(trace_dir, args.rows)
    rows, runs = trace_rows(trace_dir)
    size_mb = sum(f.stat().st_size for f in trace_dir.rglob("*.parquet")) / 1e6

    started = time.perf_counter()
    spark = spark_session(args.master)
    session_s = time.perf_counter() - started
    cores = spark.sparkContext.defaultParallelism
    master = spark.sparkContext.master
    started = time.perf_counter()
    spark_analysis = analyze(spark, str(trace_dir))
    spark_s = time.perf_counter() - started
    spark.stop()

    started = time.perf_counter()
    local_analysis = analyze_local(read_trace_pandas(str(trace_dir)))
    python_s = time.perf_counter() - started

    same = spark_analysis.verdict_line() == local_analysis.verdict_line()
    print(f"trace: {trace_dir} ({size_mb:.1f} MB Parquet, generated in {generated_s:.0f} s)")
    print(
        f"input: {rows:,} history rows, {spark_analysis.operations:,} operations, "
        f"{runs} runs, {spark_analysis.keys_checked} (run, key) histories"
    )
    print(f"spark {master}: {cores} cores (os.cpu_count()={os.cpu_count()})")
    print(f"  session start: {session_s:.1f} s")
    print(f"  job: {spark_s:.1f} s ({rows / spark_s:,.0f} rows/s)  {spark_analysis.verdict_line()}")
    print(
        f"plain python (one process): {python_s:.1f} s ({rows / python_s:,.0f} rows/s)  "
        f"{local_analysis.verdict_line()}"
    )
    print(
        f"ratio spark job / plain python: {spark_s / python_s:.2f}x; "
        f"with session start: {(spark_s + session_s) / python_s:.2f}x"
    )
    print(f"verdicts agree: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
