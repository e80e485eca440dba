"""``kraft-analyze DIR [--master URL] [--out REPORT_DIR]``: check and summarise traces with Spark.

Reads every run under DIR (written by ``kraft-sim ... --trace DIR``), re-derives each run's
verdict from its history and node events, and prints one line, ``runs=N violations=V``.
With ``--out`` it also writes report.md, its PNG plots and summary.json there.

Exit codes: 0 no run violates an invariant, 1 at least one does, 2 usage error (missing or
empty trace directory, unknown schema version). Runs on ``local[*]`` unless ``--master``
names a cluster, or under ``spark-submit`` (see docs/traces.md).
"""

from __future__ import annotations

import argparse
import sys

# Violating runs listed on stderr before the verdict line; the rest are in the report.
_MAX_LISTED = 20


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kraft-analyze",
        description="Check and summarise simulation traces with PySpark (local[*] or --master).",
    )
    parser.add_argument("trace_dir", help="trace directory (kraft-sim --trace DIR); any URI")
    parser.add_argument(
        "--master",
        default=None,
        help="Spark master URL (default local[*], or what spark-submit configured)",
    )
    parser.add_argument("--out", default=None, help="write report.md, PNGs, summary.json here")
    parser.add_argument(
        "--shuffle-partitions", type=int, default=None, help="spark.sql.shuffle.partitions"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``kraft-analyze``."""
    args = _parser().parse_args(argv)
    from sim.analysis.load import TraceDirError, check_trace_dir

    try:
        check_trace_dir(args.trace_dir)
    except TraceDirError as error:
        print(f"kraft-analyze: {error}", file=sys.stderr)
        return 2
    from pyspark.sql import SparkSession

    from sim.analysis.job import analyze
    from sim.analysis.load import read_runs, spark_session
    from sim.analysis.report import showcase_runs, write_report

    owned = SparkSession.getActiveSession() is None
    spark = spark_session(args.master, shuffle_partitions=args.shuffle_partitions)
    try:
        analysis = analyze(spark, args.trace_dir)
        if args.out is not None:
            shown = showcase_runs(analysis)
            trace = read_runs(spark, args.trace_dir, shown)
            report = write_report(
                analysis, args.out, trace_dir=args.trace_dir, runs=dict.fromkeys(shown, trace)
            )
            print(f"kraft-analyze: report {report}", file=sys.stderr)
    except TraceDirError as error:
        print(f"kraft-analyze: {error}", file=sys.stderr)
        return 2
    finally:
        if owned:
            spark.stop()
    flagged = analysis.verdicts[analysis.verdicts["verdict"] == "violation"]
    for row in flagged.head(_MAX_LISTED).itertuples(index=False):
        print(f"VIOLATION {row.run_id} (seed {row.seed}): {row.violations[0]}", file=sys.stderr)
    if len(flagged) > _MAX_LISTED:
        print(f"... and {len(flagged) - _MAX_LISTED} more violating runs", file=sys.stderr)
    print(analysis.verdict_line())
    return 1 if len(flagged) else 0


if __name__ == "__main__":
    sys.exit(main())
