"""``kraft-jepsen``: fault runs on real kraft-server processes (docs/jepsen.md).

    kraft-jepsen run [--nodes 3+3] [--time-limit 60] [--nemesis partition,kill] [--seed 1]
                     [--bug NAME] [--trace DIR] [--kafka-lib DIR] [--txn-lanes N] ...
    kraft-jepsen table [--trace DIR] [RUN_ID]
    kraft-jepsen cleanup

``run`` prints the run's trace directory and its verdict (the checks kraft-analyze runs,
here on pandas for this one run) and exits 0 when clean, 1 on a violation, 2 on a usage or
set-up error. ``cleanup`` removes what any run left behind (namespaces and their processes,
links, the root FORWARD rule, data dirs) and prints one line per item; a run whose harness
is alive (it holds its work dir's lock) is spared. ``table`` prints the anomalies table
(jepsen/table.py) of a run in the trace dir (the newest when none is named): what each check
found on it and on the other system's newest run with its schedule.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from jepsen.cluster import LAYOUT
from jepsen.nemesis import NEMESES
from jepsen.run import ADMIN_LANES

_MAX_LISTED = 20


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kraft-jepsen",
        description="Jepsen-style fault runs on real kraft-server processes in network namespaces.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="one run: cluster, workload, nemesis, verdict")
    run.add_argument("--nodes", default="3+3", help="CONTROLLERS+BROKERS (default 3+3)")
    run.add_argument("--time-limit", type=float, default=60.0, help="seconds of faults")
    run.add_argument(
        "--nemesis",
        default="partition,kill",
        help=f"comma list of {','.join(NEMESES)}, or all/none (default partition,kill)",
    )
    run.add_argument("--seed", type=int, default=1, help="the nemesis schedule's and clients' seed")
    run.add_argument("--partitions", type=int, default=3)
    run.add_argument(
        "--admin-lanes",
        type=int,
        default=ADMIN_LANES,
        help=f"admin clients changing topics, as the metadata scenario (default {ADMIN_LANES})",
    )
    run.add_argument(
        "--java-lanes",
        type=int,
        default=0,
        help="lanes of Apache Kafka's Java client (needs java; scripts/kafka-tools.sh's jars)",
    )
    run.add_argument(
        "--txn-lanes",
        type=int,
        default=0,
        help="librdkafka transactional producer lanes, with read_committed consumers (default 0)",
    )
    run.add_argument(
        "--java-txn-lanes",
        type=int,
        default=0,
        help="the Java client's transactional lanes (transactions and read_committed polls)",
    )
    run.add_argument("--bug", help="plant a bug in every node (KRAFT_PLANTED_BUGS)")
    run.add_argument("--trace", default="jepsen-traces", help="Parquet trace dir (kraft-analyze)")
    run.add_argument("--layout", default=str(LAYOUT), help="cluster layout dir (config/cluster)")
    run.add_argument(
        "--fake-monotonic",
        action="store_true",
        help="clock faults move the monotonic clock (asyncio's timers) too, not only wall time",
    )
    run.add_argument("--keep-data", action="store_true", help="keep the nodes' data and logs")
    run.add_argument(
        "--kafka-lib",
        type=Path,
        help="run Apache Kafka from this lib dir (scripts/kafka-dist.sh lib) instead of kraft-py",
    )
    table = sub.add_parser("table", help="each check's findings per system on one schedule")
    table.add_argument("--trace", default="jepsen-traces", help="Parquet trace dir")
    table.add_argument("run_id", nargs="?", help="a run of the trace dir (default the newest)")
    sub.add_parser("cleanup", help="remove what any run left behind")
    return parser


def _nodes(text: str) -> tuple[int, int]:
    controllers, plus, brokers = text.partition("+")
    if not plus or not controllers.isdigit() or not brokers.isdigit():
        raise ValueError(f"--nodes {text!r} is not CONTROLLERS+BROKERS (e.g. 3+3)")
    return int(controllers), int(brokers)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``kraft-jepsen``."""
    args = _parser().parse_args(argv)
    if args.command == "cleanup":
        from jepsen.netns import cleanup
        from jepsen.run import cleanup_work_dirs, live_tags

        live = live_tags()
        for tag in sorted(live):
            print(f"spared the live run {tag}")
        for line in cleanup(live) + cleanup_work_dirs(live):
            print(f"removed {line}")
        return 0
    if args.command == "table":
        return _table(args.trace, args.run_id)
    return _run(args)


def _table(trace_dir: str, run_id: str | None) -> int:
    from jepsen.table import columns, newest_run, render

    try:
        chosen = run_id if run_id is not None else newest_run(trace_dir)
        print(render(columns(trace_dir, chosen)))
    except LookupError as error:
        print(f"kraft-jepsen table: {error.args[0]}", file=sys.stderr)
        return 2
    return 0


def _run(args: argparse.Namespace) -> int:
    from jepsen.cluster import LayoutError
    from jepsen.nemesis import parse_nemeses
    from jepsen.netns import BackendError
    from jepsen.run import RunError, RunOptions, run
    from kraft.config import ConfigError
    from kraft.planted import PLANTED_BUGS_ENV, planted_bugs

    try:
        controllers, brokers = _nodes(args.nodes)
        for flag, lanes in (
            ("--admin-lanes", args.admin_lanes),
            ("--java-lanes", args.java_lanes),
            ("--txn-lanes", args.txn_lanes),
            ("--java-txn-lanes", args.java_txn_lanes),
        ):
            if lanes < 0:
                raise ValueError(f"{flag} {lanes}: must be 0 or more")
        nemeses = parse_nemeses(args.nemesis)
        if args.bug is not None:
            planted_bugs({PLANTED_BUGS_ENV: args.bug})
        options = RunOptions(
            trace_dir=Path(args.trace),
            controllers=controllers,
            brokers=brokers,
            time_limit_s=args.time_limit,
            nemeses=nemeses,
            seed=args.seed,
            partitions=args.partitions,
            bug=args.bug,
            layout=Path(args.layout),
            fake_monotonic=args.fake_monotonic,
            keep_data=args.keep_data,
            kafka_lib=args.kafka_lib,
            admin_lanes=args.admin_lanes,
            java_lanes=args.java_lanes,
            txn_lanes=args.txn_lanes,
            java_txn_lanes=args.java_txn_lanes,
        )
        report = run(options)
    except (ValueError, ConfigError, LayoutError, BackendError, RunError) as error:
        print(f"kraft-jepsen run: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("kraft-jepsen run: interrupted; everything torn down", file=sys.stderr)
        return 130
    print(f"kraft-jepsen: run {report.run_id}: {report.faults} faults, trace {report.run_dir}")
    code = verdict(args.trace, report.run_id)
    if options.transactional:
        from jepsen.table import columns, render

        print(render(columns(args.trace, report.run_id)))
    return code


def verdict(trace_dir: str, run_id: str) -> int:
    """Print one run's verdict as kraft-analyze would; 0 clean, 1 violation."""
    from sim.analysis.job import analyze_local
    from sim.analysis.load import read_trace_pandas

    analysis = analyze_local(read_trace_pandas(trace_dir, [run_id]))
    for row in analysis.violations.head(_MAX_LISTED).itertuples(index=False):
        print(f"VIOLATION {row.check}: {row.message}", file=sys.stderr)
    print(analysis.verdict_line())
    return 1 if analysis.violating_runs else 0


if __name__ == "__main__":
    sys.exit(main())
