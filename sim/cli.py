"""``kraft-sim``: run, sweep and list planted bugs of deterministic simulations.

Exit codes: 0 every run passed, 1 a run found a violation, 2 usage error.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace

from sim.nemesis import parse_faults
from sim.run import RunConfig, RunResult
from sim.scenarios import SCENARIOS

# String hashing must not vary between runs of one seed (ARCHITECTURE, determinism contract).
_HASH_SEED = "0"


def _fix_hash_seed() -> None:
    if os.environ.get("PYTHONHASHSEED") != _HASH_SEED:
        os.environ["PYTHONHASHSEED"] = _HASH_SEED
        os.execv(sys.executable, [sys.executable, "-m", "sim.cli", *sys.argv[1:]])


def _seeds(spec: str) -> list[int]:
    first, sep, last = spec.partition("-")
    try:
        lo, hi = int(first), int(last if sep else first)
    except ValueError:
        raise argparse.ArgumentTypeError(f"seeds must look like A-B, got {spec!r}") from None
    if hi < lo:
        raise argparse.ArgumentTypeError(f"empty seed range {spec!r}")
    return list(range(lo, hi + 1))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kraft-sim", description="Deterministic simulation of kraft-py clusters."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--scenario", required=True, choices=sorted(SCENARIOS))
        p.add_argument("--nodes", type=int, default=6, help="simulated nodes (default 6)")
        p.add_argument("--voters", type=int, default=3, help="raft voters (default 3)")
        p.add_argument("--observers", type=int, default=0, help="raft observers (default 0)")
        p.add_argument(
            "--controllers", type=int, default=3, help="metadata scenario: controllers (default 3)"
        )
        p.add_argument(
            "--brokers", type=int, default=3, help="metadata scenario: brokers (default 3)"
        )
        p.add_argument("--partitions", type=int, default=3, help="kafka: partitions (default 3)")
        p.add_argument("--rf", type=int, default=3, help="kafka: replication factor (default 3)")
        p.add_argument("--acks", choices=("all", "1"), default="all", help="kafka: producer acks")
        p.add_argument(
            "--idempotent", action="store_true", help="kafka: idempotent producers that retry"
        )
        p.add_argument("--duration", type=float, default=30.0, help="virtual seconds of faults")
        p.add_argument("--faults", default="all", help="all, none, or a comma list")
        p.add_argument("--bug", default=None, help="a planted bug (see `kraft-sim bugs`)")
        p.add_argument(
            "--trace",
            metavar="DIR",
            default=None,
            help="add each run's Parquet trace to DIR/runs/run_id=<id>/ (docs/traces.md)",
        )

    run = sub.add_parser("run", help="run one seed and print its summary line")
    common(run)
    run.add_argument("--seed", type=int, required=True)
    run.add_argument(
        "--trace-jsonl", metavar="FILE", default=None, help="write the event trace as JSON lines"
    )

    sweep = sub.add_parser("sweep", help="run a range of seeds in parallel processes")
    common(sweep)
    sweep.add_argument("--seeds", type=_seeds, required=True, help="A-B, inclusive")
    sweep.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    sweep.add_argument("--quiet", action="store_true", help="print only failing seeds")

    sub.add_parser("bugs", help="list the planted bugs of every scenario")
    return parser


def _config(args: argparse.Namespace, seed: int) -> RunConfig:
    scenario = SCENARIOS[args.scenario]
    if args.bug is not None and args.bug not in scenario.bugs:
        raise ValueError(f"unknown bug {args.bug!r} for scenario {args.scenario}")
    if args.nodes < 2:
        raise ValueError("--nodes must be at least 2")
    if not 1 <= args.voters <= 9 or not 0 <= args.observers <= 9:
        raise ValueError("--voters must be 1-9 and --observers 0-9")
    if not 1 <= args.controllers <= 9 or not 1 <= args.brokers <= 9:
        raise ValueError("--controllers and --brokers must be 1-9")
    if not 1 <= args.partitions <= 64 or not 1 <= args.rf <= args.brokers:
        raise ValueError("--partitions must be 1-64 and --rf 1..--brokers")
    if args.trace is not None:
        if os.path.exists(args.trace) and not os.path.isdir(args.trace):
            raise ValueError(f"--trace takes a directory; {args.trace} is a file")
        if importlib.util.find_spec("pyarrow") is None:
            raise ValueError("--trace needs pyarrow: pip install 'kraft-py[spark]'")
    return RunConfig(
        scenario=args.scenario,
        seed=seed,
        duration_s=args.duration,
        faults=parse_faults(args.faults, scenario.faults),
        bug=args.bug,
        nodes=args.nodes,
        voters=args.voters,
        observers=args.observers,
        controllers=args.controllers,
        brokers=args.brokers,
        partitions=args.partitions,
        rf=args.rf,
        acks=args.acks,
        idempotent=args.idempotent,
        trace_dir=args.trace,
    )


def run_config(config: RunConfig) -> RunResult:
    """Run one configuration (also the unit of work a sweep sends to a worker process)."""
    return SCENARIOS[config.scenario].run(config)


def _sweep(args: argparse.Namespace, base: RunConfig) -> int:
    from rich.progress import Progress

    failed: list[RunResult] = []
    configs = [replace(base, seed=seed) for seed in args.seeds]
    with (
        ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool,
        Progress(transient=True, disable=not sys.stderr.isatty()) as progress,
    ):
        bar = progress.add_task(f"{args.scenario} seeds", total=len(configs))
        for result in pool.map(run_config, configs):
            progress.advance(bar)
            if not result.ok:
                failed.append(result)
            if not args.quiet or not result.ok:
                progress.console.print(result.summary(), highlight=False, soft_wrap=True)
    first = min((r.seed for r in failed), default=None)
    first_text = "none" if first is None else str(first)
    print(f"seeds={len(configs)} failed={len(failed)} first_failing={first_text}")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``kraft-sim``."""
    if argv is None:
        _fix_hash_seed()
    args = _parser().parse_args(argv)
    # Node code logs recoveries and disk failures; in a simulation the trace records what
    # matters, so only errors reach the terminal.
    logging.basicConfig(level=logging.ERROR)
    if args.command == "bugs":
        for name, scenario in sorted(SCENARIOS.items()):
            for bug, what in sorted(scenario.bugs.items()):
                print(f"{name:10} {bug:24} {what}")
        return 0
    try:
        base = _config(args, getattr(args, "seed", 0))
    except ValueError as error:
        print(f"kraft-sim: {error}", file=sys.stderr)
        return 2
    if args.command == "run":
        result = run_config(replace(base, trace_path=args.trace_jsonl))
        print(result.summary())
        return 0 if result.ok else 1
    return _sweep(args, base)


if __name__ == "__main__":
    sys.exit(main())
